// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"math"
	"testing"
)

// twoNF is the chain of the hand-checked example: Σ T = 1000, I/O 200, copy 50,
// handoff 1600 cycles, N = 2, bursts of 32 packets at 2.4 GHz.
func twoNF() Cost {
	return Cost{NFCycles: []float64{400, 600}, IOCycles: 200, CopyCycles: 50, HandoffCycles: 1600,
		FreqHz: 2.4e9, BurstMax: 32}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func Test_Cost_Cycles_eq1(t *testing.T) {
	one := Cost{NFCycles: []float64{1000}, IOCycles: 200, CopyCycles: 50, HandoffCycles: 1600, FreqHz: 2.4e9, BurstMax: 32}
	cases := []struct {
		name   string
		c      Cost
		bursts int
		fill   float64
		want   float64
	}{
		// 1000 + 200 + 50 + 2·1600/(4·32) = 1275
		{"hand example B=4 b=32", twoNF(), 4, 32, 1275},
		{"B=1 b=32", twoNF(), 1, 32, 1250 + 100},
		{"B=0 counts as 1", twoNF(), 0, 32, 1350},
		{"empty bursts count as 1 packet", twoNF(), 1, 0, 1250 + 3200},
		{"fill above the NIC burst is clamped to b_m", twoNF(), 1, 64, 1350},
		{"one NF pays no copy and no handoff", one, 4, 32, 1200},
		{"one NF at B=1 b=1", one, 1, 1, 1200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Cycles(tc.bursts, tc.fill); !near(got, tc.want) {
				t.Fatalf("Cycles(%d, %g) = %v, want %v", tc.bursts, tc.fill, got, tc.want)
			}
			if got, want := tc.c.Rate(tc.bursts, tc.fill), 2.4e9/tc.want; !near(got, want) {
				t.Fatalf("Rate(%d, %g) = %v, want %v", tc.bursts, tc.fill, got, want)
			}
		})
	}
}

func Test_Cost_shape(t *testing.T) {
	c := twoNF()
	if c.N() != 2 || !c.Isolated() {
		t.Fatalf("N %d isolated %v, want 2 true", c.N(), c.Isolated())
	}
	if (Cost{NFCycles: []float64{5}}).Isolated() {
		t.Fatal("a one-NF chain is not isolated")
	}
	if got := c.SingleCycles(); got != 1200 {
		t.Fatalf("SingleCycles = %v, want 1200", got)
	}
	if got := c.SingleRate(); !near(got, 2e6) {
		t.Fatalf("SingleRate = %v, want 2e6", got)
	}
	// MaxRate: B = 64 bursts of b_m = 32: 1250 + 3200/2048.
	if got, want := c.MaxRate(64), 2.4e9/(1250+3200.0/2048); !near(got, want) {
		t.Fatalf("MaxRate(64) = %v, want %v", got, want)
	}
	// BurstMax 0 means the NIC's 32.
	c.BurstMax = 0
	if got, want := c.MaxRate(4), 2.4e9/1275; !near(got, want) {
		t.Fatalf("MaxRate(4) with BurstMax 0 = %v, want %v", got, want)
	}
}

func Test_Cost_Batch_eq2_3(t *testing.T) {
	one := Cost{NFCycles: []float64{1000}, IOCycles: 200, HandoffCycles: 1600, FreqHz: 2.4e9, BurstMax: 32}
	cases := []struct {
		name      string
		c         Cost
		p, fill   float64
		maxBursts int
		want      int
	}{
		// B ≥ N·h/(b·S·(1/p−1)) with S = 1250: 3200/(32·1250·(1/0.95−1)) = 1.52
		{"p 0.95 full bursts", twoNF(), 0.95, 32, 64, 2},
		// 3200/(1·1250·0.0526) = 48.6
		{"p 0.95 one packet per burst", twoNF(), 0.95, 1, 64, 49},
		{"clamped to MaxBatch", twoNF(), 0.95, 1, 32, 32},
		// 3200/(32·1250·(1/0.99−1)) = 7.92
		{"p 0.99 full bursts", twoNF(), 0.99, 32, 64, 8},
		{"fill above b_m is clamped", twoNF(), 0.95, 64, 64, 2},
		{"fill 0 counts as 1", twoNF(), 0.95, 0, 64, 49},
		{"one NF chain", one, 0.95, 1, 64, 1},
		{"maxBursts 1", twoNF(), 0.95, 1, 1, 1},
		{"p 0", twoNF(), 0, 1, 64, 1},
		{"no handoff cost", Cost{NFCycles: []float64{500, 500}, FreqHz: 1e9}, 0.99, 1, 64, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Batch(tc.p, tc.fill, tc.maxBursts); got != tc.want {
				t.Fatalf("Batch(%g, %g, %d) = %d, want %d", tc.p, tc.fill, tc.maxBursts, got, tc.want)
			}
		})
	}
}

// Test_Cost_Batch_minimal checks eqs. 2–3 against eq. 1 itself: the B chosen meets
// R_v ≥ p·R̃_v and B−1 does not, unless B was clamped to maxBursts.
func Test_Cost_Batch_minimal(t *testing.T) {
	for _, n := range []int{2, 3, 5, 8} {
		for _, h := range []float64{300, 1600, 5000} {
			for _, fill := range []float64{1, 4, 17, 32} {
				for _, p := range []float64{0.5, 0.9, 0.95, 0.99} {
					c := Cost{NFCycles: make([]float64, n), IOCycles: 150, CopyCycles: 40, HandoffCycles: h, FreqHz: 2.4e9, BurstMax: 32}
					for i := range c.NFCycles {
						c.NFCycles[i] = 100 * float64(i+1)
					}
					goal := p * c.FreqHz / (c.SingleCycles() + c.CopyCycles)
					b := c.Batch(p, fill, 64)
					if b < 1 || b > 64 {
						t.Fatalf("n %d h %g fill %g p %g: B %d out of [1, 64]", n, h, fill, p, b)
					}
					if b < 64 && c.Rate(b, fill) < goal*(1-1e-12) {
						t.Fatalf("n %d h %g fill %g p %g: B %d gives %v < %v", n, h, fill, p, b, c.Rate(b, fill), goal)
					}
					if b > 1 && c.Rate(b-1, fill) >= goal*(1+1e-12) {
						t.Fatalf("n %d h %g fill %g p %g: B %d is not minimal (B−1 gives %v ≥ %v)", n, h, fill, p, b, c.Rate(b-1, fill), goal)
					}
				}
			}
		}
	}
}
