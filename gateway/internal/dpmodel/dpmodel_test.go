// SPDX-License-Identifier: Apache-2.0

package dpmodel

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// A chain of two NFs (100 + 200 cycles), 100 cycles of I/O, a 50-cycle copy and 1000-cycle
// handoffs on a 1 GHz core: 450 cycles per packet and 2000 per turn.
var testCost = policy.Cost{NFCycles: []float64{100, 200}, IOCycles: 100, CopyCycles: 50,
	HandoffCycles: 1000, FreqHz: 1e9, BurstMax: 32}

func Test_serve_handComputedTurnTimes(t *testing.T) {
	var h Hist
	c := NewCore(1e9, 1, 0)
	g := NewSGroup("g", testCost, 1, 4096, &h, 1, 0)
	c.Attach(g, 0, 0)
	g.Inject(0, 40, 0, 0) // 40 packets at t = 0, no other arrival (rate 0)
	c.RunUntil(1e-3)
	// Batch 1: a turn of 32 (32·450 + 2·1000 = 16 400 cycles = 16.4 µs), then one of 8
	// (8·450 + 2000 = 5 600 cycles), ending at 22.0 µs.
	if g.Served != 40 || g.Turns != 2 {
		t.Fatalf("served %d in %d turns, want 40 in 2", g.Served, g.Turns)
	}
	if math.Abs(c.Busy-22e-6) > 1e-12 {
		t.Fatalf("busy %.9f s, want 22 µs", c.Busy)
	}
	// Eq. 1: the same as Cost.Cycles(bursts, fill) × packets.
	if got := testCost.Cycles(1, 32)*32 + testCost.Cycles(1, 8)*8; math.Abs(got-22000) > 1e-6 {
		t.Fatalf("Cost.Cycles gives %.1f cycles, want 22000", got)
	}
	if p := h.Quantile(0.5) * 1e6; math.Abs(p-16.4)/16.4 > 0.02 {
		t.Fatalf("p50 %.2f µs, want 16.4", p)
	}
	if m := h.Max() * 1e6; math.Abs(m-22) > 1e-6 {
		t.Fatalf("max %.3f µs, want 22", m)
	}

	// Batch 2: one turn of 2 bursts (40·450 + 2000 = 20 µs).
	var h2 Hist
	c2 := NewCore(1e9, 1, 0)
	g2 := NewSGroup("g", testCost, 2, 4096, &h2, 1, 0)
	c2.Attach(g2, 0, 0)
	g2.Inject(0, 40, 0, 0)
	c2.RunUntil(1e-3)
	if g2.Turns != 1 || math.Abs(c2.Busy-20e-6) > 1e-12 {
		t.Fatalf("batch 2: %d turns, busy %.9f s; want 1 turn of 20 µs", g2.Turns, c2.Busy)
	}
}

func Test_admit_lossWhenQueueFull(t *testing.T) {
	var h Hist
	c := NewCore(1e9, 1, 0)
	g := NewSGroup("g", testCost, 1, 100, &h, 1, 0)
	c.Attach(g, 0, 0)
	g.Inject(0, 150, 0, 0)
	if g.Dropped != 50 || g.QueueLen() != 100 {
		t.Fatalf("dropped %d, queue %d; want 50 and 100", g.Dropped, g.QueueLen())
	}
	// Twice the core's rate for 10 ms: the queue fills and the excess is lost.
	g.SetRate(0, 2*testCost.Rate(1, 32))
	c.RunUntil(0.01)
	g.Admit(c.T)
	if g.Dropped < 1000 {
		t.Fatalf("only %d dropped at twice the max rate", g.Dropped)
	}
	if g.Arrived != g.Served+g.Dropped+uint64(g.QueueLen()) {
		t.Fatalf("arrived %d ≠ served %d + dropped %d + queued %d", g.Arrived, g.Served, g.Dropped, g.QueueLen())
	}
	if g.QueueMax > 100 {
		t.Fatalf("queue reached %d > capacity 100", g.QueueMax)
	}
}

func Test_runLoad_sameSeedSameOutput(t *testing.T) {
	a := RunLoad(testCost, 2, 0.7*testCost.Rate(2, 32), 100_000, 7)
	b := RunLoad(testCost, 2, 0.7*testCost.Rate(2, 32), 100_000, 7)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different points: %+v vs %+v", a, b)
	}
	c := RunLoad(testCost, 2, 0.7*testCost.Rate(2, 32), 100_000, 8)
	if reflect.DeepEqual(a, c) {
		t.Fatalf("different seeds gave the same point %+v", a)
	}
}

func Test_runLoad_latencyGrowsWithLoad(t *testing.T) {
	lo := RunLoad(testCost, 2, 0.2*testCost.Rate(2, 32), 100_000, 1)
	hi := RunLoad(testCost, 2, 0.9*testCost.Rate(2, 32), 100_000, 1)
	if !(hi.P99us > lo.P99us && hi.QueueMax > lo.QueueMax) {
		t.Fatalf("load 0.9 (%+v) not worse than 0.2 (%+v)", hi, lo)
	}
}

func Test_maxRate_matchesEq1AtFullTurns(t *testing.T) {
	got := MaxRate(testCost, 4, 0.05, 1)
	want := testCost.Rate(4, 32)
	if math.Abs(got-want)/want > 0.01 {
		t.Fatalf("saturated core serves %.0f pps, eq. 1 says %.0f", got, want)
	}
}

func Test_poisson_meanAndVariance(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, mu := range []float64{0.3, 4, 25, 400} {
		const n = 40000
		s, s2 := 0.0, 0.0
		for i := 0; i < n; i++ {
			x := float64(Poisson(r, mu))
			s += x
			s2 += x * x
		}
		m := s / n
		v := s2/n - m*m
		if math.Abs(m-mu) > 4*math.Sqrt(mu/n) || math.Abs(v-mu)/mu > 0.05 {
			t.Fatalf("mu %.1f: mean %.3f, variance %.3f", mu, m, v)
		}
	}
}

func Test_hist_quantilesOfARange(t *testing.T) {
	var h Hist
	h.AddRange(0, 100e-6, 1000) // evenly over 0–100 µs
	if p := h.Quantile(0.5) * 1e6; math.Abs(p-50) > 4 {
		t.Fatalf("p50 %.2f µs, want ~50", p)
	}
	if p := h.Quantile(0.99) * 1e6; math.Abs(p-99) > 4 {
		t.Fatalf("p99 %.2f µs, want ~99", p)
	}
}

// A moved flow's held packets: their latency counts the hold (end to end), the instance's
// own sojourn measurement only the time since their release.
func Test_injectHeld_holdInLatencyNotInTheInstancesWindow(t *testing.T) {
	var h, w Hist
	c := NewCore(1e9, 1, 0)
	g := NewSGroup("g", testCost, 1, 100, &h, 1, 0)
	g.Window = &w
	c.Attach(g, 0, 0)
	c.RunUntil(0.05)                // the simulator brings the core to the release first
	g.InjectHeld(0.05, 10, 0, 0.05) // held 50 ms
	c.RunUntil(0.06)
	if g.Served != 10 {
		t.Fatalf("served %d, want 10", g.Served)
	}
	if h.Max() < 0.05 || w.Max() > 0.001 {
		t.Fatalf("latency max %.6f s (want ≥ 0.05), window max %.6f s (want under 1 ms)", h.Max(), w.Max())
	}
}
