// SPDX-License-Identifier: Apache-2.0

package provider

import (
	"errors"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// fixedModeler models every chain with one profile, or fails with err.
type fixedModeler struct {
	prof *policy.Profile
	err  error
}

func (m fixedModeler) Model(name string, _ []string, p99us float64) (*policy.Model, error) {
	if m.err != nil {
		return nil, m.err
	}
	return &policy.Model{Chain: policy.Chain{Name: name, MaxPps: m.prof.MaxPps, Threshold: policy.Keel().ThresholdFor(m.prof, p99us)},
		Profile: m.prof}, nil
}

func Test_checkSLO_refuses_an_SLO_no_load_meets_and_names_the_figures(t *testing.T) {
	prof := &policy.Profile{MaxPps: 1e6, Method: "test profile", Points: []policy.Point{
		{Load: 0.05, P99us: 12}, {Load: 0.5, P99us: 30}, {Load: 0.9, P99us: 90}}}
	p := &Provider{Models: fixedModeler{prof: prof}}
	placed := func(p99 float64) *chain.Chain {
		return &chain.Chain{Name: "c", Spec: "NAT", SLO: chain.SLO{P99us: p99}, Members: []chain.Member{{Name: "nat", NF: "nat"}},
			Placement: chain.Placement{Subgroups: []chain.Subgroup{{Server: "local", Cores: 1, NFs: []string{"nat"}}}}}
	}
	err := p.checkSLO(placed(10))
	want := "annotations.com.keel.slo: p99=10us cannot be met: at 5% of a core the chain's p99 is already 12.0 us (test profile)"
	if err == nil || err.Error() != want {
		t.Fatalf("checkSLO(p99=10us) = %v, want %q", err, want)
	}
	if err := p.checkSLO(placed(50)); err != nil {
		t.Fatalf("checkSLO(p99=50us) = %v, want nil", err)
	}
	if err := p.checkSLO(placed(0)); err != nil {
		t.Fatalf("checkSLO without a p99 bound = %v, want nil", err)
	}
	p.Models = fixedModeler{err: errors.New("no costs")}
	if err := p.checkSLO(placed(10)); err != nil {
		t.Fatalf("checkSLO without a model = %v, want nil", err)
	}
}

func Test_replaces_ignores_how_the_placer_numbered_the_subgroups(t *testing.T) {
	placed := func(id, cores int, rate float64, nfs ...string) *chain.Chain {
		return &chain.Chain{Name: "chain2", Spec: "ACL -> UrlFilter -> Encrypt",
			Members:   []chain.Member{{Name: "urlfilter", NF: "urlfilter"}, {Name: "encrypt", NF: "encrypt"}},
			Placement: chain.Placement{RateGbps: rate, Subgroups: []chain.Subgroup{{ID: id, Server: "local", Cores: cores, NFs: nfs}}}}
	}
	first := placed(0, 1, 0.1, "urlfilter", "encrypt")
	// Redeployed after another chain: the placer numbered this chain's subgroup 1 and shared
	// the rack's rate differently; the same NFs run on the same server and cores.
	if why := replaces(first, placed(1, 1, 1, "urlfilter", "encrypt")); why != "" {
		t.Fatalf("a renumbered subgroup replaced the chain's instances: %s", why)
	}
	for what, other := range map[string]*chain.Chain{
		"another core count":      placed(0, 2, 0.1, "urlfilter", "encrypt"),
		"other NFs in a subgroup": placed(0, 1, 0.1, "encrypt"),
		"another server": func() *chain.Chain {
			c := placed(0, 1, 0.1, "urlfilter", "encrypt")
			c.Placement.Subgroups[0].Server = "w2"
			return c
		}(),
	} {
		if why := replaces(first, other); why == "" {
			t.Errorf("%s kept the instances", what)
		} else {
			t.Logf("%s: %s", what, why)
		}
	}
}
