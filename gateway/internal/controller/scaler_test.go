// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"errors"
	"strings"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/openfaas/faas-provider/types"
)

// noCosts is a modeler without NF costs: it models no chain.
type noCosts struct{}

func (noCosts) Model(string, []string, float64) (*policy.Model, error) {
	return nil, errors.New("no costs")
}

func chainFn(name string, p99 float64) *chain.Function {
	return &chain.Function{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: name},
		Chain: &chain.Chain{Name: name, Spec: "NAT", SLO: chain.SLO{P99us: p99}}}
}

func Test_a_chain_without_a_model_is_served_and_the_controller_says_so_once(t *testing.T) {
	var logged []string
	s := &Controller{Policy: policy.Keel(), Modeler: noCosts{},
		Logf: func(f string, a ...any) { logged = append(logged, f) }}
	for range 3 {
		if m, err := s.model(chainFn("c", 10)); err != nil || m.Chain.Threshold != s.Policy.FixedThreshold {
			t.Fatalf("model = %+v, %v; want the fixed threshold when there is no model", m, err)
		}
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "no cost model") {
		t.Fatalf("logged %q, want one line about the missing model", logged)
	}
}

func Test_Decisions_keeps_the_latest_in_order_and_tells_the_hook(t *testing.T) {
	var seen int
	s := &Controller{OnDecision: func(policy.Decision) { seen++ }}
	for i := range DecisionsKept + 10 {
		s.decide(policy.Decision{Kind: policy.KindAttach, Instance: "c/" + string(rune('a'+i%26))}, "line %d", i)
	}
	got := s.Decisions()
	if len(got) != DecisionsKept || seen != DecisionsKept+10 {
		t.Fatalf("kept %d (want %d), hook saw %d", len(got), DecisionsKept, seen)
	}
	if got[0].Text != "line 10" || got[len(got)-1].Text != "line 265" {
		t.Fatalf("oldest %q, newest %q", got[0].Text, got[len(got)-1].Text)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Time.Before(got[i-1].Time) {
			t.Fatalf("decision %d is older than %d", i, i-1)
		}
	}
}

func Test_batchFor_uses_the_cycles_keel_measured_less_the_models_overheads(t *testing.T) {
	s := &Controller{Policy: policy.Keel()}
	m := &policy.Model{Cost: policy.Cost{NFCycles: []float64{100, 100}, IOCycles: 200, CopyCycles: 20, HandoffCycles: 1600,
		FreqHz: 2e9, BurstMax: 32}}
	// eqs. 2–3: B ≥ N·h / (b·S·(1/p − 1)) = 2·1600 / (32·420·(1/0.95 − 1)) = 4.52 → 5
	model := s.batchFor(m, &store.Instance{Batch: 1})
	if model != 5 {
		t.Fatalf("model batch %d, want 5", model)
	}
	// At batch 1 the model's overheads per packet are 200 + 20 + 2·1600/32 = 320 cycles.
	for _, tc := range []struct {
		name string
		cpp  float64
		want uint32
	}{
		{"no measurement: the model", 0, model},
		{"below the model's overheads: the model", 300, model},
		{"the model's own cost measured: the model's batch", 520, model},
		{"heavy measured NFs need fewer bursts", 10_320, 1},
		{"light measured NFs need more: 3200 / (32·240·0.0526) = 7.9", 340, 8},
	} {
		if got := s.batchFor(m, &store.Instance{Batch: 1, CyclesPerPacket: tc.cpp}); got != tc.want {
			t.Errorf("%s: batch %d, want %d", tc.name, got, tc.want)
		}
	}
}
