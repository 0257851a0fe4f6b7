// SPDX-License-Identifier: Apache-2.0

package measure

import (
	"testing"
	"time"

	"github.com/keel-nfv/keel/agent/internal/nfstats"
	"github.com/keel-nfv/keel/agent/internal/vf"
)

func Test_Between_takes_rate_and_cycles_from_the_VF_and_coopsched(t *testing.T) {
	t0 := time.Unix(100, 0)
	prev := Sample{At: t0, VF: vf.Counters{RxPackets: 1000, RxBytes: 1e5, RxDropped: 10}, CPUns: 1e9, HasCPU: true}
	cur := Sample{At: t0.Add(2 * time.Second), VF: vf.Counters{RxPackets: 3000, RxBytes: 3e5, RxDropped: 210}, CPUns: 2e9, HasCPU: true}
	f := Between(prev, cur, 2e9)
	want := Figures{OfferedPPS: 1100, OfferedGbps: 0.0008, DeliveredPPS: 1000, CyclesPerPacket: 1e6}
	if f != want {
		t.Fatalf("%+v, want %+v", f, want)
	}
	// The VF made again: its counters start over, no figure for this interval.
	cur.VF.RxPackets = 5
	if f := Between(prev, cur, 2e9); f != (Figures{}) {
		t.Fatalf("after a reset %+v, want none", f)
	}
	// coopsched does not know the sgroup: a rate, no cycles.
	cur.VF.RxPackets, cur.HasCPU = 3000, false
	if f := Between(prev, cur, 2e9); f.CyclesPerPacket != 0 || f.DeliveredPPS != 1000 {
		t.Fatalf("without CPU time %+v", f)
	}
}

func Test_Check_flags_what_no_honest_NF_reports_and_tolerates_lag(t *testing.T) {
	fig := Figures{DeliveredPPS: 10_000, CyclesPerPacket: 3000}
	vfc := vf.Counters{RxPackets: 50_000}
	nf := func(rx uint64, queue uint32, cycles float64) nfstats.Sample {
		return nfstats.Sample{Packets: rx, QueueLen: queue, NFs: []nfstats.NF{{CyclesPerPacket: cycles}}}
	}
	figures := func(ms []Mismatch) map[string]bool {
		out := map[string]bool{}
		for _, m := range ms {
			out[m.Figure] = true
		}
		return out
	}
	cases := []struct {
		name  string
		nfPPS float64
		nf    nfstats.Sample
		want  map[string]bool
	}{
		{"honest", 10_000, nf(49_900, 100, 800), map[string]bool{}},
		{"a little above keel's rate (sampled at other moments)", 13_000, nf(49_900, 0, 800), map[string]bool{}},
		{"fewer packets than offered (its ring overflowed)", 2000, nf(20_000, 512, 800), map[string]bool{}},
		{"ten times the rate", 100_000, nf(49_900, 0, 800), map[string]bool{"rate": true}},
		{"a queue of packets never handed over", 10_000, nf(49_900, 4096, 800), map[string]bool{"queue": true}},
		{"more cycles than its threads ran", 10_000, nf(49_900, 0, 5000), map[string]bool{"cycles": true}},
	}
	for _, c := range cases {
		got := figures(Check(c.nfPPS, c.nf, vfc, fig))
		if len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
			continue
		}
		for f := range c.want {
			if !got[f] {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
		}
	}
	// No cycles measured in the interval (no packet, or no CPU time): cycles are not checked.
	if got := figures(Check(0, nf(50_000, 0, 5000), vfc, Figures{})); len(got) != 0 {
		t.Fatalf("unmeasured interval: %v", got)
	}
}
