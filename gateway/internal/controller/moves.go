// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/store"
)

// Mover moves live flows between instances of a chain with their per-flow state: the data
// plane's move protocol (issue 37 items 1–2: hold the flows' new packets at the ingress, let
// the source drain, move the state, switch the rules, release the held packets in order).
// The controller decides the moves (policy.PlanMoves) and records them; the Mover makes them.
type Mover interface {
	// Movable reports whether every NF of the chain keeps its state per flow (a tenant NF
	// with global state pins its chain's flows): only such chains' flows move.
	Movable(chain string) bool
	// MoveFlows moves flows, all assigned to from, to instance to of the same chain, loss-free
	// and in order, and returns once they run on to. On an error no flow of the call moved
	// (each is whole on from), and the controller records nothing.
	MoveFlows(ctx context.Context, chain string, from, to *store.Instance, flows []*store.Flow) error
}

// moveFlows runs the move policy over the deployment and makes its moves through the Mover:
// each is recorded in the store (store.MoveFlows), as a decision and with OnFlowMove; an
// instance the plan empties gives its core back at once when all its moves were made.
func (s *Controller) moveFlows(ctx context.Context, st *state) error {
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
	failed := map[string]bool{} // sources with a move not made: they keep their core
	var made []policy.FlowMove
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
		start := time.Now()
		if err := s.Mover.MoveFlows(ctx, m.Chain, from, to, fl); err != nil {
			failed[m.From] = true
			s.logf("controller: move %d flow(s) of chain %s from %s to %s: %v (they stay on %s)", len(fl), m.Chain, m.From, m.To, err, m.From)
			continue
		}
		pause := time.Since(start)
		if err := s.Store.MoveFlows(ctx, fl, from, to); err != nil {
			// The data plane moved them: the flows' records catch up when they end or move again.
			failed[m.From] = true
			s.logf("controller: record the move of %d flow(s) of chain %s from %s to %s: %v", len(fl), m.Chain, m.From, m.To, err)
		}
		made = append(made, m)
		if s.OnFlowMove != nil {
			s.OnFlowMove(m.Chain, m.Reason, len(fl), pause)
		}
		s.decide(policy.Decision{Kind: policy.KindFlowMove, Reason: m.Reason, Chain: m.Chain, Instance: m.To, Worker: to.Worker, Core: to.Core},
			"move: chain %s: %d flow(s) moved from instance %s (worker %s core %d) to %s (worker %s core %d) in %s (%s)",
			m.Chain, len(fl), m.From, from.Worker, from.Core, m.To, to.Worker, to.Core, pause.Round(time.Microsecond), moveWhy(m.Reason))
	}
	s.moveHist.Record(s.Policy.Moves, made, now)
	for _, id := range plan.Detach {
		in := st.insts[id]
		if in == nil || failed[id] || in.Flows > 0 {
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

func moveWhy(r policy.Reason) string {
	switch r {
	case policy.ReasonScaleIn:
		return "emptying it to give its core back"
	case policy.ReasonRelieve:
		return "relieving an overloaded instance"
	}
	return fmt.Sprint(r)
}
