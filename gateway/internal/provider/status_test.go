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
	for _, f := range []*chain.Function{
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

func Test_Status_shows_the_refined_placement_of_a_chain_on_a_SmartNIC_rack(t *testing.T) {
	st := testredis.Store(t)
	ctx := context.Background()
	after := 14.5
	before := 0.0
	placement := chain.Placement{
		NFs: []chain.PlacedNF{{Name: "acl", NF: "acl", Target: "server", Server: "w1"}, {Name: "nat", NF: "nat", Target: "server", Server: "w1"},
			{Name: "tunnel", NF: "tunnel", Target: "server", Server: "w1"}},
		Subgroups: []chain.Subgroup{{ID: 0, Server: "w1", Cores: 2, NFs: []string{"acl", "nat", "tunnel"}}}}
	plain := &chain.Chain{Name: "plain", NFs: []string{"acl", "nat", "tunnel"}, Placement: placement}
	refined := &chain.Chain{Name: "refined", NFs: []string{"acl", "nat", "tunnel"}, Placement: placement}
	refined.Placement.Refined = &chain.Refined{
		NFs: []chain.RefinedNF{{Name: "acl", Server: "w1", Target: "smartnic", Position: "nic-ingress", Algo: "smartchain"},
			{Name: "nat", Server: "w1", Target: "server", Position: "cpu", Algo: "smartchain"},
			{Name: "tunnel", Server: "w1", Target: "smartnic", Position: "nic-egress", Algo: "smartchain"}},
		Subgroups: []chain.RefinedSubgroup{{Subgroup: 0, Server: "w1", NFs: []string{"nat"}, Node: 1, Cores: []int{8, 9}}},
		Steps:     []chain.RefineStep{{Server: "w1", Algo: "smartchain", Measure: "latency benefit over all-CPU, us", Before: &before, After: &after}}}
	for _, c := range []*chain.Chain{plain, refined} {
		if err := st.Put(ctx, &chain.Function{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: c.Name}, Chain: c}); err != nil {
			t.Fatal(err)
		}
	}
	p := &Provider{Store: st}
	s, err := p.Status(ctx, "refined")
	if err != nil {
		t.Fatal(err)
	}
	ann := *s.Annotations
	if got, want := ann["com.keel.refined"], "acl@smartnic-ingress:w1 -> nat@server:w1 node=1 cores=8-9 -> tunnel@smartnic-egress:w1"; got != want {
		t.Errorf("com.keel.refined %q, want %q", got, want)
	}
	if got, want := ann["com.keel.refined-gains"], "smartchain on w1: latency benefit over all-CPU, us 0 -> 14.5"; got != want {
		t.Errorf("com.keel.refined-gains %q, want %q", got, want)
	}
	if ann["com.keel.placement"] != "acl@server:w1 -> nat@server:w1 -> tunnel@server:w1" || ann["com.keel.subgroups"] != "w1: 2 core(s) [acl, nat, tunnel]" {
		t.Errorf("the existing fields changed: %q, %q", ann["com.keel.placement"], ann["com.keel.subgroups"])
	}
	s, err = p.Status(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"com.keel.refined", "com.keel.refined-gains"} {
		if v, ok := (*s.Annotations)[k]; ok {
			t.Errorf("a chain placed without refinement shows %s=%q", k, v)
		}
	}
}
