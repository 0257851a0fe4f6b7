// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc"
)

// listingTor is keel-torctl as SyncFlows sees it: ListFlows returns the flows in on (by
// tuple index), or err.
type listingTor struct {
	pb.TorControlClient
	on  map[int]bool
	err error
}

func (t *listingTor) ListFlows(context.Context, *pb.ListTorFlowsRequest, ...grpc.CallOption) (*pb.ListTorFlowsResponse, error) {
	if t.err != nil {
		return nil, t.err
	}
	resp := &pb.ListTorFlowsResponse{}
	for i := range t.on {
		resp.Flows = append(resp.Flows, &pb.InstalledFlow{Assignment: &pb.FlowAssignment{Flow: tuple(i), Chain: "chain3"}})
	}
	return resp, nil
}

// Flows whose expiry the gateway never heard of (FlowRemoved lost while the stream was down)
// are released once two listings of the switch a gap apart lack them, and only then: a flow
// missing from one listing (being installed, or put back after an OVS restart), a flow newer
// than the gap and a failed listing release nothing.
func Test_SyncFlows_releases_flows_the_switch_lost_and_only_those(t *testing.T) {
	srv, st, _ := flowRack(t, false)
	ctx := context.Background()
	var inst string
	for i := 0; i < 5; i++ {
		inst = assign(t, srv, i).Instance.Id
	}
	flows := func() uint32 {
		t.Helper()
		in, err := st.Instance(ctx, "chain3", inst)
		if err != nil || in == nil {
			t.Fatalf("instance %s: %v", inst, err)
		}
		return uint32(in.Flows)
	}
	const gap = 10 * time.Second
	now := time.Now().Add(time.Minute) // every flow was assigned well before
	fs := &flowSync{missing: map[string]time.Time{}}
	tor := &listingTor{on: map[int]bool{0: true, 1: true}}
	round := func(at time.Time) int {
		t.Helper()
		n, err := srv.syncFlowsOnce(ctx, tor, fs, at, gap)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := round(now); n != 0 || flows() != 5 {
		t.Fatalf("first listing without flows 2-4: released %d, instance has %d flows; want 0 and 5", n, flows())
	}
	// Too soon after the first: still nothing.
	if n := round(now.Add(gap / 2)); n != 0 {
		t.Fatalf("a second listing within the gap released %d flows", n)
	}
	// Flow 4 is back (torctl re-installed it); 2 and 3 are still gone a gap later.
	tor.on[4] = true
	if n := round(now.Add(gap)); n != 2 || flows() != 3 {
		t.Fatalf("released %d, instance has %d flows; want 2 and 3", n, flows())
	}
	// A failed listing says nothing: flow 1 missing then is not counted against it.
	tor.err = errors.New("switch not connected")
	if _, err := srv.syncFlowsOnce(ctx, tor, fs, now.Add(2*gap), gap); err == nil {
		t.Fatal("a failed ListFlows was not reported")
	}
	tor.err = nil
	delete(tor.on, 1)
	if n := round(now.Add(3 * gap)); n != 0 {
		t.Fatalf("flow 1, missing from one listing, was released (%d)", n)
	}
	if n := round(now.Add(4 * gap)); n != 1 || flows() != 2 {
		t.Fatalf("released %d, instance has %d flows; want flow 1 released, 0 and 4 left", n, flows())
	}
	// A flow assigned within the gap before a listing is not judged by it.
	assign(t, srv, 7)
	if n := round(time.Now()); n != 0 || flows() != 3 {
		t.Fatalf("released %d, instance has %d flows; want the new flow 7 kept (3: 0, 4, 7)", n, flows())
	}
}
