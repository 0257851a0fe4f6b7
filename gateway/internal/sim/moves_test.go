// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/costs"
	"github.com/keel-nfv/keel/gateway/internal/policy"
)

func Test_keelMoves_givesCoresBackWithoutLossOrSLOMiss(t *testing.T) {
	tbl := costs.Default()
	sc, err := LoadScenario("testdata/falling.yaml", tbl)
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
