// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"net/netip"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/pcapfilter"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/store"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

// Server drives the controller as keel.v1.Control (package control) does, for the tests
// that play the ingress and the agent.
type Server struct{ *Controller }

// newServer is the controller with keel's policy over st, its pool a provider (p, or one
// of its own when nil).
func newServer(st *store.Store, hub *events.Hub, p *provider.Provider) *Server {
	if p == nil {
		p = &provider.Provider{Store: st, Hub: hub}
	}
	return &Server{&Controller{Store: st, Pool: p, Hub: hub, Policy: policy.Keel()}}
}

func flowOf(ft *pb.FiveTuple) pcapfilter.Flow {
	return pcapfilter.Flow{Src: netip.MustParseAddr(ft.SrcIp), Dst: netip.MustParseAddr(ft.DstIp),
		SrcPort: uint16(ft.SrcPort), DstPort: uint16(ft.DstPort), Proto: uint8(ft.Proto)}
}

func (s *Server) AssignFlow(ctx context.Context, req *pb.AssignFlowRequest) (*pb.AssignFlowResponse, error) {
	return s.Assign(ctx, flowOf(req.Flow), req.Chain, req.IngressId)
}

func (s *Server) ReleaseFlow(ctx context.Context, req *pb.ReleaseFlowRequest) (*pb.ReleaseFlowResponse, error) {
	released, err := s.Release(ctx, FlowKey(flowOf(req.Flow)))
	return &pb.ReleaseFlowResponse{Released: released}, err
}

func (s *Server) RegisterWorker(ctx context.Context, req *pb.RegisterWorkerRequest) (*pb.RegisterWorkerResponse, error) {
	w := &store.Worker{Name: req.Worker, CoreIDs: req.CoreIds, VFPorts: map[uint32]string{}, Seen: time.Now()}
	var ports []uint32
	for _, vf := range req.VfPorts {
		w.VFPorts[vf.Port] = vf.Name
		ports = append(ports, vf.Port)
	}
	if err := s.Store.PutWorker(ctx, w); err != nil {
		return nil, err
	}
	mine, err := s.AssignVFs(ctx, req.Worker, ports)
	resp := &pb.RegisterWorkerResponse{}
	for _, in := range mine {
		resp.Instances = append(resp.Instances, in.Proto())
	}
	return resp, err
}

func (s *Server) applyStats(ctx context.Context, st *pb.InstanceStats) error {
	return s.ApplyStats(ctx, st)
}
