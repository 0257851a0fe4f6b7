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
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/pcapfilter"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/store"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Overload thresholds of an instance (Galleon §4: NIC queue length and rate); the controller
// issue refines them.
const (
	QueueHigh    = 64  // packets waiting in the VF's queue
	RateHighFrac = 0.9 // of the chain's placed rate
)

// Server implements pb.ControlServer over the store.
type Server struct {
	pb.UnimplementedControlServer
	Store    *store.Store
	Provider *provider.Provider
	Hub      *events.Hub

	mu      sync.Mutex // serialises read-modify-write of instances
	filters sync.Map   // filter expression -> *pcapfilter.Filter
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

// AssignFlow picks the chain whose filter matches the flow (chains in name order) and an
// instance of it: the most loaded attached instance that is not overloaded, else a pooled one.
func (s *Server) AssignFlow(ctx context.Context, req *pb.AssignFlowRequest) (*pb.AssignFlowResponse, error) {
	ft := req.GetFlow()
	if ft == nil {
		return nil, status.Error(codes.InvalidArgument, "flow: missing")
	}
	src, err1 := netip.ParseAddr(ft.SrcIp)
	dst, err2 := netip.ParseAddr(ft.DstIp)
	if err := errors.Join(err1, err2); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "flow: %v", err)
	}
	if ft.SrcPort > 65535 || ft.DstPort > 65535 || ft.Proto > 255 {
		return nil, status.Error(codes.InvalidArgument, "flow: port or protocol out of range")
	}
	flow := pcapfilter.Flow{Src: src, Dst: dst, SrcPort: uint16(ft.SrcPort), DstPort: uint16(ft.DstPort), Proto: uint8(ft.Proto)}
	all, err := s.Store.List(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	var c *chain.Chain
	for _, f := range all {
		if f.Kind != chain.KindChain {
			continue
		}
		flt, err := s.filter(f.Chain.Filter)
		if err != nil {
			continue
		}
		ok, err := flt.Match(flow)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "flow: %v", err)
		}
		if ok {
			c = f.Chain
			break
		}
	}
	if c == nil {
		return &pb.AssignFlowResponse{Reason: "no chain's filter matches the flow"}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	insts, err := s.Store.Instances(ctx, c.Name)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	in := Pick(insts)
	if in == nil {
		reason := "chain " + c.Name + " has no instance with spare capacity and no pooled instance"
		if len(c.Placement.Subgroups) == 0 {
			reason = "chain " + c.Name + " runs on the switch only"
		}
		return &pb.AssignFlowResponse{Chain: c.Name, Reason: reason}, nil
	}
	if in.State != store.Attached {
		core, err := s.pickCore(ctx, in.Worker)
		if err != nil {
			return &pb.AssignFlowResponse{Chain: c.Name, Reason: err.Error()}, nil
		}
		in.State, in.Core = store.Attached, core
	}
	in.Flows++
	if err := s.Store.PutInstance(ctx, in); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	pi := events.InstanceProto(in)
	s.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: pi})
	s.Provider.UpdateChainMetrics(ctx, c.Name)
	return &pb.AssignFlowResponse{Assigned: true, Chain: c.Name, Instance: pi}, nil
}

// pickCore chooses the core an instance of worker leaves the pool for (Galleon §5.3).
func (s *Server) pickCore(ctx context.Context, worker string) (int32, error) {
	workers, err := s.Store.Workers(ctx)
	if err != nil {
		return -1, err
	}
	w := workers[worker]
	if w == nil || len(w.CoreIDs) == 0 {
		return -1, fmt.Errorf("worker %s has not registered any managed core (is keel-agent running?)", worker)
	}
	mine, err := s.workerInstances(ctx, worker)
	if err != nil {
		return -1, err
	}
	return PickCore(w.CoreIDs, mine), nil
}

// PickCore returns the managed core with the fewest attached instances (the lowest on a
// tie); the controller issue replaces it with core packing against the SLO thresholds.
func PickCore(coreIDs []uint32, insts []*store.Instance) int32 {
	load := map[int32]int{}
	for _, in := range insts {
		if in.State == store.Attached {
			load[in.Core]++
		}
	}
	best := int32(-1)
	for _, c := range coreIDs {
		if best < 0 || load[int32(c)] < load[best] || (load[int32(c)] == load[best] && int32(c) < best) {
			best = int32(c)
		}
	}
	return best
}

// Pick is Galleon's Listing 1: among attached instances that are not overloaded the most
// loaded one (rate, then flows), else the first pooled (idle) one, else nil.
func Pick(insts []*store.Instance) *store.Instance {
	var best, idle *store.Instance
	for _, in := range insts {
		switch {
		case in.State == store.Attached && !in.Overloaded:
			if best == nil || in.RateGbps > best.RateGbps || (in.RateGbps == best.RateGbps && in.Flows > best.Flows) {
				best = in
			}
		case in.State == store.Pooled && idle == nil:
			idle = in
		}
	}
	if best != nil {
		return best
	}
	return idle
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
		if in.VFPort == 0 {
			for _, vf := range req.VfPorts {
				if vf.Port != 0 && !used[vf.Port] {
					in.VFPort = vf.Port
					used[vf.Port] = true
					if err := s.Store.PutInstance(ctx, in); err != nil {
						return nil, status.Error(codes.Unavailable, err.Error())
					}
					break
				}
			}
		}
		resp.Instances = append(resp.Instances, events.InstanceProto(in))
	}
	s.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_WORKER_REGISTERED, Worker: req.Worker})
	return resp, nil
}

func (s *Server) workerInstances(ctx context.Context, worker string) ([]*store.Instance, error) {
	all, err := s.Store.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []*store.Instance
	for _, f := range all {
		if f.Kind != chain.KindChain {
			continue
		}
		insts, err := s.Store.Instances(ctx, f.Deployment.Service)
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
	f, err := s.Store.Get(ctx, chainName)
	if errors.Is(err, store.ErrNotFound) {
		return status.Errorf(codes.NotFound, "instance %s: no chain %s", st.Instance, chainName)
	}
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	insts, err := s.Store.Instances(ctx, chainName)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	var in *store.Instance
	for _, x := range insts {
		if x.ID == st.Instance {
			in = x
		}
	}
	if in == nil {
		return status.Errorf(codes.NotFound, "instance %s: unknown", st.Instance)
	}
	// The agent reports what runs; what should run (state, core, batch) stays the gateway's.
	in.RateGbps, in.P99us, in.QueueLen = st.RateGbps, st.P99Us, st.QueueLen
	in.Packets, in.Drops = st.Packets, st.Drops
	in.Phase, in.Reason, in.Restarts = st.Phase, st.Reason, st.Restarts
	placed := f.Chain.Placement.RateGbps
	in.Overloaded = st.QueueLen >= QueueHigh || (placed > 0 && st.RateGbps >= RateHighFrac*placed)
	if err := s.Store.PutInstance(ctx, in); err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	s.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: events.InstanceProto(in)})
	s.Provider.UpdateChainMetrics(ctx, chainName)
	return nil
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
	all, err := s.Store.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []*pb.WatchEvent
	for _, f := range all {
		if f.Kind != chain.KindChain {
			continue
		}
		out = append(out, &pb.WatchEvent{Kind: pb.WatchEvent_CHAIN_ADDED, Chain: events.ChainProto(f.Chain)})
		insts, err := s.Store.Instances(ctx, f.Deployment.Service)
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
