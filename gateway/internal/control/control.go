// SPDX-License-Identifier: Apache-2.0

// Package control serves keel.v1.Control: flow assignment for keel-ingress, worker
// registration and stats from keel-agent, and Watch streams for both.
package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/pcapfilter"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/store"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server implements pb.ControlServer over the store, and runs the controller's policy
// (gateway/internal/policy) on every flow, stats event and pass of Run.
type Server struct {
	pb.UnimplementedControlServer
	Store    *store.Store
	Provider *provider.Provider
	Hub      *events.Hub
	Policy   policy.Config
	Modeler  Modeler
	Logf     func(format string, args ...any) // one line per scale decision; nil: quiet
	// OnDecision, when set, sees every decision (the gateway counts them in its metrics).
	OnDecision func(Decision)
	// Functions, when set, scales normal functions in the same loop (functions.go); its
	// decisions join the chains'.
	Functions *FunctionScaler

	mu        sync.Mutex // serialises read-modify-write of instances and flows
	filters   sync.Map   // filter expression -> *pcapfilter.Filter
	ingress   sync.Map   // ingress id -> latest *pb.IngressStats
	models    sync.Map   // chain name + spec -> *Model
	modelMu   sync.Mutex // one model built at a time
	index     atomic.Pointer[chainIndex]
	indexMu   sync.Mutex // one index rebuild at a time
	kickOnce  sync.Once
	kicks     chan struct{}
	decisions decisionLog
}

func (s *Server) filter(expr string) (*pcapfilter.Filter, error) {
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

// parseFlow checks a 5-tuple from the wire.
func parseFlow(ft *pb.FiveTuple) (pcapfilter.Flow, error) {
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

func flowKey(f pcapfilter.Flow) string {
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

// AssignFlow classifies a new flow to a chain (the ingress's choice, checked) and assigns it
// an instance: the most loaded attached instance that is not overloaded, else a pooled one
// (Galleon Listing 1). A flow of a chain that runs on the switch only is recorded without
// an instance. A flow that is already assigned gets its assignment again (the ingress retries
// after a lost answer), so its instance's flow count is not raised twice.
func (s *Server) AssignFlow(ctx context.Context, req *pb.AssignFlowRequest) (*pb.AssignFlowResponse, error) {
	flow, err := parseFlow(req.GetFlow())
	if err != nil {
		return nil, err
	}
	ix, err := s.chains(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	e, err := classify(ix, flow, req.Chain)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return &pb.AssignFlowResponse{Reason: "no chain's filter matches the flow"}, nil
	}
	c := e.fn.Chain
	s.mu.Lock()
	defer s.mu.Unlock()
	key := flowKey(flow)
	prev, err := s.Store.Flow(ctx, key)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if prev != nil && prev.Chain == c.Name {
		if prev.Instance == "" {
			return &pb.AssignFlowResponse{Assigned: true, Chain: c.Name, SwitchOnly: true}, nil
		}
		in, err := s.Store.Instance(ctx, c.Name, prev.Instance)
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		if in != nil {
			return &pb.AssignFlowResponse{Assigned: true, Chain: c.Name, Instance: events.InstanceProto(in)}, nil
		}
	}
	// PutFlow counts the flow as one invocation of the chain (faas-cli's invocation count of a
	// chain is the flows assigned to it), in the same round trip.
	rec := &store.Flow{Key: key, Chain: c.Name, Since: time.Now().UTC()}
	if e.switchOnly {
		if err := s.Store.PutFlow(ctx, rec, nil); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		return &pb.AssignFlowResponse{Assigned: true, Chain: c.Name, SwitchOnly: true}, nil
	}
	st, err := s.state(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	a := s.Policy.Assign(st.view, c.Name)
	in := st.insts[a.Instance]
	if in == nil {
		return &pb.AssignFlowResponse{Chain: c.Name, Reason: a.Reason}, nil
	}
	if a.Attach {
		in.State, in.Core, in.Overloaded = store.Attached, a.Core, false
		in.RatePps, in.FlowsAtStats = 0, 0
		if m := st.models[c.Name]; m != nil {
			in.Batch = s.batchFor(m, in)
		}
		in.Why = fmt.Sprintf("attached on core %d: no attached instance was under its threshold", a.Core)
		if a.ColdStart {
			in.Why += " (cold start: no idle instance was ready)"
		}
	}
	in.Flows++
	in.IdleSince = time.Time{}
	in.Threshold = st.view.Chains[c.Name].Threshold
	rec.Instance, rec.VLAN, rec.Worker = in.ID, in.VLAN, in.Worker
	if err := s.Store.PutFlow(ctx, rec, in); errors.Is(err, store.ErrGone) {
		// The chain was removed or redeployed since state() read it: the ingress asks again.
		return nil, status.Errorf(codes.Unavailable, "instance %s was removed while the flow was assigned to it; ask again", in.ID)
	} else if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	pi := events.InstanceProto(in)
	if a.Attach {
		// Watchers (agents, torctl) act on state and core, not on every flow's count: at
		// thousands of new flows a second those events would only bury the ones that matter.
		s.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: pi})
		reason := "no_instance_under_threshold"
		if a.ColdStart {
			reason = "cold_start"
		}
		s.decide(Decision{Kind: KindAttach, Reason: reason, Chain: c.Name, Instance: in.ID, Worker: in.Worker, Core: in.Core},
			"scale-out: chain %s instance %s attached on worker %s core %d, batch %d (no attached instance under threshold %.2f%s)",
			c.Name, in.ID, in.Worker, in.Core, in.Batch, st.view.Chains[c.Name].Threshold, map[bool]string{true: "; cold start", false: ""}[a.ColdStart])
		s.kick()
	}
	// the gauges from the state just read and written (in is st.insts[a.Instance])
	var chainInsts []*store.Instance
	for _, x := range st.insts {
		if x.Chain == c.Name {
			chainInsts = append(chainInsts, x)
		}
	}
	s.Provider.SetChainMetrics(st.chains[c.Name], chainInsts)
	return &pb.AssignFlowResponse{Assigned: true, Chain: c.Name, Instance: pi}, nil
}

// ReleaseFlow ends a flow's assignment: its ToR rule expired, or the ingress could not
// install it. The instance's flow count drops.
func (s *Server) ReleaseFlow(ctx context.Context, req *pb.ReleaseFlowRequest) (*pb.ReleaseFlowResponse, error) {
	flow, err := parseFlow(req.GetFlow())
	if err != nil {
		return nil, err
	}
	released, err := s.release(ctx, flowKey(flow))
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &pb.ReleaseFlowResponse{Released: released}, nil
}

func (s *Server) release(ctx context.Context, key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.Store.Flow(ctx, key)
	if err != nil || rec == nil {
		return false, err
	}
	var in *store.Instance
	if rec.Instance != "" {
		if in, err = s.Store.Instance(ctx, rec.Chain, rec.Instance); err != nil {
			return false, err
		}
		if in != nil && in.Flows > 0 {
			in.Flows--
			if in.Flows == 0 && in.State == store.Attached {
				in.IdleSince = time.Now()
			}
		}
	}
	if err := s.Store.DeleteFlow(ctx, rec, in); err != nil {
		return false, err
	}
	if in != nil {
		s.chainMetrics(ctx, rec.Chain)
		if in.Draining && in.Flows == 0 {
			s.kick() // its last flow ended: the control loop removes it now
		}
	}
	return true, nil
}

// ListFlows returns the live flow assignments.
func (s *Server) ListFlows(ctx context.Context, req *pb.ListFlowsRequest) (*pb.ListFlowsResponse, error) {
	flows, err := s.Store.Flows(ctx, req.Chain)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	resp := &pb.ListFlowsResponse{}
	for _, f := range flows {
		ft, err := tupleOf(f.Key)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		resp.Flows = append(resp.Flows, &pb.FlowRecord{Flow: ft, Chain: f.Chain, Instance: f.Instance, Vlan: f.VLAN, Worker: f.Worker})
	}
	return resp, nil
}

// tupleOf parses a FlowKey back into a 5-tuple.
func tupleOf(key string) (*pb.FiveTuple, error) {
	var proto uint32
	var src, dst string
	if _, err := fmt.Sscanf(key, "%d %s %s", &proto, &src, &dst); err != nil {
		return nil, fmt.Errorf("flow key %q: %w", key, err)
	}
	s, err1 := netip.ParseAddrPort(src)
	d, err2 := netip.ParseAddrPort(dst)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("flow key %q: %w", key, err)
	}
	return &pb.FiveTuple{SrcIp: s.Addr().String(), DstIp: d.Addr().String(), SrcPort: uint32(s.Port()),
		DstPort: uint32(d.Port()), Proto: proto}, nil
}

// ReportIngressStats keeps the latest counters of each ingress.
func (s *Server) ReportIngressStats(ctx context.Context, st *pb.IngressStats) (*pb.ReportIngressStatsResponse, error) {
	if st.IngressId == "" {
		return nil, status.Error(codes.InvalidArgument, "ingress_id: missing")
	}
	s.ingress.Store(st.IngressId, st)
	return &pb.ReportIngressStatsResponse{}, nil
}

// IngressStats returns the latest counters of every ingress, by ingress id.
func (s *Server) IngressStats() map[string]*pb.IngressStats {
	out := map[string]*pb.IngressStats{}
	s.ingress.Range(func(k, v any) bool {
		out[k.(string)] = v.(*pb.IngressStats)
		return true
	})
	return out
}

// FollowTor releases the flows whose ToR rules expire, as keel-torctl reports them, until ctx
// ends; it watches again (after 0.5 s, backing off to 5 s while attempts keep failing fast)
// whenever the stream breaks.
func (s *Server) FollowTor(ctx context.Context, tor pb.TorControlClient, logf func(string, ...any)) {
	const first, most = 500 * time.Millisecond, 5 * time.Second
	backoff := first
	for ctx.Err() == nil {
		start := time.Now()
		err := s.followTorOnce(ctx, tor)
		if time.Since(start) > most {
			backoff = first // the stream lived: this break is news, not a torctl that stays down
		}
		if ctx.Err() != nil {
			return
		}
		logf("keel-torctl: flow expiry stream: %v; watching again in %s", err, backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, most)
	}
}

func (s *Server) followTorOnce(ctx context.Context, tor pb.TorControlClient) error {
	// The batched stream: at thousands of expiring flows a second, one message per flow costs
	// torctl (Python) more than the expiry itself.
	stream, err := tor.WatchFlowsRemoved(ctx, &pb.WatchFlowRemovedRequest{Watcher: "keel-gateway"})
	if err != nil {
		return err
	}
	for {
		batch, err := stream.Recv()
		if err != nil {
			return err
		}
		for _, ev := range batch.GetRemoved() {
			flow, err := parseFlow(ev.GetAssignment().GetFlow())
			if err != nil {
				return err
			}
			if _, err := s.release(ctx, flowKey(flow)); err != nil {
				return err
			}
		}
	}
}

// RegisterWorker records a worker, gives its VF ports to its instances that have none, and
// returns the instances it should run.
func (s *Server) RegisterWorker(ctx context.Context, req *pb.RegisterWorkerRequest) (*pb.RegisterWorkerResponse, error) {
	if req.Worker == "" {
		return nil, status.Error(codes.InvalidArgument, "worker: missing name")
	}
	w := &store.Worker{Name: req.Worker, Address: req.Address, Cores: req.Cores, CoreIDs: req.CoreIds,
		VFPorts: map[uint32]string{}, Seen: time.Now().UTC()}
	for _, vf := range req.VfPorts {
		w.VFPorts[vf.Port] = vf.Name
	}
	if err := s.Store.PutWorker(ctx, w); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	mine, err := s.workerInstances(ctx, req.Worker)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	used := map[uint32]bool{}
	for _, in := range mine {
		if in.VFPort != 0 {
			used[in.VFPort] = true
		}
	}
	resp := &pb.RegisterWorkerResponse{}
	for _, in := range mine {
		gone := false
		if in.VFPort == 0 {
			for _, vf := range req.VfPorts {
				if vf.Port != 0 && !used[vf.Port] {
					in.VFPort = vf.Port
					used[vf.Port] = true
					err := s.Store.UpdateInstance(ctx, in)
					gone = errors.Is(err, store.ErrGone) // removed meanwhile: not this worker's to run
					if err != nil && !gone {
						return nil, status.Error(codes.Unavailable, err.Error())
					}
					break
				}
			}
		}
		if !gone {
			resp.Instances = append(resp.Instances, events.InstanceProto(in))
		}
	}
	s.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_WORKER_REGISTERED, Worker: req.Worker})
	return resp, nil
}

func (s *Server) workerInstances(ctx context.Context, worker string) ([]*store.Instance, error) {
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

// StreamStats applies each stats message to its instance and recomputes overload.
func (s *Server) StreamStats(stream pb.Control_StreamStatsServer) error {
	ctx := stream.Context()
	var n uint64
	for {
		st, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&pb.StreamStatsResponse{Received: n})
		}
		if err != nil {
			return err
		}
		err = s.applyStats(ctx, st)
		if status.Code(err) == codes.NotFound {
			// An instance removed while its stats were on the way: not the agent's fault.
			continue
		}
		if err != nil {
			return err
		}
		n++
	}
}

func (s *Server) applyStats(ctx context.Context, st *pb.InstanceStats) error {
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
	applyMeasured(in, st)
	in.P99us = st.P99Us
	in.NFQueueLen, in.NFDrops = st.NfReportedQueueLen, st.NfReportedDrops
	in.Phase, in.Reason, in.Restarts = st.Phase, st.Reason, st.Restarts
	in.ReportedAt = time.Now().UTC()
	in.FlowsAtStats = in.Flows
	if err := s.Store.UpdateInstance(ctx, in); errors.Is(err, store.ErrGone) {
		return status.Errorf(codes.NotFound, "instance %s: removed", st.Instance)
	} else if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
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
		if err := s.Store.UpdateInstance(ctx, cur); errors.Is(err, store.ErrGone) {
			return status.Errorf(codes.NotFound, "instance %s: removed", st.Instance)
		} else if err != nil {
			return status.Error(codes.Unavailable, err.Error())
		}
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
// since the last report (counters that went backwards: the VF was made again) and the last
// cycles per packet measured over real packets (an idle interval reports 0 and must not make
// the batch flap between the model's and the measured figure).
func applyMeasured(in *store.Instance, st *pb.InstanceStats) {
	in.RateGbps, in.RatePps, in.Packets = st.RateGbps, st.RatePps, st.Packets
	in.NewVFDropped = st.VfDropped
	if st.VfDropped >= in.VFDropped {
		in.NewVFDropped = st.VfDropped - in.VFDropped
	}
	in.VFDropped = st.VfDropped
	if st.CyclesPerPacket > 0 {
		in.CyclesPerPacket = st.CyclesPerPacket
	}
}

// Watch sends every chain, instance and worker as it is now, then each change.
func (s *Server) Watch(req *pb.WatchRequest, stream pb.Control_WatchServer) error {
	ctx := stream.Context()
	ch, cancel := s.Hub.Subscribe()
	defer cancel()
	snapshot, err := s.snapshot(ctx)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	for _, ev := range snapshot {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	if err := stream.Send(&pb.WatchEvent{Kind: pb.WatchEvent_SYNCED}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-ch:
			if !ok {
				return status.Errorf(codes.ResourceExhausted, "watcher %s fell %d events behind; watch again", req.Watcher, events.Backlog)
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

func (s *Server) snapshot(ctx context.Context) ([]*pb.WatchEvent, error) {
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
			out = append(out, &pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: events.InstanceProto(in)})
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
