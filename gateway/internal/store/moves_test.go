// SPDX-License-Identifier: Apache-2.0

package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	"github.com/redis/go-redis/v9"
)

// moveRack is chain3 with instances a (3 flows) and b (1 flow) on two workers, and chain4/0
// with one flow; m moves a's flows to b.
func moveRack(t *testing.T) (srv *testredis.Server, st *store.Store, a, b *store.Instance, keys []string, m *store.Move) {
	t.Helper()
	srv = testredis.Start(t)
	st = srv.Store(t)
	ctx := context.Background()
	a = &store.Instance{ID: "chain3/0", Chain: "chain3", Worker: "w1", VLAN: 100, State: store.Attached, Core: 1}
	b = &store.Instance{ID: "chain3/1", Chain: "chain3", Worker: "w2", VLAN: 101, State: store.Attached, Core: 2}
	c := &store.Instance{ID: "chain4/0", Chain: "chain4", Worker: "w1", VLAN: 102, State: store.Attached, Core: 3}
	for _, in := range []*store.Instance{a, b, c} {
		if err := st.PutInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		f := &store.Flow{Key: fmt.Sprintf("17 198.18.0.1:%d 198.18.3.1:5001", 1024+i), Chain: "chain3", Ingress: "ingress-0", Since: time.Now().UTC()}
		if err := st.AssignFlow(ctx, f, a, false); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, f.Key)
	}
	for _, f := range []struct {
		f  *store.Flow
		in *store.Instance
	}{{&store.Flow{Key: "17 198.18.0.2:1 198.18.3.1:5001", Chain: "chain3"}, b}, {&store.Flow{Key: "17 198.18.0.9:1 198.18.4.1:5001", Chain: "chain4"}, c}} {
		if err := st.AssignFlow(ctx, f.f, f.in, false); err != nil {
			t.Fatal(err)
		}
	}
	m = &store.Move{ID: "m1", Ingress: "ingress-0", Chain: "chain3", From: a.ID, To: b.ID, Reason: "operator", Flows: keys, Sent: time.Now()}
	if err := st.PutMove(ctx, m); err != nil {
		t.Fatal(err)
	}
	return srv, st, a, b, keys, m
}

func counts(t *testing.T, st *store.Store, chain string) map[string]uint32 {
	t.Helper()
	insts, err := st.Instances(context.Background(), chain)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint32{}
	for _, in := range insts {
		out[in.ID] = in.Flows
	}
	return out
}

// A reported move re-points the flows' records at the destination (instance, VLAN, worker;
// the ingress kept), both instances' counts follow, in Redis as in the cache, and no
// invocation is counted; a report applied again changes nothing.
func Test_ApplyMove_moves_assignments_once(t *testing.T) {
	srv, st, a, b, keys, m := moveRack(t)
	ctx := context.Background()
	got, err := st.MoveByID(ctx, "m1")
	if err != nil || got == nil || got.To != b.ID || len(got.Flows) != 3 {
		t.Fatalf("MoveByID = %+v, %v", got, err)
	}
	if err := st.PutMove(ctx, m); err == nil {
		t.Fatal("a move id used twice was accepted")
	}
	first, out, err := st.ApplyMove(ctx, m, keys[:2])
	if err != nil || !first || fmt.Sprint(out) != "[1 1]" {
		t.Fatalf("ApplyMove = %v %v %v, want first and [1 1]", first, out, err)
	}
	check := func(what string, st *store.Store) {
		for i, k := range keys {
			want := b
			if i == 2 {
				want = a
			}
			rec, err := st.Flow(ctx, k)
			if err != nil || rec == nil || rec.Instance != want.ID || rec.VLAN != want.VLAN || rec.Worker != want.Worker ||
				rec.Ingress != "ingress-0" || rec.Chain != "chain3" || rec.Since.IsZero() {
				t.Fatalf("%s: flow %d: %+v (%v), want on %s from ingress-0", what, i, rec, err, want.ID)
			}
		}
		if c := counts(t, st, "chain3"); c[a.ID] != 1 || c[b.ID] != 3 {
			t.Fatalf("%s: flow counts %v, want 1 and 3", what, c)
		}
	}
	check("cache", st)
	check("redis", srv.Store(t)) // a store with an empty cache reads what Redis holds
	if n, _ := st.Invocations(ctx, "chain3"); n != 4 {
		t.Fatalf("%d invocations, want 4 (a move is no invocation)", n)
	}
	first, out, err = st.ApplyMove(ctx, m, keys[:2])
	if err != nil || first || fmt.Sprint(out) != "[2 2]" {
		t.Fatalf("the report again: %v %v %v, want not first and [2 2]", first, out, err)
	}
	check("again", st)
}

// Flows not on the move's source are refused one by one, and the others of the report move.
func Test_ApplyMove_refuses_flows_not_on_the_source(t *testing.T) {
	_, st, a, b, keys, m := moveRack(t)
	ctx := context.Background()
	onOtherChain, unknown := "17 198.18.0.9:1 198.18.4.1:5001", "6 198.18.0.7:9 198.18.3.1:80"
	m.From = "chain3/7" // a source that holds none of them
	_, out, err := st.ApplyMove(ctx, m, []string{keys[0]})
	if err != nil || out[0] != store.MoveNotOnSource {
		t.Fatalf("wrong source: %v %v", out, err)
	}
	m.From = a.ID
	_, out, err = st.ApplyMove(ctx, m, []string{onOtherChain, unknown, keys[1]})
	if err != nil || fmt.Sprint(out) != fmt.Sprint([]store.MoveOutcome{store.MoveNotOnSource, store.MoveNoFlow, store.MoveApplied}) {
		t.Fatalf("ApplyMove = %v %v", out, err)
	}
	for _, o := range out[:2] {
		if o.Err() == nil {
			t.Fatalf("outcome %d has no error", o)
		}
	}
	if rec, _ := st.Flow(ctx, onOtherChain); rec.Instance != "chain4/0" {
		t.Fatalf("a flow of another chain moved: %+v", rec)
	}
	if rec, _ := st.Flow(ctx, unknown); rec != nil {
		t.Fatalf("an unknown flow got a record: %+v", rec)
	}
	if c := counts(t, st, "chain3"); c[a.ID] != 2 || c[b.ID] != 2 {
		t.Fatalf("flow counts %v, want 2 and 2", c)
	}
	// A destination removed meanwhile takes nothing.
	if err := st.DeleteInstance(ctx, b, false); err != nil {
		t.Fatal(err)
	}
	_, out, err = st.ApplyMove(ctx, m, []string{keys[2]})
	if err != nil || out[0] != store.MoveGone {
		t.Fatalf("move to a removed instance: %v %v", out, err)
	}
	if rec, _ := st.Flow(ctx, keys[2]); rec.Instance != a.ID {
		t.Fatalf("flow moved to a removed instance: %+v", rec)
	}
}

// A flow record written before the ingress was kept reads as from no ingress.
func Test_a_flow_record_without_ingress_reads(t *testing.T) {
	srv := testredis.Start(t)
	st := srv.Store(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	old := `{"key":"6 198.18.0.1:1 198.18.3.1:80","chain":"chain3","instance":"chain3/0","vlan":100,"worker":"w1","since":"2026-01-02T03:04:05Z"}`
	if err := rdb.HSet(ctx, "keel:flows", "6 198.18.0.1:1 198.18.3.1:80", old).Err(); err != nil {
		t.Fatal(err)
	}
	rec, err := st.Flow(ctx, "6 198.18.0.1:1 198.18.3.1:80")
	if err != nil || rec == nil || rec.Ingress != "" || rec.Instance != "chain3/0" {
		t.Fatalf("old record: %+v %v", rec, err)
	}
}
