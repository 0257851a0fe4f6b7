// SPDX-License-Identifier: Apache-2.0

package provider

import (
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/chain"
)

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
