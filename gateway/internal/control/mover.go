// SPDX-License-Identifier: Apache-2.0

package control

// The gateway's side of a live flow move (issue 37; /work/notes/mv-design.md steps 1 and 8):
// the controller's Mover sends the ingress that assigned the flows a FlowMove on its Watch
// stream (FLOWS_MOVE), and the ingress, once it moved them (or put them back), answers with
// ReportMoves. The report moves the flows' assignments in Redis (store.ApplyMove) whether or
// not anyone still waits for it: the data plane did what it reports.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/controller"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/store"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults of Mover's bounds.
const (
	// DefaultMoveTimeout bounds the wait for a move's report: above keel-ingress's own bounds
	// on a move (200 ms for each in-band frame, 5 s for a rule's removal or install).
	DefaultMoveTimeout = 10 * time.Second
	// DefaultMoveQuiet is how long an ingress that did not report a move in time gets no
	// other move.
	DefaultMoveQuiet = time.Minute
)

// Why a flow did not move, as the gateway tells it (the ingress's own reasons are
// keel-ingress's MoveFailureName: global, no_room, refused, timeout, rule, busy, invalid).
const (
	WhyNoReport    = "no_report"     // the ingress did not report the move in time
	WhyNoIngress   = "no_ingress"    // the flow was assigned before the gateway kept its ingress
	WhyBusy        = "busy"          // the flow is in a move under way
	WhyUnreported  = "unreported"    // the ingress's report left the flow out
	WhyNotOnSource = "not_on_source" // reported moved, but its assignment was on another instance
	WhyNoFlow      = "no_flow"       // reported moved, but it had no assignment any more (it ended)
	WhyGone        = "gone"          // reported moved, but the destination was removed meanwhile
	WhyOther       = "other"         // a reason the gateway does not know
)

// ingressWhy are the reasons an ingress may give; any other is counted as WhyOther (they
// label a metric: a bounded set).
var ingressWhy = map[string]bool{"global": true, "no_room": true, "refused": true, "timeout": true, "rule": true,
	"busy": true, "invalid": true}

// MaxReportedFlows is the most flows one ReportMoves may carry (a FlowMove's at most).
const MaxReportedFlows = controller.MaxMoveBatch

// Mover is the controller's Mover (controller.Mover) over the Watch hub and ReportMoves.
type Mover struct {
	Store *store.Store
	Hub   *events.Hub
	// Timeout bounds the wait for one move's report (MoveFlows's ctx may end it sooner).
	Timeout time.Duration
	// Quiet: an ingress that did not report a move within Timeout gets no move for Quiet (an
	// ingress that does not move flows, or is down, costs the controller one Timeout, not one
	// in each of its passes).
	Quiet time.Duration
	Logf  func(format string, args ...any) // nil: quiet

	run string // this gateway run's prefix of move ids
	seq atomic.Uint64

	mu      sync.Mutex
	waiting map[string]chan []controller.MoveResult // move id -> its MoveFlows
	busy    map[string]bool                         // flow keys in a move under way
	quiet   map[string]time.Time                    // ingress -> no move to it before then
}

// NewMover returns a Mover with the default bounds.
func NewMover(st *store.Store, hub *events.Hub) *Mover {
	return &Mover{Store: st, Hub: hub, Timeout: DefaultMoveTimeout, Quiet: DefaultMoveQuiet,
		run:     strconv.FormatInt(time.Now().UnixNano(), 36),
		waiting: map[string]chan []controller.MoveResult{}, busy: map[string]bool{}, quiet: map[string]time.Time{}}
}

func (m *Mover) logf(format string, args ...any) {
	if m.Logf != nil {
		m.Logf(format, args...)
	}
}

// Movable reports whether every server NF of the chain keeps its state per flow.
func (m *Mover) Movable(name string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := store.Get[chain.Function](ctx, m.Store, name)
	if err != nil || f.Chain == nil {
		return false
	}
	return f.Chain.Unmovable() == ""
}

// MoveFlows sends one FlowMove per ingress that assigned some of flows and waits for each
// report (at most Timeout). A flow without an ingress, in a move under way, or of an ingress
// that did not report in time is not moved, with its reason; the error is for what keeps the
// move from being sent at all (a bad request, Redis down).
func (m *Mover) MoveFlows(ctx context.Context, reason policy.Reason, from, to *store.Instance, flows []*store.Flow) ([]controller.MoveResult, error) {
	if from.Chain != to.Chain || from.ID == to.ID {
		return nil, fmt.Errorf("move from %s to %s: two instances of one chain are needed", from.ID, to.ID)
	}
	out := make([]controller.MoveResult, len(flows))
	byIngress := map[string][]int{}
	var order []string
	m.mu.Lock()
	for i, f := range flows {
		out[i].Key = f.Key
		switch {
		case f.Chain != from.Chain || f.Instance != from.ID:
			m.mu.Unlock()
			return nil, fmt.Errorf("move from %s: flow %s is on %s", from.ID, f.Key, f.Instance)
		case f.Ingress == "":
			out[i].Why = WhyNoIngress
		case m.busy[f.Key]:
			out[i].Why = WhyBusy
		case time.Now().Before(m.quiet[f.Ingress]):
			out[i].Why = WhyNoReport
		default:
			if byIngress[f.Ingress] == nil {
				order = append(order, f.Ingress)
			}
			byIngress[f.Ingress] = append(byIngress[f.Ingress], i)
			m.busy[f.Key] = true
		}
	}
	m.mu.Unlock()
	var errs []error
	for _, ing := range order {
		idx := byIngress[ing]
		res, err := m.moveOne(ctx, reason, ing, from, to, flows, idx)
		m.mu.Lock()
		for _, i := range idx {
			delete(m.busy, flows[i].Key)
		}
		m.mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			for _, i := range idx {
				out[i] = controller.MoveResult{Key: flows[i].Key, Why: WhyNoReport}
			}
			continue
		}
		for k, i := range idx {
			out[i] = res[k]
		}
	}
	if len(errs) == len(order) && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, err := range errs {
		m.logf("move: %v", err)
	}
	return out, nil
}

// moveOne is one FlowMove: the flows idx of flows, all assigned by ingress ing.
func (m *Mover) moveOne(ctx context.Context, reason policy.Reason, ing string, from, to *store.Instance,
	flows []*store.Flow, idx []int) ([]controller.MoveResult, error) {
	rec := &store.Move{ID: fmt.Sprintf("%s-%d", m.run, m.seq.Add(1)), Ingress: ing, Chain: from.Chain, From: from.ID, To: to.ID,
		Reason: string(reason), Sent: time.Now().UTC()}
	fm := &pb.FlowMove{Id: rec.ID, IngressId: ing, Chain: from.Chain, From: from.Proto(), To: to.Proto()}
	for _, i := range idx {
		ft, err := tupleOf(flows[i].Key)
		if err != nil {
			return nil, err
		}
		rec.Flows = append(rec.Flows, flows[i].Key)
		fm.Flows = append(fm.Flows, ft)
	}
	if err := m.Store.PutMove(ctx, rec); err != nil {
		return nil, err
	}
	ch := make(chan []controller.MoveResult, 1)
	m.mu.Lock()
	m.waiting[rec.ID] = ch
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.waiting, rec.ID)
		m.mu.Unlock()
	}()
	m.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_FLOWS_MOVE, Move: fm})
	timer := time.NewTimer(m.Timeout)
	defer timer.Stop()
	select {
	case res := <-ch:
		return res, nil
	case <-timer.C:
		m.mu.Lock()
		m.quiet[ing] = time.Now().Add(m.Quiet)
		m.mu.Unlock()
		return nil, fmt.Errorf("move %s of %d flow(s) from %s to %s: ingress %s did not report within %s; no move to it for %s",
			rec.ID, len(idx), from.ID, to.ID, ing, m.Timeout, m.Quiet)
	case <-ctx.Done():
		return nil, fmt.Errorf("move %s: %w", rec.ID, ctx.Err())
	}
}

// Report applies an ingress's report of a move: the assignments of the flows it moved go to
// the move's destination (store.ApplyMove), and the move's MoveFlows, if it still waits,
// gets each flow's outcome. It returns how many of the move's flows are assigned to the
// destination now (a report sent again gets the same answer and changes nothing). A report
// that does not match its move (unknown move, another ingress, a flow the move did not name,
// a flow twice) is refused whole, with the problem named.
func (m *Mover) Report(ctx context.Context, req *pb.ReportMovesRequest) (uint32, error) {
	switch {
	case req.IngressId == "":
		return 0, status.Error(codes.InvalidArgument, "ingress_id: missing")
	case req.MoveId == "":
		return 0, status.Error(codes.InvalidArgument, "move_id: missing")
	case len(req.Results) > MaxReportedFlows:
		return 0, status.Errorf(codes.InvalidArgument, "results: %d in one report, at most %d", len(req.Results), MaxReportedFlows)
	}
	mv, err := m.Store.MoveByID(ctx, req.MoveId)
	if err != nil {
		return 0, status.Error(codes.Unavailable, err.Error())
	}
	if mv == nil {
		return 0, status.Errorf(codes.NotFound, "move %s: unknown (never sent, or older than %s)", req.MoveId, store.MoveTTL)
	}
	if mv.Ingress != req.IngressId {
		return 0, status.Errorf(codes.PermissionDenied, "move %s was sent to ingress %s, not %s", mv.ID, mv.Ingress, req.IngressId)
	}
	named := map[string]bool{}
	for _, k := range mv.Flows {
		named[k] = true
	}
	reported := map[string]*pb.FlowMoveResult{}
	var moved []string
	for i, r := range req.Results {
		flow, err := controller.ParseFlow(r.GetFlow())
		if err != nil {
			return 0, status.Errorf(codes.InvalidArgument, "results[%d]: %s", i, status.Convert(err).Message())
		}
		key := controller.FlowKey(flow)
		switch {
		case !named[key]:
			return 0, status.Errorf(codes.InvalidArgument, "results[%d]: flow %s is not one of move %s's", i, key, mv.ID)
		case reported[key] != nil:
			return 0, status.Errorf(codes.InvalidArgument, "results[%d]: flow %s reported twice", i, key)
		case !(r.PauseUs >= 0) || math.IsInf(r.PauseUs, 1):
			return 0, status.Errorf(codes.InvalidArgument, "results[%d]: pause_us %v", i, r.PauseUs)
		}
		reported[key] = r
		if r.Moved {
			moved = append(moved, key)
		}
	}
	first, outcomes, err := m.Store.ApplyMove(ctx, mv, moved)
	if err != nil {
		return 0, status.Error(codes.Unavailable, err.Error())
	}
	outcome := map[string]store.MoveOutcome{}
	for i, k := range moved {
		outcome[k] = outcomes[i]
	}
	res := make([]controller.MoveResult, len(mv.Flows))
	var applied uint32
	for i, k := range mv.Flows {
		r := reported[k]
		res[i].Key = k
		switch {
		case r == nil:
			res[i].Why = WhyUnreported
		case !r.Moved && ingressWhy[r.Reason]:
			res[i].Why = r.Reason
		case !r.Moved:
			res[i].Why = WhyOther
		default:
			switch o := outcome[k]; o {
			case store.MoveApplied, store.MoveAppliedOnce:
				applied++
				res[i].Moved = true
				res[i].Pause = time.Duration(r.PauseUs * float64(time.Microsecond))
				res[i].PauseUs = r.PauseUs
			default:
				res[i].Why = map[store.MoveOutcome]string{store.MoveGone: WhyGone, store.MoveNotOnSource: WhyNotOnSource}[o]
				if res[i].Why == "" {
					res[i].Why = WhyNoFlow
				}
				if first {
					m.logf("move %s: ingress %s moved flow %s to %s, but its assignment stays: %v", mv.ID, mv.Ingress, k, mv.To, o.Err())
				}
			}
		}
	}
	m.mu.Lock()
	ch := m.waiting[mv.ID]
	delete(m.waiting, mv.ID)
	m.mu.Unlock()
	switch {
	case ch != nil:
		ch <- res // buffered, and taken out of waiting: sent at most once
	case first:
		m.logf("move %s (%s): late report from ingress %s: %d of %d flow(s) of chain %s now on %s (assignments moved)",
			mv.ID, mv.Reason, mv.Ingress, applied, len(mv.Flows), mv.Chain, mv.To)
	}
	return applied, nil
}

// ReportMoves is an ingress's report of a FlowMove (Mover.Report); FailedPrecondition when
// flow moves are off.
func (s *Server) ReportMoves(ctx context.Context, req *pb.ReportMovesRequest) (*pb.ReportMovesResponse, error) {
	if s.Moves == nil {
		return nil, status.Error(codes.FailedPrecondition, "flow moves are off (keel-gateway --flow-moves)")
	}
	n, err := s.Moves.Report(ctx, req)
	if err != nil {
		return nil, err
	}
	return &pb.ReportMovesResponse{Applied: n}, nil
}
