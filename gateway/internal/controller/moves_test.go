// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	"github.com/openfaas/faas-provider/types"
)

// fakeMover records the moves asked of it and moves the flows' assignments as the
// ingress's report would (store.ApplyMove); err fails them all, fail leaves every flow on its
// source for that reason.
type fakeMover struct {
	movable bool
	err     error
	fail    string
	st      *store.Store
	calls   []string
}

func (m *fakeMover) Movable(string) bool { return m.movable }

func (m *fakeMover) MoveFlows(ctx context.Context, reason policy.Reason, from, to *store.Instance, flows []*store.Flow) ([]MoveResult, error) {
	m.calls = append(m.calls, fmt.Sprintf("%s %s->%s %d %s", from.Chain, from.ID, to.ID, len(flows), reason))
	if m.err != nil {
		return nil, m.err
	}
	var res []MoveResult
	var keys []string
	for _, f := range flows {
		if m.fail != "" {
			res = append(res, MoveResult{Key: f.Key, Why: m.fail})
			continue
		}
		res = append(res, MoveResult{Key: f.Key, Moved: true, Pause: time.Millisecond})
		keys = append(keys, f.Key)
	}
	mv := &store.Move{ID: fmt.Sprint(len(m.calls)), Chain: from.Chain, From: from.ID, To: to.ID, Reason: string(reason)}
	if _, _, err := m.st.ApplyMove(ctx, mv, keys); err != nil {
		return nil, err
	}
	return res, nil
}

// natModel models chain3 at 1 Mpps a core, threshold 0.8.
type natModel struct{}

func (natModel) Model(name string, _ []string, p99 float64) (*policy.Model, error) {
	return &policy.Model{Chain: policy.Chain{Name: name, SLOus: p99, MaxPps: 1e6, Threshold: 0.8}}, nil
}

// movesRack is one worker with managed cores 1–3 and chain3 with two attached instances:
// chain3/0 (core 1) carries 1 flow at 10 Kpps (500 packets held in a 50 ms pause), chain3/1 (core 2) 3 flows at 0.3 Mpps; and
// a pooled chain3/2.
func movesRack(t *testing.T, mv Mover) (*Server, *store.Store) {
	t.Helper()
	st := testredis.Store(t)
	ctx := context.Background()
	hub := events.NewHub()
	srv := newServer(st, hub, &provider.Provider{Store: st, Hub: hub, Metrics: metrics.New()})
	srv.Modeler = natModel{}
	if mv, ok := mv.(*fakeMover); ok {
		mv.st = st
	}
	if mv != nil {
		srv.Mover = mv
	}
	if err := st.PutWorker(ctx, &store.Worker{Name: "local", CoreIDs: []uint32{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	nat := chain.Member{Name: "nat", NF: "nat", Image: chain.LibraryImage}
	c := &chain.Chain{Name: "chain3", Spec: "NAT", Filter: "dst net 198.18.3.0/24", NFs: []string{"nat"},
		NFConfigs: []chain.Member{nat}, Members: []chain.Member{nat},
		Placement: chain.Placement{Subgroups: []chain.Subgroup{{Server: "local", Cores: 1, NFs: []string{"nat"}}}}}
	f := &chain.Function{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: "chain3"}, Chain: c, Replicas: 1}
	if err := st.Put(ctx, f); err != nil {
		t.Fatal(err)
	}
	insts := []*store.Instance{
		{ID: "chain3/0", Chain: "chain3", Worker: "local", VLAN: 100, State: store.Attached, Core: 1, Phase: "ready", RatePps: 1e4, Batch: 1},
		{ID: "chain3/1", Chain: "chain3", Worker: "local", VLAN: 101, State: store.Attached, Core: 2, Phase: "ready", RatePps: 3e5, Batch: 1},
		{ID: "chain3/2", Chain: "chain3", Worker: "local", VLAN: 102, State: store.Pooled, Core: -1, Phase: "ready"},
	}
	for _, in := range insts {
		if err := st.PutInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range []int{1, 3} {
		for k := 0; k < n; k++ {
			fl := &store.Flow{Key: fmt.Sprintf("6 198.18.0.%d:%d 198.18.3.9:80", i+1, 4000+k), Chain: "chain3"}
			if err := st.AssignFlow(ctx, fl, insts[i], false); err != nil {
				t.Fatal(err)
			}
		}
	}
	return srv, st
}

func Test_without_a_Mover_flows_stay_and_the_instance_keeps_its_core(t *testing.T) {
	srv, st := movesRack(t, nil)
	if err := srv.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if in := instanceIDs(t, st)["chain3/0"]; in.State != store.Attached || in.Flows != 1 {
		t.Fatalf("chain3/0 = %+v, want attached with its flow (no Mover: no move)", in)
	}
	for _, d := range srv.Decisions() {
		if d.Kind == policy.KindFlowMove {
			t.Fatalf("a move without a Mover: %+v", d)
		}
	}
}

func Test_the_controller_empties_an_instance_through_the_Mover_and_gives_its_core_back(t *testing.T) {
	mv := &fakeMover{movable: true}
	srv, st := movesRack(t, mv)
	var moved []string
	srv.OnFlowMove = func(chain string, r policy.Reason, res []MoveResult) {
		moved = append(moved, fmt.Sprintf("%s %s %d", chain, r, len(res)))
	}
	ctx := context.Background()
	if err := srv.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if len(mv.calls) != 1 || mv.calls[0] != "chain3 chain3/0->chain3/1 1 scale_in" {
		t.Fatalf("Mover calls %q, want chain3/0's flow to chain3/1", mv.calls)
	}
	ins := instanceIDs(t, st)
	if in := ins["chain3/0"]; in.State != store.Pooled || in.Flows != 0 {
		t.Fatalf("chain3/0 = %+v, want detached without flows", in)
	}
	if in := ins["chain3/1"]; in.Flows != 4 {
		t.Fatalf("chain3/1 has %d flows, want 4", in.Flows)
	}
	if f, _ := st.Flow(ctx, "6 198.18.0.1:4000 198.18.3.9:80"); f == nil || f.Instance != "chain3/1" || f.VLAN != 101 {
		t.Fatalf("moved flow's record %+v, want on chain3/1 (VLAN 101)", f)
	}
	if len(moved) != 1 || moved[0] != "chain3 scale_in 1" {
		t.Fatalf("OnFlowMove saw %q", moved)
	}
	var kinds []string
	for _, d := range srv.Decisions() {
		if d.Kind == policy.KindFlowMove || (d.Kind == policy.KindDetach && d.Reason == policy.ReasonFlowsMoved) {
			kinds = append(kinds, string(d.Kind)+"/"+string(d.Reason)+" "+d.Instance)
		}
	}
	if fmt.Sprint(kinds) != "[flow_move/scale_in chain3/1 detach/flows_moved chain3/0]" {
		t.Fatalf("decisions %q", kinds)
	}
	// The next pass moves nothing more (one instance left; the chain is in its hold).
	if err := srv.Reconcile(ctx); err != nil || len(mv.calls) != 1 {
		t.Fatalf("second pass: %v, calls %q", err, mv.calls)
	}
}

func Test_a_failed_move_or_an_unmovable_chain_leaves_the_flows_and_the_core(t *testing.T) {
	for name, mv := range map[string]*fakeMover{
		"mover fails":     {movable: true, err: errors.New("no report in time")},
		"flows refused":   {movable: true, fail: "refused"},
		"chain unmovable": {movable: false},
	} {
		t.Run(name, func(t *testing.T) {
			srv, st := movesRack(t, mv)
			ctx := context.Background()
			if err := srv.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if !mv.movable && len(mv.calls) != 0 {
				t.Fatalf("an unmovable chain's flows were moved: %q", mv.calls)
			}
			if in := instanceIDs(t, st)["chain3/0"]; in.State != store.Attached || in.Flows != 1 {
				t.Fatalf("chain3/0 = %+v, want attached with its flow", in)
			}
			if f, _ := st.Flow(ctx, "6 198.18.0.1:4000 198.18.3.9:80"); f == nil || f.Instance != "chain3/0" {
				t.Fatalf("flow record %+v, want still on chain3/0", f)
			}
			for _, d := range srv.Decisions() {
				if d.Kind == policy.KindFlowMove {
					t.Fatalf("a move was recorded: %+v", d)
				}
			}
		})
	}
}
