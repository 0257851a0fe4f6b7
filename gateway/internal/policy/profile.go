// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"sort"
)

// Point is one operating point of a chain on one core: at Load (its packet rate as a
// fraction of MaxPps) the chain's packets see P99us at the 99th percentile and the NIC
// queue holds up to QueueMax packets.
type Point struct {
	Load     float64 `json:"load"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	QueueMax float64 `json:"queue_max"`
}

// Profile is a chain's latency profile on one core (Galleon §7.2.1, Fig. 4): how its tail
// latency and queue grow with the per-core load. The file form is
// bench/results/profile_<chain>.json.
type Profile struct {
	Chain       string   `json:"chain"`
	NFs         []string `json:"nfs"`
	PacketBytes int      `json:"packet_bytes"`
	FreqHz      float64  `json:"freq_hz"`
	Batch       int      `json:"batch"`   // bursts per turn the profile was taken at
	MaxPps      float64  `json:"max_pps"` // load 1.0: the most the core sustains
	Method      string   `json:"method"`  // how the points were obtained (model or measurement)
	Points      []Point  `json:"points"`  // by increasing load
}

// Check reports the first thing wrong with a profile read from a file.
func (p *Profile) Check() error {
	if p.MaxPps <= 0 {
		return fmt.Errorf("profile %s: max_pps must be positive", p.Chain)
	}
	if len(p.Points) == 0 {
		return fmt.Errorf("profile %s: no points", p.Chain)
	}
	for i, pt := range p.Points {
		if pt.Load <= 0 || pt.Load > 1.5 || pt.P99us < 0 {
			return fmt.Errorf("profile %s: point %d: load %.3f, p99 %.1f µs out of range", p.Chain, i, pt.Load, pt.P99us)
		}
		if i > 0 && pt.Load <= p.Points[i-1].Load {
			return fmt.Errorf("profile %s: point %d: loads must increase", p.Chain, i)
		}
	}
	return nil
}

// Threshold is Galleon §5.2's per-core load threshold: the highest load whose p99 stays
// within the SLO (sloUs 0: no latency bound). Between the last profiled load that meets the
// SLO and the first that misses it, the threshold is interpolated linearly; tail latency is
// convex in load, so the chord lies above the curve and the interpolated load meets the SLO
// too. Loads of 1 and more are never used: a core at full load has no stable queue, and what
// a profile reports there depends on how long it ran. It is 0 when even the lightest load
// misses the SLO: no instance of the chain can meet it.
func (p *Profile) Threshold(sloUs float64) float64 {
	pts := append([]Point(nil), p.Points...)
	sort.Slice(pts, func(i, j int) bool { return pts[i].Load < pts[j].Load })
	best := 0.0
	for i, pt := range pts {
		if pt.Load >= 1 {
			break
		}
		if sloUs > 0 && pt.P99us > sloUs {
			// Tail latency grows with load: a later point that meets the SLO again is noise.
			if i > 0 {
				a := pts[i-1]
				best = a.Load + (pt.Load-a.Load)*(sloUs-a.P99us)/(pt.P99us-a.P99us)
			}
			break
		}
		best = pt.Load
	}
	return best
}
