// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"errors"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/store"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

// batchOf is AssignMany's requests for chain3's flows from, to (not included).
func batchOf(from, to int) []FlowRequest {
	var out []FlowRequest
	for i := from; i < to; i++ {
		out = append(out, FlowRequest{Flow: flowOf(tuple(i)), Hint: "chain3"})
	}
	return out
}

// A batch of new flows gets the instances the same flows would get one by one, for one
// Redis round trip beyond the attach its first flow makes, and counts each flow once.
func Test_AssignMany_decides_as_Assign_would_in_one_round_trip(t *testing.T) {
	one, _, _ := flowRack(t, false)
	many, st, n := flowRack(t, false)
	ctx := context.Background()
	const flows = 300 // chain3's instance takes them all (no stats yet: no load)
	want := map[string]int{}
	for i := 0; i < flows; i++ {
		want[assign(t, one, i).Instance.Id]++
	}
	// a flow of chain2 first: it reads Redis into the store's cache and builds the index
	if a, err := many.AssignFlow(ctx, &pb.AssignFlowRequest{Flow: &pb.FiveTuple{SrcIp: "198.18.0.1", DstIp: "198.18.2.1",
		SrcPort: 1024, DstPort: 80, Proto: 6}}); err != nil || !a.Assigned {
		t.Fatalf("a flow of chain2: %v, %v", a, err)
	}
	// the first batch attaches chain3/0 with its first flow (Redis learns the batch script)
	res := many.AssignMany(ctx, batchOf(0, 10))
	var rest []FlowResult
	if got := trips(n, func() { rest = many.AssignMany(ctx, batchOf(10, flows)) }); got != 1 {
		t.Fatalf("a batch of %d new flows made %d Redis round trips, want 1", flows-10, got)
	}
	res = append(res, rest...)
	got := map[string]int{}
	for i, r := range res {
		if r.Err != nil || !r.Resp.Assigned {
			t.Fatalf("flow %d: %v, %v", i, r.Resp, r.Err)
		}
		got[r.Resp.Instance.Id]++
	}
	if len(got) != len(want) || got["chain3/0"] != want["chain3/0"] {
		t.Fatalf("the batch went to %v, one by one to %v", got, want)
	}
	if in, _ := st.Instance(ctx, "chain3", "chain3/0"); in.Flows != flows || in.State != store.Attached {
		t.Fatalf("chain3/0 after the batch: %+v, want attached with %d flows", in, flows)
	}
	if calls, _ := st.Invocations(ctx, "chain3"); calls != flows {
		t.Fatalf("chain3 has %d invocations, want %d", calls, flows)
	}
}

// The ingress sends a batch again when its answer was lost (a timeout): nothing is assigned
// twice, each flow gets its first answer, and the repeat costs no write.
func Test_AssignMany_sent_again_assigns_nothing_twice(t *testing.T) {
	srv, st, n := flowRack(t, false)
	ctx := context.Background()
	first := srv.AssignMany(ctx, batchOf(0, 40))
	// the same batch again, with two new flows and one flow twice
	again := append(batchOf(0, 42), batchOf(5, 6)...)
	var second []FlowResult
	if got := trips(n, func() { second = srv.AssignMany(ctx, again) }); got > 1 {
		t.Fatalf("the batch sent again made %d round trips, want 1 (its two new flows)", got)
	}
	for i, r := range second {
		if r.Err != nil || !r.Resp.Assigned {
			t.Fatalf("flow %d sent again: %v, %v", i, r.Resp, r.Err)
		}
		if i < 40 && r.Resp.Instance.Id != first[i].Resp.Instance.Id {
			t.Fatalf("flow %d went to %s, then to %s", i, first[i].Resp.Instance.Id, r.Resp.Instance.Id)
		}
	}
	if second[42].Resp.Instance.Id != second[5].Resp.Instance.Id {
		t.Fatalf("a flow twice in one batch got two instances")
	}
	if in, _ := st.Instance(ctx, "chain3", "chain3/0"); in.Flows != 42 {
		t.Fatalf("chain3/0: %d flows, want 42", in.Flows)
	}
	if calls, _ := st.Invocations(ctx, "chain3"); calls != 42 {
		t.Fatalf("chain3 has %d invocations, want 42", calls)
	}
}

// A batch mixes flows of every kind: each gets its own answer, and the flows that cannot be
// served do not keep the others from being assigned.
func Test_AssignMany_answers_each_flow_of_a_mixed_batch(t *testing.T) {
	srv, st, _ := flowRack(t, false)
	ctx := context.Background()
	reqs := []FlowRequest{
		{Flow: flowOf(&pb.FiveTuple{SrcIp: "198.18.0.1", DstIp: "198.18.1.1", SrcPort: 1, DstPort: 80, Proto: 6})},  // chain1: switch only
		{Flow: flowOf(&pb.FiveTuple{SrcIp: "198.18.0.1", DstIp: "198.18.9.1", SrcPort: 1, DstPort: 80, Proto: 17})}, // no chain
		{Flow: flowOf(&pb.FiveTuple{SrcIp: "198.18.0.1", DstIp: "198.18.2.1", SrcPort: 1, DstPort: 80, Proto: 6}), Hint: "chain3"},
		batchOf(0, 1)[0],
		batchOf(1, 2)[0],
	}
	res := srv.AssignMany(ctx, reqs)
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("flow %d: %v", i, r.Err)
		}
	}
	if !res[0].Resp.SwitchOnly || !res[0].Resp.Assigned || res[0].Resp.ReinjectVlan != 4006 {
		t.Fatalf("chain1's flow: %v, want switch-only with chain1's reinject VLAN", res[0].Resp)
	}
	// Asked again (a lost answer), the same answer, VLAN included.
	if again := srv.AssignMany(ctx, reqs[:1]); again[0].Err != nil || !again[0].Resp.SwitchOnly || again[0].Resp.ReinjectVlan != 4006 {
		t.Fatalf("chain1's flow asked again: %v, %v", again[0].Resp, again[0].Err)
	}
	if res[1].Resp.Assigned || res[1].Resp.Reason == "" {
		t.Fatalf("a flow of no chain: %v, want not assigned with a reason", res[1].Resp)
	}
	// the ingress's hint is checked: the filter of chain2 matches, chain3's does not
	if res[2].Resp.Chain != "chain2" || res[2].Resp.Instance.GetId() != "chain2/0" {
		t.Fatalf("chain2's flow hinted chain3: %v, want it on chain2/0", res[2].Resp)
	}
	if res[3].Resp.Instance.GetId() != "chain3/0" || res[4].Resp.Instance.GetId() != "chain3/0" {
		t.Fatalf("chain3's flows: %v and %v, want both on chain3/0", res[3].Resp, res[4].Resp)
	}
	if in, _ := st.Instance(ctx, "chain3", "chain3/0"); in.Flows != 2 {
		t.Fatalf("chain3/0: %d flows, want 2", in.Flows)
	}
}

// An instance changed after the batch's decisions (a redeploy drained it) refuses the flows
// decided onto it, and only those; AssignMany decides them again on what is there now.
func Test_AssignFlows_refuses_a_changed_instance_per_flow(t *testing.T) {
	_, st, _ := flowRack(t, false)
	ctx := context.Background()
	c2, _ := st.Instance(ctx, "chain2", "chain2/0")
	c3, _ := st.Instance(ctx, "chain3", "chain3/0")
	stale := *c3
	c3.Draining = true
	if err := st.UpdateSpec(ctx, c3, false); err != nil {
		t.Fatal(err)
	}
	batch := []store.FlowAssign{
		{Flow: &store.Flow{Key: "17 198.18.0.1:1 198.18.2.1:80", Chain: "chain2"}, In: c2},
		{Flow: &store.Flow{Key: "17 198.18.0.1:1 198.18.3.1:80", Chain: "chain3"}, In: &stale},
		{Flow: &store.Flow{Key: "17 198.18.0.1:2 198.18.2.1:80", Chain: "chain2"}, In: c2},
	}
	errs, err := st.AssignFlows(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], store.ErrStale) {
		t.Fatalf("per flow: %v, want nil, ErrStale, nil", errs)
	}
	if in, _ := st.Instance(ctx, "chain2", "chain2/0"); in.Flows != 2 || c2.Flows != 2 {
		t.Fatalf("chain2/0: %d flows (batch entry says %d), want 2", in.Flows, c2.Flows)
	}
	if f, _ := st.Flow(ctx, batch[1].Flow.Key); f != nil {
		t.Fatalf("the refused flow was recorded: %+v", f)
	}
}

// BenchmarkAssignFlows assigns new flows of chain3 in batches of 32, as keel-ingress sends
// them at a thousand new flows a second; per op: one flow.
func BenchmarkAssignFlows(b *testing.B) {
	overTCPAndUnix(b, func(b *testing.B, unix bool) {
		srv, _, n := flowRack(b, unix)
		assign(b, srv, 0)
		ctx := context.Background()
		m := startMeter(b, n)
		for i := 1; i <= b.N; i += 32 {
			for k, r := range srv.AssignMany(ctx, batchOf(i, min(i+32, b.N+1))) {
				if r.Err != nil || !r.Resp.Assigned {
					b.Fatalf("flow %d: %v %v", i+k, r.Resp, r.Err)
				}
			}
		}
		m.stop()
	})
}
