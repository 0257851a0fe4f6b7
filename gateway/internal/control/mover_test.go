// SPDX-License-Identifier: Apache-2.0

package control

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/controller"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// moveRig is chain3 (one NAT, movable) with instances S = chain3/0 carrying four flows
// (three assigned by ingress-0, one by no recorded ingress) and D = chain3/1, and a control
// Server whose Mover answers within timeout.
type moveRig struct {
	st    *store.Store
	hub   *events.Hub
	srv   *Server
	mv    *Mover
	s, d  *store.Instance
	flows []*store.Flow
}

func newMoveRig(t *testing.T, timeout time.Duration) *moveRig {
	t.Helper()
	st := testredis.Store(t)
	hub := events.NewHub()
	ctx := context.Background()
	nat := chain.Member{Name: "nat", NF: "nat", Image: chain.LibraryImage, Movable: true}
	c := &chain.Chain{Name: "chain3", Spec: "NAT", Filter: "dst net 198.18.3.0/24", NFs: []string{"nat"},
		NFConfigs: []chain.Member{nat}, Members: []chain.Member{nat}}
	if err := st.Put(ctx, &chain.Function{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: "chain3"}, Chain: c}); err != nil {
		t.Fatal(err)
	}
	r := &moveRig{st: st, hub: hub,
		s: &store.Instance{ID: "chain3/0", Chain: "chain3", Worker: "local", VLAN: 100, State: store.Attached, Core: 1},
		d: &store.Instance{ID: "chain3/1", Chain: "chain3", Worker: "local", VLAN: 101, State: store.Attached, Core: 2}}
	for _, in := range []*store.Instance{r.s, r.d} {
		if err := st.PutInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	for i, ing := range []string{"ingress-0", "ingress-0", "ingress-0", ""} {
		f := &store.Flow{Key: fmt.Sprintf("17 198.18.0.1:%d 198.18.3.9:5001", 1000+i), Chain: "chain3", Ingress: ing, Since: time.Now().UTC()}
		if err := st.AssignFlow(ctx, f, r.s, false); err != nil {
			t.Fatal(err)
		}
		r.flows = append(r.flows, f)
	}
	r.mv = NewMover(st, hub)
	r.mv.Timeout = timeout
	r.mv.Logf = t.Logf
	r.srv = &Server{Store: st, Hub: hub, Moves: r.mv, Controller: &controller.Controller{Store: st, Hub: hub, Policy: policy.Keel()}}
	return r
}

// on returns the instance each flow's assignment names.
func (r *moveRig) on(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, f := range r.flows {
		rec, err := r.st.Flow(context.Background(), f.Key)
		if err != nil || rec == nil {
			t.Fatalf("flow %s: %+v %v", f.Key, rec, err)
		}
		out = append(out, rec.Instance)
	}
	return out
}

func (r *moveRig) counts(t *testing.T) string {
	t.Helper()
	insts, err := r.st.Instances(context.Background(), "chain3")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s=%d %s=%d", insts[0].ID, insts[0].Flows, insts[1].ID, insts[1].Flows)
}

// report is an ingress's ReportMoves for move: the flows moved, except the one at refuse
// (reason "refused"); pause 150 µs each.
func report(t *testing.T, move *pb.FlowMove, refuse int) *pb.ReportMovesRequest {
	t.Helper()
	req := &pb.ReportMovesRequest{IngressId: move.IngressId, MoveId: move.Id}
	for i, f := range move.Flows {
		r := &pb.FlowMoveResult{Flow: f, Moved: i != refuse, PauseUs: 150}
		if !r.Moved {
			r.Reason, r.PauseUs = "refused", 0
		}
		req.Results = append(req.Results, r)
	}
	return req
}

// nextMove waits for a FLOWS_MOVE on ch.
func nextMove(t *testing.T, ch <-chan *pb.WatchEvent) *pb.FlowMove {
	t.Helper()
	select {
	case ev := <-ch:
		if ev.Kind != pb.WatchEvent_FLOWS_MOVE || ev.Move == nil {
			t.Fatalf("event %v, want FLOWS_MOVE", ev)
		}
		return ev.Move
	case <-time.After(10 * time.Second):
		t.Fatal("no FLOWS_MOVE published")
	}
	return nil
}

// The Mover sends the ingress that assigned the flows one FLOWS_MOVE and returns each
// flow's outcome once the ingress reported; the report moved the moved flows' assignments.
func Test_the_Mover_publishes_a_move_and_returns_the_reported_outcome(t *testing.T) {
	r := newMoveRig(t, 10*time.Second)
	ctx := context.Background()
	if !r.mv.Movable("chain3") || r.mv.Movable("nochain") {
		t.Fatal("Movable: chain3 (a movable NAT) should move, an unknown chain not")
	}
	ch, stop := r.hub.Subscribe()
	defer stop()
	type answer struct {
		res []controller.MoveResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := r.mv.MoveFlows(ctx, policy.ReasonScaleIn, r.s, r.d, r.flows)
		done <- answer{res, err}
	}()
	mv := nextMove(t, ch)
	if mv.IngressId != "ingress-0" || mv.Chain != "chain3" || mv.From.GetId() != "chain3/0" || mv.To.GetId() != "chain3/1" ||
		mv.To.GetVlan() != 101 || len(mv.Flows) != 3 || mv.Id == "" {
		t.Fatalf("FlowMove %v: want chain3/0 -> chain3/1 (VLAN 101), the three flows of ingress-0", mv)
	}
	if f := mv.Flows[1]; f.SrcIp != "198.18.0.1" || f.SrcPort != 1001 || f.DstIp != "198.18.3.9" || f.DstPort != 5001 || f.Proto != 17 {
		t.Fatalf("flow 1 on the wire: %v", f)
	}
	select {
	case a := <-done:
		t.Fatalf("MoveFlows returned before the report: %+v", a)
	case <-time.After(50 * time.Millisecond):
	}
	resp, err := r.srv.ReportMoves(ctx, report(t, mv, 2))
	if err != nil || resp.Applied != 2 {
		t.Fatalf("ReportMoves = %v, %v; want 2 applied", resp, err)
	}
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	var got []string
	for _, x := range a.res {
		got = append(got, fmt.Sprintf("%v/%s/%.0f", x.Moved, x.Why, x.PauseUs))
	}
	if strings.Join(got, " ") != "true//150 true//150 false/refused/0 false/no_ingress/0" {
		t.Fatalf("results %q", got)
	}
	if a.res[0].Pause != 150*time.Microsecond {
		t.Fatalf("pause %s, want 150µs", a.res[0].Pause)
	}
	if on := strings.Join(r.on(t), " "); on != "chain3/1 chain3/1 chain3/0 chain3/0" {
		t.Fatalf("assignments %s", on)
	}
	if c := r.counts(t); c != "chain3/0=2 chain3/1=2" {
		t.Fatalf("counts %s", c)
	}
	// The same report again changes nothing and gets the same answer.
	resp, err = r.srv.ReportMoves(ctx, report(t, mv, 2))
	if err != nil || resp.Applied != 2 || r.counts(t) != "chain3/0=2 chain3/1=2" {
		t.Fatalf("the report again: %v, %v, %s", resp, err, r.counts(t))
	}
}

// No report within Timeout: MoveFlows returns an error and the assignments stay on the
// source; the ingress gets no move for Quiet; a report that still comes moves them.
func Test_the_Mover_times_out_cleanly_and_a_late_report_still_applies(t *testing.T) {
	r := newMoveRig(t, 100*time.Millisecond)
	ctx := context.Background()
	ch, stop := r.hub.Subscribe()
	defer stop()
	start := time.Now()
	res, err := r.mv.MoveFlows(ctx, policy.ReasonScaleIn, r.s, r.d, r.flows[:3])
	if err == nil || !strings.Contains(err.Error(), "did not report") || res != nil {
		t.Fatalf("MoveFlows without a report: %v, %v; want an error", res, err)
	}
	if took := time.Since(start); took < 100*time.Millisecond || took > 5*time.Second {
		t.Fatalf("gave up after %s, want about the 100 ms timeout", took)
	}
	mv := nextMove(t, ch)
	if on := strings.Join(r.on(t), " "); on != "chain3/0 chain3/0 chain3/0 chain3/0" || r.counts(t) != "chain3/0=4 chain3/1=0" {
		t.Fatalf("after a timeout: assignments %s, counts %s; want all on the source", on, r.counts(t))
	}
	// Quiet: the next move to that ingress is not sent.
	res, err = r.mv.MoveFlows(ctx, policy.ReasonScaleIn, r.s, r.d, r.flows)
	if err != nil || len(res) != 4 || res[0].Why != WhyNoReport || res[3].Why != WhyNoIngress {
		t.Fatalf("a move to a quiet ingress: %+v, %v", res, err)
	}
	select {
	case ev := <-ch:
		t.Fatalf("a move was sent to a quiet ingress: %v", ev)
	default:
	}
	// The late report: the data plane moved them, the assignments follow.
	resp, err := r.srv.ReportMoves(ctx, report(t, mv, -1))
	if err != nil || resp.Applied != 3 || r.counts(t) != "chain3/0=1 chain3/1=3" {
		t.Fatalf("late report: %v, %v, %s", resp, err, r.counts(t))
	}
}

// A context that ends stops the wait; a flow already in a move under way is not sent again.
func Test_the_Mover_stops_with_its_context_and_does_not_move_a_flow_twice(t *testing.T) {
	r := newMoveRig(t, 10*time.Second)
	ch, stop := r.hub.Subscribe()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.mv.MoveFlows(ctx, policy.ReasonRelieve, r.s, r.d, r.flows[:1])
		done <- err
	}()
	mv := nextMove(t, ch)
	res, err := r.mv.MoveFlows(context.Background(), policy.ReasonRelieve, r.s, r.d, r.flows[:1])
	if err != nil || res[0].Why != WhyBusy {
		t.Fatalf("a flow in a move under way: %+v, %v; want busy", res, err)
	}
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), mv.Id) {
		t.Fatalf("cancelled: %v", err)
	}
	if _, err := r.mv.MoveFlows(context.Background(), policy.ReasonRelieve, r.s, &store.Instance{ID: "chain4/0", Chain: "chain4"}, r.flows[:1]); err == nil {
		t.Fatal("a move between chains was accepted")
	}
}

// A report that does not match its move is refused whole, naming the problem, and changes
// nothing.
func Test_ReportMoves_refuses_what_does_not_match_its_move(t *testing.T) {
	r := newMoveRig(t, 100*time.Millisecond)
	ctx := context.Background()
	ch, stop := r.hub.Subscribe()
	defer stop()
	if _, err := r.mv.MoveFlows(ctx, policy.ReasonScaleIn, r.s, r.d, r.flows[:2]); err == nil {
		t.Fatal("want a timeout")
	}
	mv := nextMove(t, ch)
	good := report(t, mv, -1)
	stranger := &pb.FiveTuple{SrcIp: "198.18.0.1", DstIp: "198.18.3.9", SrcPort: 1002, DstPort: 5001, Proto: 17} // S's, not in the move
	for name, c := range map[string]struct {
		req  *pb.ReportMovesRequest
		code codes.Code
		text string
	}{
		"no ingress":      {&pb.ReportMovesRequest{MoveId: mv.Id}, codes.InvalidArgument, "ingress_id"},
		"no move id":      {&pb.ReportMovesRequest{IngressId: "ingress-0"}, codes.InvalidArgument, "move_id"},
		"unknown move":    {&pb.ReportMovesRequest{IngressId: "ingress-0", MoveId: "nope"}, codes.NotFound, "nope"},
		"another ingress": {&pb.ReportMovesRequest{IngressId: "ingress-1", MoveId: mv.Id, Results: good.Results}, codes.PermissionDenied, "ingress-0"},
		"a flow not in the move": {&pb.ReportMovesRequest{IngressId: "ingress-0", MoveId: mv.Id,
			Results: append([]*pb.FlowMoveResult{good.Results[0]}, &pb.FlowMoveResult{Flow: stranger, Moved: true})}, codes.InvalidArgument, "not one of move"},
		"a flow twice": {&pb.ReportMovesRequest{IngressId: "ingress-0", MoveId: mv.Id,
			Results: []*pb.FlowMoveResult{good.Results[0], good.Results[0]}}, codes.InvalidArgument, "twice"},
		"a malformed flow": {&pb.ReportMovesRequest{IngressId: "ingress-0", MoveId: mv.Id,
			Results: []*pb.FlowMoveResult{good.Results[0], {Flow: &pb.FiveTuple{SrcIp: "x"}, Moved: true}}}, codes.InvalidArgument, "results[1]"},
		"a negative pause": {&pb.ReportMovesRequest{IngressId: "ingress-0", MoveId: mv.Id,
			Results: []*pb.FlowMoveResult{{Flow: good.Results[0].Flow, Moved: true, PauseUs: -1}}}, codes.InvalidArgument, "pause_us"},
		"too many": {&pb.ReportMovesRequest{IngressId: "ingress-0", MoveId: mv.Id,
			Results: make([]*pb.FlowMoveResult, MaxReportedFlows+1)}, codes.InvalidArgument, "at most"},
	} {
		_, err := r.srv.ReportMoves(ctx, c.req)
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: %v, want %v naming %q", name, err, c.code, c.text)
		}
	}
	if r.counts(t) != "chain3/0=4 chain3/1=0" {
		t.Fatalf("a refused report changed the assignments: %s", r.counts(t))
	}
	// A flow reported moved that has left the source meanwhile (it ended) stays as it is.
	if _, err := r.st.DeleteFlow(ctx, r.flows[0]); err != nil {
		t.Fatal(err)
	}
	resp, err := r.srv.ReportMoves(ctx, good)
	if err != nil || resp.Applied != 1 || r.counts(t) != "chain3/0=2 chain3/1=1" {
		t.Fatalf("report with an ended flow: %v, %v, %s", resp, err, r.counts(t))
	}
	off := &Server{Store: r.st, Hub: r.hub}
	if _, err := off.ReportMoves(ctx, good); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("moves off: %v, want FailedPrecondition", err)
	}
}

// A FLOWS_MOVE reaches only the ingress it names: other watchers (agents, torctl, another
// ingress) never see it.
func Test_Watch_sends_a_move_only_to_its_ingress(t *testing.T) {
	r := newMoveRig(t, 10*time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterControlServer(gs, r.srv)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl := pb.NewControlClient(conn)
	watch := func(name string) pb.Control_WatchClient {
		w, err := cl.Watch(ctx, &pb.WatchRequest{Watcher: name})
		if err != nil {
			t.Fatal(err)
		}
		for {
			ev, err := w.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind == pb.WatchEvent_FLOWS_MOVE {
				t.Fatalf("%s: a FLOWS_MOVE in the snapshot", name)
			}
			if ev.Kind == pb.WatchEvent_SYNCED {
				return w
			}
		}
	}
	ing, agent, other := watch("ingress-0"), watch("worker-a"), watch("ingress-1")
	go func() { _, _ = r.mv.MoveFlows(ctx, policy.ReasonScaleIn, r.s, r.d, r.flows[:1]) }()
	ev, err := ing.Recv()
	if err != nil || ev.Kind != pb.WatchEvent_FLOWS_MOVE || ev.Move.GetIngressId() != "ingress-0" {
		t.Fatalf("ingress-0 got %v, %v", ev, err)
	}
	// A later event every watcher gets: the others' next event must be it, not the move.
	r.hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_WORKER_REGISTERED, Worker: "w9"})
	for name, w := range map[string]pb.Control_WatchClient{"worker-a": agent, "ingress-1": other} {
		ev, err := w.Recv()
		if err != nil || ev.Kind != pb.WatchEvent_WORKER_REGISTERED {
			t.Fatalf("%s got %v, %v; want the worker event only", name, ev, err)
		}
	}
	if _, err := r.srv.ReportMoves(ctx, report(t, ev.Move, -1)); err != nil {
		t.Fatal(err)
	}
}
