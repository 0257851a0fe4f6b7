// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/costs"
	"github.com/keel-nfv/keel/gateway/internal/dpmodel"
)

// Test_maxRate_matchesMeasuredDataPlane validates the simulator at small scale (one worker,
// one managed core, each of the three Galleon chains): the max rate per core the model
// predicts must be within 15 % of the real data plane's.
//
// How it was measured: bench/chain_rate.py runs each chain on this machine's data plane —
// one keel-nf process per NF under keel-coopsched on one managed core, at the batch of
// Galleon eqs. 1–3, fed by dpdk-testpmd over memif from the other core — and records the
// median rate (keel_mpps), the batch, the packet size and the TSC clock in
// bench/results/chain_rate.json. The model's rate is dpmodel.MaxRate: one saturated core,
// one sgroup of the same NFs (costs from nf_profile.json and chain_length.json, measured on
// the same kind of machine) at the same packet size, batch and clock. Rows where the
// generator could not keep the core busy (generator_bound) give only a lower bound: there
// the model must not be more than 15 % below it.
func Test_maxRate_matchesMeasuredDataPlane(t *testing.T) {
	const path = "../../../bench/results/chain_rate.json"
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s is absent: run `python bench/chain_rate.py` (root, two cores) to measure the chains' real max rate; this test compares the model to it", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		TscHz float64 `json:"tsc_hz"`
		Rows  []struct {
			Chain          string   `json:"chain"`
			NFs            []string `json:"nfs"`
			PktBytes       int      `json:"pkt_bytes"`
			KeelMpps       float64  `json:"keel_mpps"`
			SingleMpps     float64  `json:"single_mpps"`
			Batch          int      `json:"batch"`
			TscHz          float64  `json:"tsc_hz"`
			GeneratorBound bool     `json:"generator_bound"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tbl, err := costs.Load("../../../bench/results/nf_profile.json", "../../../bench/results/chain_length.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Rows) == 0 {
		t.Fatalf("%s: no rows", path)
	}
	for _, r := range f.Rows {
		hz := r.TscHz
		if hz == 0 {
			hz = f.TscHz
		}
		cost, err := tbl.Chain(r.NFs, r.PktBytes, hz)
		if err != nil {
			t.Fatalf("%s %v: %v", r.Chain, r.NFs, err)
		}
		check := func(mode string, measured, model float64) {
			dev := (model - measured) / measured
			t.Logf("%s @ %d B %s: measured %.3f Mpps, model %.3f Mpps (%+.1f %%)%s", r.Chain, r.PktBytes, mode,
				measured, model, 100*dev, map[bool]string{true: " [generator-bound: lower bound]"}[r.GeneratorBound])
			if r.GeneratorBound {
				if dev < -0.15 {
					t.Errorf("%s @ %d B %s: model %.3f Mpps is more than 15 %% below the measured lower bound %.3f", r.Chain, r.PktBytes, mode, model, measured)
				}
				return
			}
			if math.Abs(dev) > 0.15 {
				t.Errorf("%s @ %d B %s: model %.3f Mpps vs measured %.3f: %+.1f %% (limit 15 %%)", r.Chain, r.PktBytes, mode, model, measured, 100*dev)
			}
		}
		if r.KeelMpps > 0 {
			check("keel", r.KeelMpps, dpmodel.MaxRate(cost, max(1, r.Batch), 0.02, 1)/1e6)
		}
		if r.SingleMpps > 0 {
			check("single", r.SingleMpps, dpmodel.MaxRate(costs.RunToCompletion(cost), 1, 0.02, 1)/1e6)
		}
	}
}
