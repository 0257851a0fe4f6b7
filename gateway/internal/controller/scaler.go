// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/store"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

// Modeler builds a chain's Model (from measured NF costs and a latency profile): costs.Modeler.
type Modeler interface {
	Model(name string, nfs []string, p99us float64) (*policy.Model, error)
}

// modelKey names a chain's version as far as its Model depends on it.
func modelKey(f *chain.Function) string {
	return f.Deployment.Service + "\x00" + f.Chain.Spec + "\x00" + f.Chain.SLOText
}

// model returns a chain's Model, cached until its spec changes.
func (s *Controller) model(f *chain.Function) (*policy.Model, error) {
	key := modelKey(f)
	if m, ok := s.models.Load(key); ok {
		return m.(*policy.Model), nil
	}
	// One model built at a time (the stats path and the index both ask): the same chain's is
	// built once, not by every caller that found none.
	s.modelMu.Lock()
	defer s.modelMu.Unlock()
	if m, ok := s.models.Load(key); ok {
		return m.(*policy.Model), nil
	}
	var m *policy.Model
	var err error
	if s.Modeler == nil {
		err = fmt.Errorf("the gateway runs without NF cost tables")
	} else {
		var nfs []string
		for _, mem := range f.Chain.Members {
			nfs = append(nfs, mem.NF)
		}
		m, err = s.Modeler.Model(f.Deployment.Service, nfs, f.Chain.SLO.P99us)
	}
	if err != nil {
		// Said once per chain version: the chain is still served, by flow count and queue.
		s.logf("chain %s: no cost model (%v); its instances count as unloaded until they report a queue", f.Deployment.Service, err)
		m = &policy.Model{Chain: policy.Chain{Name: f.Deployment.Service, SLOus: f.Chain.SLO.P99us, Threshold: s.Policy.FixedThreshold}}
	}
	s.models.Store(key, m)
	return m, nil
}

// state is the controller's view of the deployment, read from the store: the policy's
// View and the store records behind it.
type state struct {
	view   *policy.View
	insts  map[string]*store.Instance // by ID: the caller's copies
	models map[string]*policy.Model   // by chain
	chains map[string]*chain.Function // the index's records: read, never changed
}

func (s *Controller) state(ctx context.Context) (*state, error) {
	ix, err := s.chains(ctx)
	if err != nil {
		return nil, err
	}
	workers, err := s.Store.Workers(ctx)
	if err != nil {
		return nil, err
	}
	st := &state{view: &policy.View{Chains: map[string]policy.Chain{}, Now: time.Now()},
		insts: map[string]*store.Instance{}, models: map[string]*policy.Model{}, chains: map[string]*chain.Function{}}
	for _, w := range workers {
		pw := policy.Worker{Name: w.Name}
		for _, c := range w.CoreIDs {
			pw.Cores = append(pw.Cores, int32(c))
		}
		st.view.Workers = append(st.view.Workers, pw)
	}
	for _, e := range ix.chains {
		if e.switchOnly {
			continue
		}
		st.chains[e.name()] = e.fn
		st.models[e.name()] = e.model
		st.view.Chains[e.name()] = e.policy
		insts, err := s.Store.Instances(ctx, e.name())
		if err != nil {
			return nil, err
		}
		for _, in := range insts {
			if in.State == store.Attached && in.Flows == 0 && in.IdleSince.IsZero() {
				// The note is memory only: after a restart (or a dropped cache) an idle
				// attached instance's idle time counts from now.
				in.IdleSince = st.view.Now
				s.Store.SetNote(in.Chain, in.ID, in.Note)
			}
			st.insts[in.ID] = in
			st.view.Instances = append(st.view.Instances, policyInstance(in))
		}
	}
	s.applySLO(st.view)
	s.moveHist.Mark(st.view) // the instances the move policy is emptying take no new flows
	return st, nil
}

func policyInstance(in *store.Instance) policy.Instance {
	rate := in.RatePps
	if in.RateStale {
		rate = 0 // measured before its last attach or detach
	}
	return policy.Instance{ID: in.ID, Chain: in.Chain, Worker: in.Worker, Attached: in.State == store.Attached,
		Core: in.Core, Ready: in.Phase == "ready", Flows: int(in.Flows), FlowsAtStats: int(in.FlowsAtStats),
		RatePps: rate, NewDrops: in.NewVFDropped, SojournP99us: in.P99us, Overloaded: in.Overloaded,
		OverloadReason: policy.Reason(in.OverloadReason), Batch: int(in.Batch),
		IdleSince: in.IdleSince, Draining: in.Draining}
}

// batchFor is the bursts per turn of an instance: Galleon eqs. 1–3 over the chain's cost as
// keel measured it (measuredCost), or the chain's modelled costs before the first measurement,
// within the batch its SLO allows (policy.Config.Operating).
func (s *Controller) batchFor(m *policy.Model, in *store.Instance) uint32 {
	cost := measuredCost(m.Cost, in.CyclesPerPacket, int(in.Batch))
	if cost.FreqHz == 0 {
		return uint32(max(1, s.Policy.FixedBatch))
	}
	return uint32(m.Chain.CapBatch(s.Policy.BatchFor(cost, float64(max(1, cost.BurstMax)))))
}

// measuredCost is the model's cost with its NFs' cycles scaled to what keel measured: cpp,
// the cycles an instance's threads ran per packet (coopsched's account over the VF's count),
// less the model's I/O, copy and handoffs at the batch it ran at. That is all eqs. 2–3 need
// of the NFs (their sum). cpp includes the poll loop's idle turns, so a lightly loaded
// instance seems costly and gets a small batch; near saturation it is the chain's cost. The
// model stands when nothing was measured or the measurement is below its overheads.
func measuredCost(model policy.Cost, cpp float64, batch int) policy.Cost {
	sum := 0.0
	for _, t := range model.NFCycles {
		sum += t
	}
	overhead := model.IOCycles
	if model.Isolated() {
		fill := float64(max(1, model.BurstMax))
		overhead += model.CopyCycles + float64(model.N())*model.HandoffCycles/(float64(max(1, batch))*fill)
	}
	nfs := cpp - overhead
	if cpp <= 0 || sum <= 0 || nfs <= 0 {
		return model
	}
	c := model
	c.NFCycles = make([]float64, len(model.NFCycles))
	for i, t := range model.NFCycles {
		c.NFCycles[i] = t * nfs / sum
	}
	return c
}

func (s *Controller) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

func (s *Controller) publish(in *store.Instance) {
	s.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: in.Proto()})
}

// kick asks the control loop for a pass now (pool top-up after an attach).
func (s *Controller) kick() {
	select {
	case s.kickc() <- struct{}{}:
	default:
	}
}

func (s *Controller) kickc() chan struct{} {
	s.kickOnce.Do(func() { s.kicks = make(chan struct{}, 1) })
	return s.kicks
}

// Run is the controller's loop (Listing 1's worker_scheduler_loop and the pool's
// scale_out/scale_in): every period, and at once after an attach, it gives back the cores
// of instances whose flows have ended, keeps each chain's pool of idle instances between
// its thresholds, packs light sgroups onto shared cores and sets each instance's batch.
func (s *Controller) Run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kickc():
		}
		if err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
			s.logf("controller: %v", err)
		}
		if s.Functions != nil {
			if err := s.Functions.Step(ctx); err != nil && ctx.Err() == nil {
				s.logf("controller: functions: %v", err)
			}
		}
	}
}

// Reconcile runs one pass of the controller's loop (see Run).
func (s *Controller) Reconcile(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Drain: instances of a chain's previous version go once their flows have ended, or when
	// their drain time is up (a rolling update, issue 18 item 3).
	if err := s.removeDrained(ctx); err != nil {
		return err
	}
	st, err := s.state(ctx)
	if err != nil {
		return err
	}
	// Reclaim: detach instances without flows; their cores go back to the worker.
	reclaimed := s.Policy.Reclaim(st.view)
	for _, id := range reclaimed {
		in := st.insts[id]
		idle := st.view.Now.Sub(in.IdleSince).Round(time.Millisecond)
		if err := s.Pool.Detach(ctx, in, fmt.Sprintf("detached: no flow for %s", idle)); skip(err) {
			continue // removed or changed meanwhile (a redeploy, a new flow): the next pass sees it
		} else if err != nil {
			return err
		}
		s.Store.SetNote(in.Chain, in.ID, store.Note{RateStale: true})
		s.decide(policy.Decision{Kind: policy.KindDetach, Reason: policy.ReasonNoFlows, Chain: in.Chain, Instance: id, Worker: in.Worker, Core: -1},
			"scale-in: chain %s instance %s detached from worker %s, core given back (no flow for %s)", in.Chain, id, in.Worker, idle)
	}
	if len(reclaimed) > 0 {
		if st, err = s.state(ctx); err != nil {
			return err
		}
	}
	// Pool: pre-deploy or remove idle instances, so that no attach waits for a cold start.
	for name := range st.chains {
		pc := s.Policy.Pool(st.view, name)
		for _, w := range pc.Create {
			in, err := s.Pool.AddPooled(ctx, name, w)
			if err != nil {
				return fmt.Errorf("pre-deploy an instance of %s on %s: %w", name, w, err)
			}
			s.decide(policy.Decision{Kind: policy.KindPredeploy, Reason: policy.ReasonPoolBelowMin, Chain: name, Instance: in.ID, Worker: w, Core: -1},
				"scale-out: chain %s instance %s pre-deployed on worker %s (idle pool below %d)", name, in.ID, w, s.Policy.PoolLow)
		}
		for _, id := range pc.Remove {
			if err := s.Pool.Remove(ctx, st.insts[id]); skip(err) {
				continue // attached or removed meanwhile: it stays, or is gone already
			} else if err != nil {
				return fmt.Errorf("remove idle instance %s: %w", id, err)
			}
			s.decide(policy.Decision{Kind: policy.KindRemove, Reason: policy.ReasonPoolAboveMax, Chain: name, Instance: id, Core: -1},
				"scale-in: chain %s idle instance %s removed (idle pool above %d)", name, id, s.Policy.PoolHigh)
		}
	}
	// Packing: move sgroups between cores of their worker.
	for _, mv := range s.Policy.Repack(st.view) {
		in := st.insts[mv.Instance]
		if in == nil || in.Core != mv.From {
			continue
		}
		in.Core = mv.To
		in.Why = fmt.Sprintf("moved from core %d to core %d (packing)", mv.From, mv.To)
		if err := s.Store.UpdateSpec(ctx, in, false); skip(err) {
			continue // removed or changed meanwhile (its chain was deleted or redeployed)
		} else if err != nil {
			return err
		}
		s.publish(in)
		s.decide(policy.Decision{Kind: policy.KindPack, Reason: policy.ReasonMove, Chain: in.Chain, Instance: in.ID, Worker: in.Worker, Core: mv.To},
			"pack: chain %s instance %s on worker %s moved from core %d to core %d", in.Chain, in.ID, in.Worker, mv.From, mv.To)
	}
	// Flow moves: empty instances onto others and relieve overloaded ones (with a Mover only).
	if s.Mover != nil {
		if err := s.moveFlows(ctx, st); err != nil {
			return err
		}
	}
	// Batch: Galleon eqs. 1–3 from the measured cycles.
	for _, in := range st.insts {
		m := st.models[in.Chain]
		if in.State != store.Attached || m == nil {
			continue
		}
		if b := s.batchFor(m, in); b != in.Batch {
			was := in.Batch
			in.Batch = b
			if err := s.Store.UpdateSpec(ctx, in, false); skip(err) {
				continue // removed or changed meanwhile (its chain was deleted or redeployed)
			} else if err != nil {
				return err
			}
			s.decide(policy.Decision{Kind: policy.KindBatch, Reason: policy.ReasonMeasuredCycles, Chain: in.Chain, Instance: in.ID, Worker: in.Worker, Core: in.Core},
				"batch: chain %s instance %s runs %d burst(s) per turn (was %d)", in.Chain, in.ID, b, was)
			s.publish(in)
		}
	}
	return nil
}

// skip tells of a compare-and-set that found the instance removed or changed since the
// controller read it: the change is not made, and the next pass decides on what is there.
func skip(err error) bool {
	return errors.Is(err, store.ErrGone) || errors.Is(err, store.ErrStale)
}

// removeDrained removes the draining instances whose flows have all ended or whose drain
// time is up; the flows still assigned to one whose time is up are dropped with it.
func (s *Controller) removeDrained(ctx context.Context) error {
	ix, err := s.chains(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	for _, e := range ix.chains {
		insts, err := s.Store.Instances(ctx, e.name())
		if err != nil {
			return err
		}
		for _, in := range insts {
			if !in.Draining || (in.Flows > 0 && now.Before(in.DrainUntil)) {
				continue
			}
			reason, why := policy.ReasonDrained, "its flows have ended"
			if in.Flows > 0 {
				reason, why = policy.ReasonDrainTimeout, fmt.Sprintf("drain time is up with %d flow(s) left", in.Flows)
			}
			if err := s.Pool.Remove(ctx, in); skip(err) {
				continue
			} else if err != nil {
				return fmt.Errorf("remove drained instance %s: %w", in.ID, err)
			}
			s.decide(policy.Decision{Kind: policy.KindRemove, Reason: reason, Chain: in.Chain, Instance: in.ID, Worker: in.Worker, Core: -1},
				"scale-in: chain %s instance %s of the previous version removed from worker %s (%s)", in.Chain, in.ID, in.Worker, why)
		}
	}
	return nil
}

// overload recomputes the overload marks after new stats (Galleon §5.1: driven by the
// agents' events, not by polling) and stores the ones that change.
func (s *Controller) overload(ctx context.Context, st *state) error {
	for _, ch := range s.Policy.Overload(st.view) {
		in := st.insts[ch.Instance]
		if in == nil {
			continue
		}
		in.Overloaded = ch.Overloaded
		if ch.Overloaded {
			in.OverloadReason = string(ch.Reason)
			in.Why = "overloaded: " + ch.Why + "; takes no new flows"
		} else {
			in.OverloadReason = ""
			in.Why = "takes new flows again: " + ch.Why
		}
		if err := s.Store.UpdateSpec(ctx, in, false); skip(err) {
			continue // removed or changed meanwhile: the next report decides again
		} else if err != nil {
			return err
		}
		s.publish(in)
		kind := policy.KindClear
		if ch.Overloaded {
			kind = policy.KindOverload
		}
		s.decide(policy.Decision{Kind: kind, Reason: ch.Reason, Chain: in.Chain, Instance: in.ID, Worker: in.Worker, Core: in.Core},
			"overload: chain %s instance %s %s", in.Chain, in.ID, in.Why)
	}
	return nil
}
