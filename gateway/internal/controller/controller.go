// SPDX-License-Identifier: Apache-2.0

// Package controller is keel's controller (Galleon's, §5): it assigns new flows to chain
// instances, attaches and detaches them, keeps each chain's pool of idle instances, marks
// overload from the agents' stats, packs sgroups and sets their batch, and scales normal
// functions the same way OpenFaaS does. It reads desired state from the store and changes
// the instances through a Pool (the provider, which owns their lifecycle) and the store's
// compare-and-set writes; what it only computes (loads, idle times) it keeps in memory.
// keel-sim drives the same policy (package policy) this controller calls.
package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/pcapfilter"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/store"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Pool is what the controller changes chain instances through: the provider, which creates
// and removes them and tells the watchers. Each call is a compare-and-set on the instance
// as the controller read it: a change made meanwhile (a redeploy that drains it, a scale
// that removed it) wins, and the call reports store.ErrGone or store.ErrStale.
type Pool interface {
	// Attach gives a pooled instance a core and a batch for its first flow f (assigned to
	// it in the same step): it takes flows from now on.
	Attach(ctx context.Context, in *store.Instance, core int32, batch uint32, why string, f *store.Flow) error
	// Detach gives an attached instance's core back: it returns to the pool.
	Detach(ctx context.Context, in *store.Instance, why string) error
	// AddPooled pre-deploys one more idle instance of a chain on a worker.
	AddPooled(ctx context.Context, chain, worker string) (*store.Instance, error)
	// Remove removes an instance (pooled and idle, or draining) with the flows still on it.
	Remove(ctx context.Context, in *store.Instance) error
	// SetChainMetrics sets a chain's gauges from its record and its instances.
	SetChainMetrics(f *chain.Function, insts []*store.Instance)
}

// Controller runs the controller's policy (gateway/internal/policy) on every flow, stats
// report and pass of Run.
type Controller struct {
	Store   *store.Store
	Pool    Pool
	Hub     *events.Hub
	Policy  policy.Config
	Modeler Modeler
	Logf    func(format string, args ...any) // one line per scale decision; nil: quiet
	// OnDecision, when set, sees every decision (the gateway counts them in its metrics).
	OnDecision func(policy.Decision)
	// Functions, when set, scales normal functions in the same loop (functions.go); its
	// decisions join the chains'.
	Functions *FunctionScaler
	// SLO, when set, corrects each chain's modelled threshold with its instances' measured
	// server sojourn (sloloop.go); nil: the model alone, as Galleon.
	SLO *SLOLoop
	// Mover, when set, lets the controller move live flows between instances with their state
	// (moves.go, policy.PlanMoves): scale-in without waiting for flows to end, relief of
	// overloaded instances. nil: flows stay where they started, as Galleon.
	Mover Mover
	// OnFlowMove, when set, sees the outcome of every move the Mover made (the gateway counts
	// them in its metrics).
	OnFlowMove func(chain string, reason policy.Reason, results []MoveResult)

	mu        sync.Mutex // serialises the controller's decisions
	filters   sync.Map   // filter expression -> *pcapfilter.Filter
	models    sync.Map   // chain name + spec -> *policy.Model
	modelMu   sync.Mutex // one model built at a time
	index     atomic.Pointer[chainIndex]
	indexMu   sync.Mutex // one index rebuild at a time
	kickOnce  sync.Once
	kicks     chan struct{}
	decisions decisionLog
	moveHist  policy.MoveHistory // the move policy's memory (budget, holds); under mu
	moveMu    sync.Mutex         // one pass of moves at a time (moves.go); taken before mu, or tried under it
}

func (s *Controller) filter(expr string) (*pcapfilter.Filter, error) {
	if f, ok := s.filters.Load(expr); ok {
		return f.(*pcapfilter.Filter), nil
	}
	f, err := pcapfilter.Compile(expr)
	if err != nil {
		return nil, err
	}
	s.filters.Store(expr, f)
	return f, nil
}

// ParseFlow checks a 5-tuple from the wire (the ingress's, torctl's); its errors are
// InvalidArgument statuses that name the problem.
func ParseFlow(ft *pb.FiveTuple) (pcapfilter.Flow, error) {
	if ft == nil {
		return pcapfilter.Flow{}, status.Error(codes.InvalidArgument, "flow: missing")
	}
	src, err1 := netip.ParseAddr(ft.SrcIp)
	dst, err2 := netip.ParseAddr(ft.DstIp)
	if err := errors.Join(err1, err2); err != nil {
		return pcapfilter.Flow{}, status.Errorf(codes.InvalidArgument, "flow: %v", err)
	}
	if ft.SrcPort > 65535 || ft.DstPort > 65535 || ft.Proto > 255 {
		return pcapfilter.Flow{}, status.Error(codes.InvalidArgument, "flow: port or protocol out of range")
	}
	return pcapfilter.Flow{Src: src, Dst: dst, SrcPort: uint16(ft.SrcPort), DstPort: uint16(ft.DstPort), Proto: uint8(ft.Proto)}, nil
}

// FlowKey names a flow in the store.
func FlowKey(f pcapfilter.Flow) string {
	return store.FlowKey(f.Proto, f.Src, f.SrcPort, f.Dst, f.DstPort)
}

// classify returns the chain whose filter matches the flow: the ingress's choice (hint) if its
// filter does match, else the first chain in name order whose filter does; nil if none.
func classify(ix *chainIndex, flow pcapfilter.Flow, hint string) (*indexedChain, error) {
	if e := ix.byName[hint]; e != nil {
		if ok, err := matches(e, flow); err != nil || ok {
			return e, err
		}
	}
	for _, e := range ix.chains {
		if ok, err := matches(e, flow); err != nil || ok {
			return e, err
		}
	}
	return nil, nil
}

func matches(e *indexedChain, flow pcapfilter.Flow) (bool, error) {
	if e.filter == nil {
		return false, nil
	}
	ok, err := e.filter.Match(flow)
	if err != nil {
		return false, status.Errorf(codes.InvalidArgument, "flow: %v", err)
	}
	return ok, nil
}

// Assign classifies a new flow to a chain (the ingress's choice, hint, checked) and assigns
// it an instance: the most loaded attached instance that is not overloaded, else a pooled
// one (Galleon Listing 1). A flow of a chain that runs on the switch only is recorded without
// an instance. A flow that is already assigned gets its assignment again (the ingress retries
// after a lost answer), so its instance's flow count is not raised twice.
func (s *Controller) Assign(ctx context.Context, flow pcapfilter.Flow, hint, ingress string) (*pb.AssignFlowResponse, error) {
	ix, err := s.chains(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	e, err := classify(ix, flow, hint)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return &pb.AssignFlowResponse{Reason: "no chain's filter matches the flow"}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.assignLocked(ctx, e, FlowKey(flow), ingress)
}

// assignLocked is Assign for the flow key of chain e, asked by ingress, with s.mu held.
func (s *Controller) assignLocked(ctx context.Context, e *indexedChain, key, ingress string) (*pb.AssignFlowResponse, error) {
	c := e.fn.Chain
	if resp, err := s.assignedBefore(ctx, e, key); resp != nil || err != nil {
		return resp, err
	}
	rec := &store.Flow{Key: key, Chain: c.Name, Since: time.Now().UTC(), Ingress: ingress}
	if e.switchOnly {
		if err := s.Store.PutFlow(ctx, rec); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		return &pb.AssignFlowResponse{Assigned: true, Chain: c.Name, SwitchOnly: true, ReinjectVlan: c.ReinjectVLAN}, nil
	}
	// An instance the provider changed since state() read it (drained or removed by a
	// redeploy, removed by a scale) refuses the write: decide again on what is there now.
	for attempt := 0; ; attempt++ {
		resp, err := s.assign(ctx, c.Name, rec)
		if (errors.Is(err, store.ErrStale) || errors.Is(err, store.ErrGone)) && attempt < 3 {
			continue
		}
		if errors.Is(err, store.ErrStale) || errors.Is(err, store.ErrGone) {
			return nil, status.Errorf(codes.Unavailable, "%v; ask again", err)
		}
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		return resp, nil
	}
}

// assignedBefore is the answer for a flow of chain that is assigned already (the ingress asks
// again after a lost answer), or nil if it is not (or its instance is gone).
func (s *Controller) assignedBefore(ctx context.Context, e *indexedChain, key string) (*pb.AssignFlowResponse, error) {
	chain := e.name()
	prev, err := s.Store.Flow(ctx, key)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if prev == nil || prev.Chain != chain {
		return nil, nil
	}
	if prev.Instance == "" {
		return &pb.AssignFlowResponse{Assigned: true, Chain: chain, SwitchOnly: true, ReinjectVlan: e.fn.Chain.ReinjectVLAN}, nil
	}
	in, err := s.Store.Instance(ctx, chain, prev.Instance)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if in == nil {
		return nil, nil
	}
	return &pb.AssignFlowResponse{Assigned: true, Chain: chain, Instance: in.Proto()}, nil
}

// assign is one attempt of Assign for a flow of chain name that needs an instance.
func (s *Controller) assign(ctx context.Context, name string, rec *store.Flow) (*pb.AssignFlowResponse, error) {
	st, err := s.state(ctx)
	if err != nil {
		return nil, err
	}
	a := s.Policy.Assign(st.view, name)
	in := st.insts[a.Instance]
	if in == nil {
		return &pb.AssignFlowResponse{Chain: name, Reason: a.Reason}, nil
	}
	thr := st.view.Chains[name].Threshold
	if a.Attach {
		batch := in.Batch
		if m := st.models[name]; m != nil {
			batch = s.batchFor(m, in)
		}
		why := fmt.Sprintf("attached on core %d: no attached instance was under its threshold", a.Core)
		if a.ColdStart {
			why += " (cold start: no idle instance was ready)"
		}
		if err := s.Pool.Attach(ctx, in, a.Core, batch, why, rec); err != nil {
			return nil, err
		}
		in.Note = store.Note{RateStale: true}
	} else if err := s.Store.AssignFlow(ctx, rec, in, false); err != nil {
		return nil, err
	}
	note := in.Note
	note.IdleSince, note.Threshold = time.Time{}, thr
	s.Store.SetNote(in.Chain, in.ID, note)
	pi := in.Proto()
	if a.Attach {
		// Watchers (agents, torctl) act on state and core, not on every flow's count: at
		// thousands of new flows a second those events would only bury the ones that matter.
		reason := policy.ReasonNoInstanceUnderThreshold
		if a.ColdStart {
			reason = policy.ReasonColdStart
		}
		s.decide(policy.Decision{Kind: policy.KindAttach, Reason: reason, Chain: name, Instance: in.ID, Worker: in.Worker, Core: in.Core},
			"scale-out: chain %s instance %s attached on worker %s core %d, batch %d (no attached instance under threshold %.2f%s)",
			name, in.ID, in.Worker, in.Core, in.Batch, thr, map[bool]string{true: "; cold start", false: ""}[a.ColdStart])
		s.kick()
	}
	// the gauges from the state just read and written (in is st.insts[a.Instance])
	var chainInsts []*store.Instance
	for _, x := range st.insts {
		if x.Chain == name {
			chainInsts = append(chainInsts, x)
		}
	}
	s.Pool.SetChainMetrics(st.chains[name], chainInsts)
	return &pb.AssignFlowResponse{Assigned: true, Chain: name, Instance: pi}, nil
}

// Release ends a flow's assignment (its ToR rule expired, or the ingress could not install
// it): its instance's flow count drops. It reports false when the flow had none.
func (s *Controller) Release(ctx context.Context, key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.Store.Flow(ctx, key)
	if err != nil || rec == nil {
		return false, err
	}
	n, err := s.Store.DeleteFlow(ctx, rec)
	if err != nil {
		return false, err
	}
	if rec.Instance == "" {
		return true, nil
	}
	if in, err := s.Store.Instance(ctx, rec.Chain, rec.Instance); err == nil && in != nil {
		if n == 0 && in.State == store.Attached {
			note := in.Note
			note.IdleSince = time.Now()
			s.Store.SetNote(in.Chain, in.ID, note)
		}
		s.chainMetrics(ctx, rec.Chain)
		if in.Draining && n == 0 {
			s.kick() // its last flow ended: the control loop removes it now
		}
	}
	return true, nil
}

// ReleaseMany is Release for a batch of flows (the FlowRemoved events of one message from
// torctl) in one Redis call: per key, whether it had an assignment. A key that repeats in the
// batch is released once. On an error nothing is reported released; the flows that were
// released stay released, and a repeat finds them gone.
func (s *Controller) ReleaseMany(ctx context.Context, keys []string) ([]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, len(keys))
	var recs []*store.Flow
	seen := map[string]bool{}
	for i, key := range keys {
		rec, err := s.Store.Flow(ctx, key)
		if err != nil {
			return nil, err
		}
		if rec == nil || seen[key] {
			continue
		}
		seen[key] = true
		recs = append(recs, rec)
		out[i] = true
	}
	counts, err := s.Store.DeleteFlows(ctx, recs)
	if err != nil {
		return nil, err
	}
	chains := map[string]bool{}
	kick := false
	for i, rec := range recs {
		if rec.Instance == "" {
			continue
		}
		in, err := s.Store.Instance(ctx, rec.Chain, rec.Instance)
		if err != nil || in == nil {
			continue
		}
		if counts[i] == 0 && in.State == store.Attached {
			note := in.Note
			note.IdleSince = time.Now()
			s.Store.SetNote(in.Chain, in.ID, note)
		}
		chains[rec.Chain] = true
		kick = kick || (in.Draining && counts[i] == 0)
	}
	for _, c := range slices.Sorted(maps.Keys(chains)) {
		s.chainMetrics(ctx, c)
	}
	if kick {
		s.kick() // a draining instance's last flow ended: the control loop removes it now
	}
	return out, nil
}

// AssignVFs gives a worker's VF ports to its instances that have none and returns the
// instances it should run (keel-agent's RegisterWorker).
func (s *Controller) AssignVFs(ctx context.Context, worker string, ports []uint32) ([]*store.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mine, err := s.workerInstances(ctx, worker)
	if err != nil {
		return nil, err
	}
	used := map[uint32]bool{}
	for _, in := range mine {
		if in.VFPort != 0 {
			used[in.VFPort] = true
		}
	}
	var out []*store.Instance
	for _, in := range mine {
		if in.VFPort == 0 {
			for _, port := range ports {
				if port == 0 || used[port] {
					continue
				}
				in.VFPort = port
				err := s.Store.UpdateSpec(ctx, in, false)
				if errors.Is(err, store.ErrGone) || errors.Is(err, store.ErrStale) {
					// removed or changed meanwhile: its next registration gives it a port
					in.VFPort = 0
					break
				} else if err != nil {
					return nil, err
				}
				used[port] = true
				break
			}
		}
		out = append(out, in)
	}
	return out, nil
}

func (s *Controller) workerInstances(ctx context.Context, worker string) ([]*store.Instance, error) {
	ix, err := s.chains(ctx)
	if err != nil {
		return nil, err
	}
	var out []*store.Instance
	for _, e := range ix.chains {
		insts, err := s.Store.Instances(ctx, e.name())
		if err != nil {
			return nil, err
		}
		for _, in := range insts {
			if in.Worker == worker {
				out = append(out, in)
			}
		}
	}
	return out, nil
}

// ApplyStats applies an agent's report of an instance and recomputes overload.
func (s *Controller) ApplyStats(ctx context.Context, st *pb.InstanceStats) error {
	i := strings.LastIndex(st.Instance, "/")
	if i <= 0 {
		return status.Errorf(codes.InvalidArgument, "instance: %q is not CHAIN/N", st.Instance)
	}
	chainName := st.Instance[:i]
	ix, err := s.chains(ctx)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	if ix.byName[chainName] == nil {
		return status.Errorf(codes.NotFound, "instance %s: no chain %s", st.Instance, chainName)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := s.Store.Instance(ctx, chainName, st.Instance)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	if in == nil {
		return status.Errorf(codes.NotFound, "instance %s: unknown", st.Instance)
	}
	// The agent reports what runs; what should run (state, core, batch) stays the gateway's.
	// The controller decides by keel's own figures (the VF's counters, coopsched's account of
	// CPU time); what the NFs report of themselves is kept for describe and the dashboard only.
	note := applyMeasured(in, st)
	in.P99us, in.P50us, in.P999us, in.SojournWindowS = st.P99Us, st.SojournP50Us, st.SojournP999Us, st.SojournWindowS
	in.RxWaitBoundP99us = st.RxWaitBoundP99Us
	in.NFQueueLen, in.NFDrops = st.NfReportedQueueLen, st.NfReportedDrops
	in.Phase, in.Reason, in.Restarts = st.Phase, st.Reason, st.Restarts
	in.ReportedAt = time.Now().UTC()
	if err := s.Store.UpdateStatus(ctx, in); errors.Is(err, store.ErrGone) {
		return status.Errorf(codes.NotFound, "instance %s: removed", st.Instance)
	} else if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	note.FlowsAtStats, note.RateStale = in.Flows, false
	s.Store.SetNote(in.Chain, in.ID, note)
	// Overload marks follow the stats events (Galleon §5.1), for every instance: a shared
	// core's load changes its other sgroups' marks too.
	state, err := s.state(ctx)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	if cur := state.insts[in.ID]; cur != nil {
		for i := range state.view.Instances {
			if state.view.Instances[i].ID == in.ID {
				cur.Load = state.view.Load(&state.view.Instances[i])
				cur.Threshold = state.view.Chains[cur.Chain].Threshold
			}
		}
		s.Store.SetNote(cur.Chain, cur.ID, cur.Note)
		in = cur
	}
	if err := s.overload(ctx, state); err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	s.publish(in)
	s.chainMetrics(ctx, chainName)
	return nil
}

// applyMeasured records keel's figures of a report: the offered rate, the VF's refusals
// since the last report (counters that went backwards: the VF was made again: the note's
// NewVFDropped) and the last cycles per packet measured over real packets (an idle interval
// reports 0 and must not make the batch flap between the model's and the measured figure).
func applyMeasured(in *store.Instance, st *pb.InstanceStats) store.Note {
	note := in.Note
	in.RateGbps, in.RatePps, in.Packets = st.RateGbps, st.RatePps, st.Packets
	note.NewVFDropped = st.VfDropped
	if st.VfDropped >= in.VFDropped {
		note.NewVFDropped = st.VfDropped - in.VFDropped
	}
	in.VFDropped = st.VfDropped
	if st.CyclesPerPacket > 0 {
		in.CyclesPerPacket = st.CyclesPerPacket
	}
	return note
}

// Snapshot is every chain, instance and worker as it is now, as watch events.
func (s *Controller) Snapshot(ctx context.Context) ([]*pb.WatchEvent, error) {
	ix, err := s.chains(ctx)
	if err != nil {
		return nil, err
	}
	var out []*pb.WatchEvent
	for _, e := range ix.chains {
		out = append(out, &pb.WatchEvent{Kind: pb.WatchEvent_CHAIN_ADDED, Chain: events.ChainProto(e.fn.Chain)})
		insts, err := s.Store.Instances(ctx, e.name())
		if err != nil {
			return nil, err
		}
		for _, in := range insts {
			out = append(out, &pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: in.Proto()})
		}
	}
	workers, err := s.Store.Workers(ctx)
	if err != nil {
		return nil, err
	}
	for name := range workers {
		out = append(out, &pb.WatchEvent{Kind: pb.WatchEvent_WORKER_REGISTERED, Worker: name})
	}
	return out, nil
}
