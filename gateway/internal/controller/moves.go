// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Mover moves live flows between instances of a chain with their per-flow state: the data
// plane's move protocol (issue 37 items 1–2: hold the flows' new packets at the ingress, let
// the source drain, move the state, switch the rules, release the held packets in order).
// The controller decides the moves (policy.PlanMoves) and records them; the Mover makes them
// (control.Mover: a FLOWS_MOVE to the ingress on Watch, its ReportMoves back).
type Mover interface {
	// Movable reports whether every NF of the chain keeps its state per flow (a tenant NF
	// with global state pins its chain's flows): only such chains' flows move.
	Movable(chain string) bool
	// MoveFlows moves flows, all assigned to from, to instance to of the same chain, loss-free
	// and in order, and returns once the data plane has reported: one result per flow, in
	// the order of flows. A moved flow's assignment is on to when it returns; a flow not
	// moved is whole on from (its state and its rule). An error means no outcome is known
	// (nothing was sent, or no report came in time): the flows count as not moved, and should
	// the report still come, their assignments follow it then.
	MoveFlows(ctx context.Context, reason policy.Reason, from, to *store.Instance, flows []*store.Flow) ([]MoveResult, error)
}

// MoveResult is the outcome of one flow of a move.
type MoveResult struct {
	Key   string        `json:"flow"`
	Moved bool          `json:"moved"`
	Why   string        `json:"why,omitempty"` // not moved: the ingress's reason (timeout, refused, ...) or the gateway's
	Pause time.Duration `json:"-"`             // moved: first packet held -> rule to the destination confirmed (the ingress's measure)
	// PauseUs is Pause in µs (the JSON of /system/keel/moves).
	PauseUs float64 `json:"pause_us"`
}

// moveFlows runs the move policy over the deployment and makes its moves through the Mover:
// each is recorded as a decision and with OnFlowMove; an instance the plan empties gives its
// core back at once when all its flows moved. It runs with s.mu held and releases it while
// a move is under way (see move); a move the operator asked (MoveInstance) is under way
// meanwhile: the pass makes none.
func (s *Controller) moveFlows(ctx context.Context, st *state) error {
	if !s.moveMu.TryLock() {
		return nil
	}
	defer s.moveMu.Unlock()
	flows := map[string][]policy.FlowRate{}
	byKey := map[string]*store.Flow{}
	movable := map[string]bool{}
	for name := range st.chains {
		movable[name] = s.Mover.Movable(name)
		if !movable[name] {
			continue
		}
		fl, err := s.Store.Flows(ctx, name)
		if err != nil {
			return err
		}
		for _, f := range fl {
			// No per-flow rate is measured: the policy shares each instance's rate among its flows.
			flows[f.Instance] = append(flows[f.Instance], policy.FlowRate{Key: f.Key})
			byKey[f.Key] = f
		}
	}
	now := st.view.Now
	plan := s.Policy.PlanMoves(st.view, flows, movable, &s.moveHist)
	failed := map[string]bool{} // sources with a flow not moved: they keep their core
	var made []policy.FlowMove
	var stayed []string // flows a move left where they were
	for _, m := range plan.Moves {
		from, to := st.insts[m.From], st.insts[m.To]
		var fl []*store.Flow
		for _, k := range m.Flows {
			if f := byKey[k]; f != nil {
				fl = append(fl, f)
			}
		}
		if from == nil || to == nil || len(fl) != len(m.Flows) {
			failed[m.From] = true
			continue
		}
		res, err := s.move(ctx, m.Reason, from, to, fl)
		done := m
		done.Flows = nil
		for _, r := range res {
			if r.Moved {
				done.Flows = append(done.Flows, r.Key)
			} else {
				stayed = append(stayed, r.Key)
			}
		}
		if err != nil {
			stayed = append(stayed, m.Flows...)
		}
		if err != nil || len(done.Flows) < len(fl) {
			failed[m.From] = true
		}
		if len(done.Flows) > 0 {
			made = append(made, done)
		}
	}
	s.moveHist.Record(s.Policy.Moves, made, now)
	s.moveHist.Track(plan)
	// A flow that did not move is not tried again for FlowHold either, as one that moved: a
	// refusal (its NF state, an ingress that does not answer) would come again at every pass.
	for _, k := range stayed {
		s.moveHist.FlowMoved[k] = now
	}
	for _, id := range plan.Detach {
		if st.insts[id] == nil || failed[id] {
			continue
		}
		// Read again: the moves changed its flow count (and s.mu was released meanwhile).
		in, err := s.Store.Instance(ctx, st.insts[id].Chain, id)
		if err != nil {
			return err
		}
		if in == nil || in.State != store.Attached || in.Flows > 0 {
			continue
		}
		if err := s.Pool.Detach(ctx, in, "detached: its flows moved to other instances"); skip(err) {
			continue // a new flow or a redeploy meanwhile: Reclaim decides later
		} else if err != nil {
			return err
		}
		s.Store.SetNote(in.Chain, in.ID, store.Note{RateStale: true})
		s.decide(policy.Decision{Kind: policy.KindDetach, Reason: policy.ReasonFlowsMoved, Chain: in.Chain, Instance: id, Worker: in.Worker, Core: -1},
			"scale-in: chain %s instance %s detached from worker %s, core given back (its flows moved to other instances)", in.Chain, id, in.Worker)
	}
	return nil
}

// move makes one move through the Mover and records it (a decision for the flows moved,
// OnFlowMove, a log line for those not moved). It is called with s.mu held and releases it
// while the Mover waits for the data plane: the ingress's report of the move, and every new
// flow's assignment meanwhile, need the controller.
func (s *Controller) move(ctx context.Context, reason policy.Reason, from, to *store.Instance, flows []*store.Flow) ([]MoveResult, error) {
	start := time.Now()
	s.mu.Unlock()
	res, err := s.Mover.MoveFlows(ctx, reason, from, to, flows)
	s.mu.Lock()
	took := time.Since(start)
	if err == nil && len(res) != len(flows) {
		err = fmt.Errorf("the mover answered for %d of %d flows", len(res), len(flows))
	}
	if err != nil {
		s.logf("controller: move %d flow(s) of chain %s from %s to %s: %v (they stay on %s)", len(flows), from.Chain, from.ID, to.ID, err, from.ID)
		return nil, err
	}
	if s.OnFlowMove != nil {
		s.OnFlowMove(from.Chain, reason, res)
	}
	moved, pauseMax, why := 0, time.Duration(0), map[string]int{}
	for _, r := range res {
		if r.Moved {
			moved++
			pauseMax = max(pauseMax, r.Pause)
		} else {
			why[r.Why]++
		}
	}
	notMoved := ""
	if len(why) > 0 {
		var parts []string
		for w, n := range why {
			parts = append(parts, fmt.Sprintf("%d %s", n, w))
		}
		sort.Strings(parts)
		notMoved = fmt.Sprintf("; %d not moved, they stay on %s: %s", len(flows)-moved, from.ID, strings.Join(parts, ", "))
	}
	if moved == 0 {
		s.logf("controller: move of chain %s from %s to %s: no flow moved%s", from.Chain, from.ID, to.ID, notMoved)
		return res, nil
	}
	s.decide(policy.Decision{Kind: policy.KindFlowMove, Reason: reason, Chain: from.Chain, Instance: to.ID, Worker: to.Worker, Core: to.Core},
		"move: chain %s: %d flow(s) moved from instance %s (worker %s core %d) to %s (worker %s core %d) in %s, longest pause %s (%s)%s",
		from.Chain, moved, from.ID, from.Worker, from.Core, to.ID, to.Worker, to.Core, took.Round(time.Microsecond),
		pauseMax.Round(time.Microsecond), moveWhy(reason), notMoved)
	return res, nil
}

func moveWhy(r policy.Reason) string {
	switch r {
	case policy.ReasonScaleIn:
		return "emptying it to give its core back"
	case policy.ReasonRelieve:
		return "relieving an overloaded instance"
	case policy.ReasonOperator:
		return "the operator asked"
	}
	return fmt.Sprint(r)
}

// MaxMoveBatch is the most flows one move (one FLOWS_MOVE) carries.
const MaxMoveBatch = 1024

// MoveBatch is one move of MoveInstance: its flows' outcomes and how long it took.
type MoveBatch struct {
	Flows   int          `json:"flows"`
	Moved   int          `json:"moved"`
	Ms      float64      `json:"ms"`              // MoveFlows called -> returned
	Error   string       `json:"error,omitempty"` // no outcome known (no report in time, ...)
	Results []MoveResult `json:"results,omitempty"`
}

// MoveReport is what MoveInstance did.
type MoveReport struct {
	Chain   string      `json:"chain"`
	From    string      `json:"from"`
	To      string      `json:"to"`
	Flows   int         `json:"flows"` // flows of from asked to move
	Moved   int         `json:"moved"`
	Batches []MoveBatch `json:"batches"`
}

// MoveInstance moves the flows of instance from (at most limit; 0: all) to instance to of
// the same chain, batch flows per move, one move after the other: an operator's request
// (POST /system/keel/moves; bench/migration.py). Its errors are gRPC statuses that name
// the problem: no Mover (FailedPrecondition), an unknown instance (NotFound), a bad
// request (InvalidArgument), a destination that is not attached or a chain whose NFs do
// not all move (FailedPrecondition). A move that fails is reported in its batch, and the
// next batches are still tried.
func (s *Controller) MoveInstance(ctx context.Context, from, to string, batch, limit int) (*MoveReport, error) {
	if s.Mover == nil {
		return nil, status.Error(codes.FailedPrecondition, "flow moves are off (keel-gateway --flow-moves)")
	}
	if batch <= 0 || batch > MaxMoveBatch || limit < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "batch must be 1..%d and limit ≥ 0 (0: every flow)", MaxMoveBatch)
	}
	chainName, _, ok := strings.Cut(from, "/")
	if !ok || from == to || !strings.HasPrefix(to, chainName+"/") {
		return nil, status.Errorf(codes.InvalidArgument, "from %q and to %q must be two instances (CHAIN/N) of the same chain", from, to)
	}
	if !s.Mover.Movable(chainName) {
		return nil, status.Errorf(codes.FailedPrecondition, "chain %s: an NF keeps state that is not per flow (or the chain is unknown): its flows do not move", chainName)
	}
	s.moveMu.Lock() // before s.mu: a pass of the controller only tries moveMu while it holds s.mu
	defer s.moveMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	src, err1 := s.Store.Instance(ctx, chainName, from)
	dst, err2 := s.Store.Instance(ctx, chainName, to)
	fl, err3 := s.Store.Flows(ctx, chainName)
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	switch {
	case src == nil:
		return nil, status.Errorf(codes.NotFound, "instance %s: unknown", from)
	case dst == nil:
		return nil, status.Errorf(codes.NotFound, "instance %s: unknown", to)
	case dst.State != store.Attached || dst.Draining:
		return nil, status.Errorf(codes.FailedPrecondition, "instance %s is %s%s: flows move only to an attached instance that takes new flows",
			to, dst.State, map[bool]string{true: " and draining", false: ""}[dst.Draining])
	}
	var flows []*store.Flow
	for _, f := range fl {
		if f.Instance == from && (limit == 0 || len(flows) < limit) {
			flows = append(flows, f)
		}
	}
	rep := &MoveReport{Chain: chainName, From: from, To: to, Flows: len(flows), Batches: []MoveBatch{}}
	for i := 0; i < len(flows); i += batch {
		part := flows[i:min(i+batch, len(flows))]
		start := time.Now()
		res, err := s.move(ctx, policy.ReasonOperator, src, dst, part)
		b := MoveBatch{Flows: len(part), Ms: float64(time.Since(start).Microseconds()) / 1e3, Results: res}
		if err != nil {
			b.Error = err.Error()
		}
		for _, r := range res {
			if r.Moved {
				b.Moved++
			}
		}
		rep.Moved += b.Moved
		rep.Batches = append(rep.Batches, b)
		if ctx.Err() != nil {
			break
		}
	}
	return rep, nil
}
