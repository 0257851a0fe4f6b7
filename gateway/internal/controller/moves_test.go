// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/pcapfilter"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	during  func() // called while the move is under way
}

func (m *fakeMover) Movable(string) bool { return m.movable }

func (m *fakeMover) MoveFlows(ctx context.Context, reason policy.Reason, from, to *store.Instance, flows []*store.Flow) ([]MoveResult, error) {
	m.calls = append(m.calls, fmt.Sprintf("%s %s->%s %d %s", from.Chain, from.ID, to.ID, len(flows), reason))
	if m.during != nil {
		m.during()
	}
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
			// A flow that did not move is not tried again at once.
			calls := len(mv.calls)
			if err := srv.Reconcile(ctx); err != nil || len(mv.calls) != calls {
				t.Fatalf("next pass: %v, calls %q", err, mv.calls)
			}
		})
	}
}

// MoveInstance (POST /system/keel/moves) moves an instance's flows in batches through the
// Mover and records each move; what it cannot do it refuses with a status naming why.
func Test_MoveInstance_moves_an_instances_flows_in_batches(t *testing.T) {
	mv := &fakeMover{movable: true}
	srv, st := movesRack(t, mv)
	ctx := context.Background()
	rep, err := srv.MoveInstance(ctx, "chain3/1", "chain3/0", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Flows != 3 || rep.Moved != 3 || len(rep.Batches) != 2 || rep.Batches[0].Flows != 2 || rep.Batches[1].Moved != 1 ||
		len(rep.Batches[0].Results) != 2 || !rep.Batches[0].Results[0].Moved {
		t.Fatalf("report %+v", rep)
	}
	if fmt.Sprint(mv.calls) != "[chain3 chain3/1->chain3/0 2 operator chain3 chain3/1->chain3/0 1 operator]" {
		t.Fatalf("Mover calls %q", mv.calls)
	}
	if ins := instanceIDs(t, st); ins["chain3/0"].Flows != 4 || ins["chain3/1"].Flows != 0 {
		t.Fatalf("counts %d, %d; want 4, 0", ins["chain3/0"].Flows, ins["chain3/1"].Flows)
	}
	n := 0
	for _, d := range srv.Decisions() {
		if d.Kind == policy.KindFlowMove && d.Reason == policy.ReasonOperator && d.Instance == "chain3/0" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d flow_move/operator decisions, want 2", n)
	}
	// limit: one flow only.
	if rep, err := srv.MoveInstance(ctx, "chain3/0", "chain3/1", 100, 1); err != nil || rep.Flows != 1 || rep.Moved != 1 {
		t.Fatalf("limit 1: %+v, %v", rep, err)
	}
	for name, c := range map[string]struct {
		from, to     string
		batch, limit int
		code         codes.Code
	}{
		"same instance":       {"chain3/0", "chain3/0", 1, 0, codes.InvalidArgument},
		"two chains":          {"chain3/0", "chain4/0", 1, 0, codes.InvalidArgument},
		"not an instance id":  {"chain3", "chain3/1", 1, 0, codes.InvalidArgument},
		"batch 0":             {"chain3/0", "chain3/1", 0, 0, codes.InvalidArgument},
		"negative limit":      {"chain3/0", "chain3/1", 1, -1, codes.InvalidArgument},
		"unknown source":      {"chain3/9", "chain3/1", 1, 0, codes.NotFound},
		"unknown destination": {"chain3/0", "chain3/9", 1, 0, codes.NotFound},
		"pooled destination":  {"chain3/0", "chain3/2", 1, 0, codes.FailedPrecondition},
	} {
		if _, err := srv.MoveInstance(ctx, c.from, c.to, c.batch, c.limit); status.Code(err) != c.code {
			t.Errorf("%s: %v, want %v", name, err, c.code)
		}
	}
	mv.movable = false
	if _, err := srv.MoveInstance(ctx, "chain3/0", "chain3/1", 1, 0); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("unmovable chain: %v", err)
	}
	srv.Mover = nil
	if _, err := srv.MoveInstance(ctx, "chain3/0", "chain3/1", 1, 0); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "--flow-moves") {
		t.Errorf("no Mover: %v", err)
	}
}

// While a move is under way the controller is free: new flows are assigned (the ingress that
// holds the moving flows' packets assigns others meanwhile, and reports the move through the
// gateway).
func Test_new_flows_are_assigned_while_a_move_is_under_way(t *testing.T) {
	mv := &fakeMover{movable: true}
	srv, st := movesRack(t, mv)
	ctx := context.Background()
	var assigned *pb.AssignFlowResponse
	mv.during = func() {
		done := make(chan struct{})
		go func() {
			flow := pcapfilter.Flow{Src: netip.MustParseAddr("198.18.0.77"), Dst: netip.MustParseAddr("198.18.3.9"), SrcPort: 9, DstPort: 80, Proto: 6}
			assigned, _ = srv.Assign(ctx, flow, "chain3", "ingress-7")
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("a new flow waited for the move: the controller's lock is held during it")
		}
	}
	if err := srv.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if len(mv.calls) != 1 || assigned == nil || !assigned.Assigned {
		t.Fatalf("calls %q, new flow %v", mv.calls, assigned)
	}
	if f, _ := st.Flow(ctx, "6 198.18.0.77:9 198.18.3.9:80"); f == nil || f.Ingress != "ingress-7" {
		t.Fatalf("new flow's record %+v, want its ingress kept", f)
	}
}

func Test_the_controller_empties_an_instance_over_several_passes_and_gives_it_no_new_flows(t *testing.T) {
	mv := &fakeMover{movable: true}
	srv, st := movesRack(t, mv)
	ctx := context.Background()
	// chain3/0 gets a second flow: its 10 Kpps shared by two, each holds 250 packets in a
	// 50 ms pause, and a QueueRoom of 300 lets one plan move only one of them.
	src := instanceIDs(t, st)["chain3/0"]
	if err := st.AssignFlow(ctx, &store.Flow{Key: "6 198.18.0.1:4001 198.18.3.9:80", Chain: "chain3"}, src, false); err != nil {
		t.Fatal(err)
	}
	srv.Policy.Moves.QueueRoom = 300
	if err := srv.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if len(mv.calls) != 1 || mv.calls[0] != "chain3 chain3/0->chain3/1 1 scale_in" {
		t.Fatalf("first pass: Mover calls %q, want one of chain3/0's flows to chain3/1", mv.calls)
	}
	if in := instanceIDs(t, st)["chain3/0"]; in.State != store.Attached || in.Flows != 1 {
		t.Fatalf("chain3/0 = %+v after the first pass, want attached with one flow left", in)
	}
	// Meanwhile the policy sees chain3/0 as being emptied: Assign gives it no new flow.
	srv.mu.Lock()
	s, err := srv.state(ctx)
	srv.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range s.view.Instances {
		if in.Emptying != (in.ID == "chain3/0") {
			t.Fatalf("instance %s: Emptying = %v, want it only on chain3/0", in.ID, in.Emptying)
		}
	}
	// The agents' next stats: chain3/0's rate is its one flow's.
	in := instanceIDs(t, st)["chain3/0"]
	in.RatePps = 5e3
	if err := st.UpdateStatus(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if len(mv.calls) != 2 || mv.calls[1] != "chain3 chain3/0->chain3/1 1 scale_in" {
		t.Fatalf("second pass: Mover calls %q, want chain3/0's last flow to chain3/1", mv.calls)
	}
	if in := instanceIDs(t, st)["chain3/0"]; in.State != store.Pooled || in.Flows != 0 {
		t.Fatalf("chain3/0 = %+v after the second pass, want detached without flows", in)
	}
}
