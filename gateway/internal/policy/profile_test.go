// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"math"
	"strings"
	"testing"
)

func fig4() []Point {
	return []Point{{Load: 0.2, P99us: 10}, {Load: 0.4, P99us: 15}, {Load: 0.6, P99us: 30},
		{Load: 0.8, P99us: 80}, {Load: 1.0, P99us: 400}, {Load: 1.2, P99us: 900}}
}

func Test_Profile_Threshold(t *testing.T) {
	unsorted := []Point{{Load: 0.8, P99us: 80}, {Load: 0.2, P99us: 10}, {Load: 1.2, P99us: 900},
		{Load: 0.6, P99us: 30}, {Load: 1.0, P99us: 400}, {Load: 0.4, P99us: 15}}
	cases := []struct {
		name   string
		points []Point
		slo    float64
		want   float64
	}{
		{"interpolated between the last point within the SLO and the first over it", fig4(), 50, 0.68},
		{"p99 equal to the SLO meets it", fig4(), 30, 0.6},
		{"just below a point's p99", fig4(), 79.9, 0.7996},
		{"loads of 1 never count", fig4(), 400, 0.8},
		{"loads above 1 never count", fig4(), 1000, 0.8},
		{"first point misses: 0", fig4(), 5, 0},
		{"no SLO: highest load below 1", fig4(), 0, 0.8},
		{"no SLO, profile stops below 1", fig4()[:3], 0, 0.6},
		{"unsorted points", unsorted, 50, 0.68},
		{"unsorted, no SLO", unsorted, 0, 0.8},
		{"a later point that meets the SLO again is noise", []Point{{Load: 0.2, P99us: 10}, {Load: 0.4, P99us: 60}, {Load: 0.6, P99us: 40}}, 50, 0.36},
		{"only loads above 1", []Point{{Load: 1.1, P99us: 5}}, 50, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &Profile{Chain: "fw", MaxPps: 1e6, Points: tc.points}
			if got := p.Threshold(tc.slo); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("Threshold(%g) = %v, want %v", tc.slo, got, tc.want)
			}
		})
	}
	// Threshold must not reorder the caller's points.
	p := &Profile{Points: unsorted}
	p.Threshold(50)
	if p.Points[0].Load != 0.8 {
		t.Fatal("Threshold sorted the profile's own points")
	}
}

func Test_Profile_Check(t *testing.T) {
	cases := []struct {
		name    string
		p       Profile
		wantErr string // "" for none
	}{
		{"valid", Profile{Chain: "fw", MaxPps: 1e6, Points: fig4()}, ""},
		{"max_pps 0", Profile{Chain: "fw", Points: fig4()}, "profile fw: max_pps must be positive"},
		{"max_pps negative", Profile{Chain: "fw", MaxPps: -1, Points: fig4()}, "profile fw: max_pps must be positive"},
		{"no points", Profile{Chain: "fw", MaxPps: 1e6}, "profile fw: no points"},
		{"load 0", Profile{Chain: "fw", MaxPps: 1e6, Points: []Point{{Load: 0, P99us: 1}}}, "profile fw: point 0: load 0.000, p99 1.0 µs out of range"},
		{"load above 1.5", Profile{Chain: "fw", MaxPps: 1e6, Points: []Point{{Load: 0.5, P99us: 1}, {Load: 1.6, P99us: 2}}}, "profile fw: point 1: load 1.600, p99 2.0 µs out of range"},
		{"load 1.5 is allowed", Profile{Chain: "fw", MaxPps: 1e6, Points: []Point{{Load: 1.5, P99us: 1}}}, ""},
		{"negative p99", Profile{Chain: "fw", MaxPps: 1e6, Points: []Point{{Load: 0.5, P99us: -1}}}, "profile fw: point 0: load 0.500, p99 -1.0 µs out of range"},
		{"equal loads", Profile{Chain: "fw", MaxPps: 1e6, Points: []Point{{Load: 0.5, P99us: 1}, {Load: 0.5, P99us: 2}}}, "profile fw: point 1: loads must increase"},
		{"decreasing loads", Profile{Chain: "fw", MaxPps: 1e6, Points: []Point{{Load: 0.5, P99us: 1}, {Load: 0.7, P99us: 2}, {Load: 0.6, P99us: 3}}}, "profile fw: point 2: loads must increase"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Check()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Check() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Check() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func Test_Config_ThresholdFor(t *testing.T) {
	p := &Profile{Chain: "fw", MaxPps: 1e6, Points: fig4()}
	keel, metron := testCfg(), Metron()
	cases := []struct {
		name string
		cfg  Config
		p    *Profile
		slo  float64
		want float64
	}{
		{"keel reads the profile", keel, p, 30, 0.6},
		{"keel without a profile uses the fixed threshold", keel, nil, 50, 0.9},
		{"metron ignores the SLO", metron, p, 50, 1.0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg.ThresholdFor(tc.p, tc.slo); got != tc.want {
				t.Fatalf("ThresholdFor = %v, want %v", got, tc.want)
			}
		})
	}
}

func Test_Config_BatchFor(t *testing.T) {
	keel := testCfg()
	fixed := testCfg()
	fixed.AdaptiveBatch, fixed.FixedBatch = false, 4
	zero := fixed
	zero.FixedBatch = 0
	noMax := testCfg()
	noMax.MaxBatch = 0
	cases := []struct {
		name string
		cfg  Config
		fill float64
		want int
	}{
		{"adaptive, full bursts", keel, 32, 2},
		{"adaptive, one packet per burst", keel, 1, 49},
		{"fixed", fixed, 1, 4},
		{"fixed 0 runs 1", zero, 1, 1},
		{"MaxBatch 0 runs 1", noMax, 1, 1},
		{"metron", Metron(), 1, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg.BatchFor(twoNF(), tc.fill); got != tc.want {
				t.Fatalf("BatchFor = %d, want %d", got, tc.want)
			}
		})
	}
}

func Test_Metron_differs_from_Keel(t *testing.T) {
	k, m := Keel(), Metron()
	if m.Name != "metron" || m.SLOThresholds || m.FixedThreshold != 1.0 || m.AdaptiveBatch || m.FixedBatch != 1 || m.Isolation {
		t.Fatalf("Metron() = %+v", m)
	}
	m.Name, m.SLOThresholds, m.FixedThreshold, m.AdaptiveBatch, m.Isolation = k.Name, k.SLOThresholds, k.FixedThreshold, k.AdaptiveBatch, k.Isolation
	if m != k {
		t.Fatalf("Metron changes more than isolation, thresholds and batch: %+v vs %+v", m, k)
	}
}
