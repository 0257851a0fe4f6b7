// SPDX-License-Identifier: Apache-2.0

// Package control serves keel.v1.Control: flow assignment for keel-ingress, worker
// registration and stats from keel-agent, and Watch streams for both. What to decide it
// leaves to the controller (gateway/internal/controller); it checks what comes off the wire
// and streams what goes on it.
package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/controller"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/secrets"
	"github.com/keel-nfv/keel/gateway/internal/store"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server implements pb.ControlServer over the store and the controller.
type Server struct {
	pb.UnimplementedControlServer
	Store      *store.Store
	Controller *controller.Controller
	Hub        *events.Hub
	// Secrets keeps functions' secrets (faas-cli secret); nil: chains may list none.
	Secrets *secrets.Store
	// Moves applies ingresses' reports of flow moves (ReportMoves); nil: refused.
	Moves *Mover

	ingress sync.Map // ingress id -> latest *pb.IngressStats
}

// AssignFlow classifies a new flow to a chain (the ingress's choice, checked) and assigns it
// an instance (controller.Assign).
func (s *Server) AssignFlow(ctx context.Context, req *pb.AssignFlowRequest) (*pb.AssignFlowResponse, error) {
	flow, err := controller.ParseFlow(req.GetFlow())
	if err != nil {
		return nil, err
	}
	return s.Controller.Assign(ctx, flow, req.Chain, req.IngressId)
}

// MaxAssignBatch is the most flows one AssignFlows call may carry.
const MaxAssignBatch = 1024

// AssignFlows assigns a batch of new flows (controller.AssignMany): each flow's answer, or
// its own error (a malformed 5-tuple fails alone).
func (s *Server) AssignFlows(ctx context.Context, req *pb.AssignFlowsRequest) (*pb.AssignFlowsResponse, error) {
	if len(req.Flows) > MaxAssignBatch {
		return nil, status.Errorf(codes.InvalidArgument, "flows: %d in one call, at most %d", len(req.Flows), MaxAssignBatch)
	}
	resp := &pb.AssignFlowsResponse{Results: make([]*pb.AssignFlowResult, len(req.Flows))}
	var reqs []controller.FlowRequest
	var at []int // reqs[k] is request flow at[k]
	for i, r := range req.Flows {
		flow, err := controller.ParseFlow(r.GetFlow())
		if err != nil {
			resp.Results[i] = resultOf(nil, err)
			continue
		}
		reqs = append(reqs, controller.FlowRequest{Flow: flow, Hint: r.Chain, Ingress: r.IngressId})
		at = append(at, i)
	}
	for k, r := range s.Controller.AssignMany(ctx, reqs) {
		resp.Results[at[k]] = resultOf(r.Resp, r.Err)
	}
	return resp, nil
}

func resultOf(resp *pb.AssignFlowResponse, err error) *pb.AssignFlowResult {
	if err != nil {
		st := status.Convert(err)
		return &pb.AssignFlowResult{Error: st.Message(), Code: uint32(st.Code())}
	}
	return &pb.AssignFlowResult{Response: resp}
}

// ReleaseFlow ends a flow's assignment: its ToR rule expired, or the ingress could not
// install it. The instance's flow count drops.
func (s *Server) ReleaseFlow(ctx context.Context, req *pb.ReleaseFlowRequest) (*pb.ReleaseFlowResponse, error) {
	flow, err := controller.ParseFlow(req.GetFlow())
	if err != nil {
		return nil, err
	}
	released, err := s.Controller.Release(ctx, controller.FlowKey(flow))
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &pb.ReleaseFlowResponse{Released: released}, nil
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
		// One Redis call for the message's flows (ReleaseMany), not one per flow.
		keys := make([]string, 0, len(batch.GetRemoved()))
		for _, ev := range batch.GetRemoved() {
			flow, err := controller.ParseFlow(ev.GetAssignment().GetFlow())
			if err != nil {
				return err
			}
			keys = append(keys, controller.FlowKey(flow))
		}
		if _, err := s.Controller.ReleaseMany(ctx, keys); err != nil {
			return err
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
	var ports []uint32
	for _, vf := range req.VfPorts {
		w.VFPorts[vf.Port] = vf.Name
		ports = append(ports, vf.Port)
	}
	if err := s.Store.PutWorker(ctx, w); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	mine, err := s.Controller.AssignVFs(ctx, req.Worker, ports)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	resp := &pb.RegisterWorkerResponse{}
	for _, in := range mine {
		resp.Instances = append(resp.Instances, in.Proto())
	}
	s.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_WORKER_REGISTERED, Worker: req.Worker})
	return resp, nil
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
		err = s.Controller.ApplyStats(ctx, st)
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

// Watch sends every chain, instance and worker as it is now, then each change. A FLOWS_MOVE
// goes only to the ingress it names (keel-ingress watches as its ingress id), never in the
// snapshot.
func (s *Server) Watch(req *pb.WatchRequest, stream pb.Control_WatchServer) error {
	ctx := stream.Context()
	ch, cancel := s.Hub.Subscribe()
	defer cancel()
	snapshot, err := s.Controller.Snapshot(ctx)
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
			if ev.Kind == pb.WatchEvent_FLOWS_MOVE && ev.GetMove().GetIngressId() != req.Watcher {
				continue
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}
