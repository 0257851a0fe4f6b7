// SPDX-License-Identifier: Apache-2.0

package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	"github.com/openfaas/faas-provider/types"
	"github.com/redis/go-redis/v9"
)

// A flow assigned to an instance that was deleted since it was read (faas-cli remove while
// AssignFlow runs) must not bring the instance back: its VLAN is no longer reserved.
func Test_a_deleted_instance_is_never_written_back(t *testing.T) {
	st := testredis.Store(t)
	ctx := context.Background()
	vlan, err := st.AllocVLAN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in := &store.Instance{ID: "chain3/0", Chain: "chain3", Worker: "local", VLAN: vlan, State: store.Attached, Core: 1}
	if err := st.PutInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	stale := *in // what AssignFlow read before the delete
	if err := st.DeleteInstance(ctx, in, false); err != nil {
		t.Fatal(err)
	}
	key := store.FlowKey(17, netip.MustParseAddr("198.18.0.1"), 1024, netip.MustParseAddr("198.18.3.1"), 5001)
	err = st.AssignFlow(ctx, &store.Flow{Key: key, Chain: "chain3", Instance: stale.ID, VLAN: stale.VLAN}, &stale, true)
	if !errors.Is(err, store.ErrGone) {
		t.Fatalf("PutFlow on a deleted instance: %v, want ErrGone", err)
	}
	if err := st.UpdateSpec(ctx, &stale, false); !errors.Is(err, store.ErrGone) {
		t.Fatalf("UpdateInstance on a deleted instance: %v, want ErrGone", err)
	}
	insts, _ := st.Instances(ctx, "chain3")
	f, _ := st.Flow(ctx, key)
	if len(insts) != 0 || f != nil {
		t.Fatalf("the deleted instance came back: %v, flow %v", insts, f)
	}
	// The VLAN is free and the next instance gets it; the stale writer cannot touch that one.
	again, _ := st.AllocVLAN(ctx)
	if again != vlan {
		t.Fatalf("VLAN %d not reused (got %d)", vlan, again)
	}
	// A release of a flow whose instance is gone removes the flow and is no error.
	if err := st.PutInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := st.AssignFlow(ctx, &store.Flow{Key: key, Chain: "chain3", Instance: in.ID}, in, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Instances(ctx, "chain3"); len(got) != 1 {
		t.Fatalf("instances %v", got)
	}
	rec, _ := st.Flow(ctx, key)
	if err := st.DeleteInstance(ctx, in, false); err != nil {
		t.Fatal(err)
	}
	if err := st.PutFlow(ctx, &store.Flow{Key: "other", Chain: "chain3", Instance: in.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DeleteFlow(ctx, rec); err != nil {
		t.Fatalf("release after the instance went: %v", err)
	}
	if insts, _ := st.Instances(ctx, "chain3"); len(insts) != 0 {
		t.Fatalf("release brought the instance back: %v", insts)
	}
}

// faas-cli's invocation count of a chain is the flows assigned to it: PutFlow counts each in
// the same step, and a flow refused with ErrGone is not counted.
func Test_PutFlow_counts_one_invocation_of_the_flow_s_chain(t *testing.T) {
	st := testredis.Store(t)
	ctx := context.Background()
	in := &store.Instance{ID: "chain3/0", Chain: "chain3", VLAN: 100, State: store.Attached, Core: 1}
	if err := st.PutInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := st.AssignFlow(ctx, &store.Flow{Key: "17 198.18.0.1:1024 198.18.3.1:5001", Chain: "chain3", Instance: in.ID}, in, true); err != nil {
		t.Fatal(err)
	}
	if err := st.PutFlow(ctx, &store.Flow{Key: "17 198.18.0.1:1024 198.18.1.1:5001", Chain: "chain1"}); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteInstance(ctx, in, false); err != nil {
		t.Fatal(err)
	}
	if err := st.AssignFlow(ctx, &store.Flow{Key: "17 198.18.0.1:1025 198.18.3.1:5001", Chain: "chain3", Instance: in.ID}, in, true); !errors.Is(err, store.ErrGone) {
		t.Fatalf("PutFlow on a removed instance: %v, want ErrGone", err)
	}
	for name, want := range map[string]int64{"chain3": 1, "chain1": 1} {
		if n, err := st.Invocations(ctx, name); n != want || err != nil {
			t.Errorf("%s: %d invocations (%v), want %d", name, n, err, want)
		}
	}
}

// NF state whose chain is gone (removed just before the stack stopped, so no agent saw its
// instances go) is deleted at the gateway's start; a deployed chain's state, and keys not in
// keel-nf's shape, stay.
func Test_DeleteOrphanState_deletes_the_state_of_chains_no_longer_deployed(t *testing.T) {
	srv := testredis.Start(t)
	st := srv.Store(t)
	ctx := context.Background()
	if err := st.Put(ctx, &chain.Function{Deployment: types.FunctionDeployment{Service: "chain3", Image: "keel/chain"}}); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	keep := []string{"keel:state:openfaas-fn:chain3.0:nat", "keel:state:acme:chain3.12:nat:flows", "keel:state:odd", "keel:state:t:nodot:x"}
	gone := []string{"keel:state:openfaas-fn:scaled.0:0-nat", "keel:state:acme:a.b.7:fw", "keel:state:acme:chain.0:x"}
	for _, k := range append(append([]string{}, keep...), gone...) {
		if err := rdb.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := st.DeleteOrphanState(ctx)
	if err != nil || n != len(gone) {
		t.Fatalf("deleted %d keys (%v), want %d", n, err, len(gone))
	}
	for _, k := range keep {
		if rdb.Exists(ctx, k).Val() != 1 {
			t.Errorf("%s deleted", k)
		}
	}
	for _, k := range gone {
		if rdb.Exists(ctx, k).Val() != 0 {
			t.Errorf("%s kept", k)
		}
	}
	if n, err := st.DeleteOrphanState(ctx); err != nil || n != 0 {
		t.Errorf("second pass: %d, %v", n, err)
	}
}

// An instance written before spec and status were apart (one JSON without a generation) is
// generation 0: the gateway that reads it after an upgrade can change it.
func Test_an_instance_of_the_old_layout_is_generation_0(t *testing.T) {
	srv := testredis.Start(t)
	st := srv.Store(t)
	ctx := context.Background()
	c := raw(t, srv)
	old := `{"id":"chain3/0","chain":"chain3","worker":"local","vlan":100,"state":"pooled","core":-1,"phase":"ready","flows":0}`
	if err := c.HSet(ctx, "keel:instances:chain3", "chain3/0", old).Err(); err != nil {
		t.Fatal(err)
	}
	in, err := st.Instance(ctx, "chain3", "chain3/0")
	if err != nil || in == nil || in.Gen != 0 {
		t.Fatalf("read %+v, %v; want generation 0", in, err)
	}
	in.State, in.Core = store.Attached, 1
	if err := st.UpdateSpec(ctx, in, false); err != nil || in.Gen != 1 {
		t.Fatalf("UpdateSpec of the old record: %v (generation %d), want it written as generation 1", err, in.Gen)
	}
}

// DeleteFlows releases a batch of flows in one call: each flow's instance count after, in the
// batch's order, the same as DeleteFlow one at a time would give, a switch-only flow and a
// flow released before included.
func Test_DeleteFlows_releases_a_batch_as_DeleteFlow_would_one_at_a_time(t *testing.T) {
	srv := testredis.Start(t)
	st := srv.Store(t)
	ctx := context.Background()
	a := &store.Instance{ID: "chain3/0", Chain: "chain3", VLAN: 100, State: store.Attached, Core: 1}
	b := &store.Instance{ID: "chain3/1", Chain: "chain3", VLAN: 101, State: store.Attached, Core: 1}
	for _, in := range []*store.Instance{a, b} {
		if err := st.PutInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	var recs []*store.Flow
	for i, in := range []*store.Instance{a, a, a, b} {
		f := &store.Flow{Key: fmt.Sprintf("17 198.18.0.1:%d 198.18.3.1:5001", 1024+i), Chain: "chain3", Instance: in.ID}
		if err := st.AssignFlow(ctx, f, in, false); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, f)
	}
	sw := &store.Flow{Key: "17 198.18.0.1:2000 198.18.1.1:5001", Chain: "chain1"}
	if err := st.PutFlow(ctx, sw); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DeleteFlow(ctx, recs[2]); err != nil {
		t.Fatal(err)
	}
	got, err := st.DeleteFlows(ctx, []*store.Flow{recs[0], sw, recs[3], recs[1], recs[2]})
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint32{1, 0, 0, 0, 0}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts after %v, want %v", got, want)
	}
	for _, f := range append(recs, sw) {
		if rec, _ := st.Flow(ctx, f.Key); rec != nil {
			t.Fatalf("flow %s still assigned", f.Key)
		}
	}
	insts, _ := st.Instances(ctx, "chain3")
	for _, in := range insts {
		if in.Flows != 0 {
			t.Fatalf("instance %s keeps %d flows", in.ID, in.Flows)
		}
	}
	// what the cache says is what Redis holds
	st2 := srv.Store(t)
	if fl, _ := st2.Flows(ctx, ""); len(fl) != 0 {
		t.Fatalf("Redis keeps %d flows", len(fl))
	}
	if n, err := st.DeleteFlows(ctx, nil); n != nil || err != nil {
		t.Fatalf("an empty batch: %v %v", n, err)
	}
}
