// SPDX-License-Identifier: Apache-2.0

package control

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-nfv/keel/gateway/internal/controller"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

// A malformed 5-tuple in an AssignFlows batch fails alone, with the code AssignFlow would
// give it; the other flows are answered in order; a batch past MaxAssignBatch is refused whole.
func Test_AssignFlows_answers_each_flow_in_order_and_fails_a_malformed_one_alone(t *testing.T) {
	st := testredis.Store(t)
	hub := events.NewHub()
	srv := &Server{Store: st, Hub: hub, Controller: &controller.Controller{Store: st, Hub: hub, Policy: policy.Keel()}}
	ctx := context.Background()
	good := &pb.FiveTuple{SrcIp: "198.18.0.1", DstIp: "198.18.9.1", SrcPort: 1, DstPort: 80, Proto: 17}
	bad := &pb.FiveTuple{SrcIp: "198.18.0.1", DstIp: "not an address", SrcPort: 1, DstPort: 80, Proto: 17}
	resp, err := srv.AssignFlows(ctx, &pb.AssignFlowsRequest{Flows: []*pb.AssignFlowRequest{{Flow: good}, {Flow: bad}, {}, {Flow: good}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Results) != 4 {
		t.Fatalf("%d results for 4 flows", len(resp.Results))
	}
	for _, i := range []int{0, 3} {
		r := resp.Results[i]
		if r.Error != "" || r.Response == nil || r.Response.Assigned || r.Response.Reason == "" {
			t.Fatalf("flow %d (no chain deployed): %v, want not assigned with a reason", i, r)
		}
	}
	for _, i := range []int{1, 2} {
		if r := resp.Results[i]; r.Response != nil || codes.Code(r.Code) != codes.InvalidArgument || r.Error == "" {
			t.Fatalf("malformed flow %d: %v, want its own InvalidArgument", i, r)
		}
	}
	_, err = srv.AssignFlows(ctx, &pb.AssignFlowsRequest{Flows: make([]*pb.AssignFlowRequest, MaxAssignBatch+1)})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a batch of %d flows: %v, want InvalidArgument", MaxAssignBatch+1, err)
	}
}
