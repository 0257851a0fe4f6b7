// SPDX-License-Identifier: Apache-2.0

package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	"github.com/openfaas/faas-provider/types"
)

func Test_Status_says_where_a_chain_runs_and_what_a_packet_function_is(t *testing.T) {
	st := testredis.Store(t)
	ctx := context.Background()
	onSwitch := &chain.Chain{Name: "chain1", NFs: []string{"tunnel"}, Filter: "dst net 198.18.1.0/24",
		Placement: chain.Placement{NFs: []chain.PlacedNF{{Name: "tunnel", NF: "tunnel", Target: "switch", Subgroup: -1}}}}
	withGuard := &chain.Chain{Name: "guarded", NFs: []string{"ttlguard", "nat"}, Filter: "dst net 198.18.9.0/24",
		NFConfigs: []chain.Member{{Name: "ttlguard", NF: "ttlguard"}, {Name: "nat", NF: "nat"}},
		Placement: chain.Placement{Subgroups: []chain.Subgroup{{ID: 0, Server: "local", Cores: 1, NFs: []string{"ttlguard", "nat"}}}}}
	for _, f := range []*store.Function{
		{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: "chain1"}, Chain: onSwitch},
		{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: "guarded"}, Chain: withGuard},
		{Kind: chain.KindNF, Deployment: types.FunctionDeployment{Service: "ttlguard", Image: "keel/nf-ttlguard:latest"}},
	} {
		if err := st.Put(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutInstance(ctx, &store.Instance{ID: "guarded/0", Chain: "guarded", Worker: "local", State: store.Pooled, Core: -1, Phase: "ready"}); err != nil {
		t.Fatal(err)
	}
	p := &Provider{Store: st}
	s, err := p.Status(ctx, "chain1")
	if err != nil {
		t.Fatal(err)
	}
	if s.Replicas != 1 || s.AvailableReplicas != 1 || !strings.HasPrefix((*s.Annotations)["com.keel.runs"], "on the ToR switch only") {
		t.Errorf("switch-only chain: replicas %d/%d, runs %q", s.AvailableReplicas, s.Replicas, (*s.Annotations)["com.keel.runs"])
	}
	s, err = p.Status(ctx, "guarded")
	if err != nil {
		t.Fatal(err)
	}
	if s.Replicas != 0 || (*s.Annotations)["com.keel.runs"] != "on server cores: 0 attached instance(s) carry flows, 1 idle in the pool" {
		t.Errorf("server chain: replicas %d, runs %q", s.Replicas, (*s.Annotations)["com.keel.runs"])
	}
	s, err = p.Status(ctx, "ttlguard")
	if err != nil {
		t.Fatal(err)
	}
	want := "an NF for chains, not an HTTP function: it runs inside the chains that name it in com.keel.chain; used by: guarded"
	if s.Replicas != 1 || s.AvailableReplicas != 1 || (*s.Annotations)["com.keel.packet-function"] != want {
		t.Errorf("packet function: replicas %d/%d, %q", s.AvailableReplicas, s.Replicas, (*s.Annotations)["com.keel.packet-function"])
	}
}
