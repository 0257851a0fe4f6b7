// SPDX-License-Identifier: Apache-2.0

package control

import (
	"errors"
	"strings"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/openfaas/faas-provider/types"
)

// fixedModeler models every chain with one profile.
type fixedModeler struct {
	prof *policy.Profile
	err  error
}

func (m fixedModeler) Model(f *store.Function, cfg policy.Config) (*Model, error) {
	if m.err != nil {
		return nil, m.err
	}
	return &Model{Chain: policy.Chain{Name: f.Chain.Name, MaxPps: m.prof.MaxPps, Threshold: cfg.ThresholdFor(m.prof, f.Chain.SLO.P99us)},
		Profile: m.prof}, nil
}

func chainFn(name string, p99 float64) *store.Function {
	return &store.Function{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: name},
		Chain: &chain.Chain{Name: name, Spec: "NAT", SLO: chain.SLO{P99us: p99}}}
}

func Test_CheckChain_refuses_an_SLO_no_load_meets_and_names_the_figures(t *testing.T) {
	prof := &policy.Profile{MaxPps: 1e6, Method: "test profile", Points: []policy.Point{
		{Load: 0.05, P99us: 12}, {Load: 0.5, P99us: 30}, {Load: 0.9, P99us: 90}}}
	s := &Server{Policy: policy.Keel(), Modeler: fixedModeler{prof: prof}}
	err := s.CheckChain(chainFn("tight", 10))
	want := "annotations.com.keel.slo: p99=10us cannot be met: at 5% of a core the chain's p99 is already 12.0 us (test profile)"
	if err == nil || err.Error() != want {
		t.Fatalf("CheckChain(p99=10us) = %v, want %q", err, want)
	}
	if err := s.CheckChain(chainFn("ok", 50)); err != nil {
		t.Fatalf("CheckChain(p99=50us) = %v, want nil", err)
	}
	if err := s.CheckChain(chainFn("none", 0)); err != nil {
		t.Fatalf("CheckChain without a p99 bound = %v, want nil", err)
	}
}

func Test_CheckChain_without_a_model_accepts_and_says_so_once(t *testing.T) {
	var logged []string
	s := &Server{Policy: policy.Keel(), Modeler: fixedModeler{err: errors.New("no costs")},
		Logf: func(f string, a ...any) { logged = append(logged, f) }}
	for range 3 {
		if err := s.CheckChain(chainFn("c", 10)); err != nil {
			t.Fatalf("CheckChain = %v, want nil when there is no model", err)
		}
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "no cost model") {
		t.Fatalf("logged %q, want one line about the missing model", logged)
	}
}

func Test_Decisions_keeps_the_latest_in_order_and_tells_the_hook(t *testing.T) {
	var seen int
	s := &Server{OnDecision: func(Decision) { seen++ }}
	for i := range DecisionsKept + 10 {
		s.decide(Decision{Kind: KindAttach, Instance: "c/" + string(rune('a'+i%26))}, "line %d", i)
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
	s := &Server{Policy: policy.Keel()}
	m := &Model{Cost: policy.Cost{NFCycles: []float64{100, 100}, IOCycles: 200, CopyCycles: 20, HandoffCycles: 1600,
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
