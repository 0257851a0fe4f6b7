// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/costs"
	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// falling is a quick long-flow scenario: chain2 of Galleon ramps to 200 flows (~2 cores),
// then no flow arrives for a while and the load decays as flows end (mean 15 s: long
// against the run's 80 s, as Galleon's 600 s are against its).
const falling = `
name: falling
seed: 7
workers: 1
cores: 6
ghz: 2.4
chains:
  - {name: chain2, nfs: [acl, urlfilter, encrypt], slo_us: 100}
packets: {median_bytes: 1024, sigma: 0.25}
flows: {mean_s: 15, rate_sigma: 0.3}
phases:
  - {kind: ramp, duration_s: 5, flows: 200, gbps: 10}
  - {kind: steady, duration_s: 10}
  - {kind: ramp, duration_s: 5, flows: 20}
  - {kind: steady, duration_s: 60}
`

func Test_keelMoves_givesCoresBackWithoutLossOrSLOMiss(t *testing.T) {
	tbl := costs.Default()
	sc, err := ParseScenario("falling.yaml", []byte(falling), tbl)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := RunAll([]*Scenario{sc}, []policy.Config{KeelMoves(), policy.Keel()}, tbl, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	with, without := rows[0], rows[1]
	t.Logf("with moves: %+v", with)
	t.Logf("without: %+v", without)
	if with.Policy != "keel-moves" || without.Policy != "keel" {
		t.Fatalf("rows %s, %s", with.Policy, without.Policy)
	}
	if with.FlowMoves == 0 || without.FlowMoves != 0 {
		t.Fatalf("flow moves: %d with, %d without", with.FlowMoves, without.FlowMoves)
	}
	if with.CoresAvg+with.MoveCPUCores >= without.CoresAvg {
		t.Fatalf("cores with moves %.3f (+%.4f control) not below %.3f without", with.CoresAvg, with.MoveCPUCores, without.CoresAvg)
	}
	if with.Loss != 0 || with.MoveSLOMisses != 0 || !with.MeetsSLO {
		t.Fatalf("with moves: loss %d, %d SLO windows missed, p99 %.1f µs (SLO %.0f)", with.Loss, with.MoveSLOMisses, with.P99us, with.SLOus)
	}
}
