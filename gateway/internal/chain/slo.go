// SPDX-License-Identifier: Apache-2.0

package chain

import (
	"strconv"

	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

// SLO is a chain's service-level objective as the placer read it from annotation com.keel.slo
// (its grammar is the placer's: placer/keel_placer/source.py): a p99 latency bound and a
// throughput range.
type SLO struct {
	P99us    float64 `json:"p99_us"`     // 0: no latency bound
	TMinGbps float64 `json:"t_min_gbps"` // guaranteed rate
	TMaxGbps float64 `json:"t_max_gbps"` // 0: unbounded
}

// sloOf is the SLO of a chain the placer parsed.
func sloOf(g *pb.ChainGraph) SLO {
	return SLO{P99us: g.DMaxUs, TMinGbps: g.TMinGbps, TMaxGbps: g.TMaxGbps}
}

// TMinText renders t_min for a message: 1Gbps, 10Mbps, 0bps.
func (s SLO) TMinText() string {
	for _, u := range []struct {
		unit  string
		scale float64
	}{{"Tbps", 1e3}, {"Gbps", 1}, {"Mbps", 1e-3}, {"kbps", 1e-6}} {
		if s.TMinGbps >= u.scale {
			return strconv.FormatFloat(s.TMinGbps/u.scale, 'g', 6, 64) + u.unit
		}
	}
	return strconv.FormatFloat(s.TMinGbps*1e9, 'g', -1, 64) + "bps"
}
