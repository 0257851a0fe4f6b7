// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/types"
)

// drainingRack is one worker with managed core 1 and chain3 after a redeploy: chain3/0 drains
// the previous version with one flow (198.18.0.1:4000), chain3/1 is the new version's idle,
// ready instance.
func drainingRack(t *testing.T, until time.Time) (*Server, *store.Store) {
	t.Helper()
	st := testredis.Store(t)
	ctx := context.Background()
	hub := events.NewHub()
	srv := newServer(st, hub, &provider.Provider{Store: st, Hub: hub, Metrics: metrics.New()})
	if err := st.PutWorker(ctx, &store.Worker{Name: "local", CoreIDs: []uint32{1}}); err != nil {
		t.Fatal(err)
	}
	nat := chain.Member{Name: "nat", NF: "nat", Image: chain.LibraryImage}
	c := &chain.Chain{Name: "chain3", Spec: "NAT", Filter: "dst net 198.18.3.0/24", NFs: []string{"nat"},
		NFConfigs: []chain.Member{nat}, Members: []chain.Member{nat},
		Placement: chain.Placement{Subgroups: []chain.Subgroup{{Server: "local", Cores: 1, NFs: []string{"nat"}}}}}
	f := &chain.Function{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: "chain3"}, Chain: c, Replicas: 1}
	if err := st.Put(ctx, f); err != nil {
		t.Fatal(err)
	}
	prev := *c
	prev.Spec = "ACL -> NAT"
	old := &store.Instance{ID: "chain3/0", Chain: "chain3", Worker: "local", VLAN: 100, State: store.Attached, Core: 1,
		Phase: "ready", Draining: true, DrainUntil: until, Runs: events.ChainProto(&prev)}
	fresh := &store.Instance{ID: "chain3/1", Chain: "chain3", Worker: "local", VLAN: 101, State: store.Pooled, Core: -1, Phase: "ready"}
	for _, in := range []*store.Instance{old, fresh} {
		if err := st.PutInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.AssignFlow(ctx, &store.Flow{Key: "6 198.18.0.1:4000 198.18.3.9:80", Chain: "chain3", Instance: old.ID, VLAN: 100}, old, false); err != nil {
		t.Fatal(err)
	}
	return srv, st
}

func instanceIDs(t *testing.T, st *store.Store) map[string]*store.Instance {
	t.Helper()
	insts, err := st.Instances(context.Background(), "chain3")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*store.Instance{}
	for _, in := range insts {
		out[in.ID] = in
	}
	return out
}

func Test_a_draining_instance_takes_no_new_flow_and_goes_when_its_last_flow_ends(t *testing.T) {
	srv, st := drainingRack(t, time.Now().Add(time.Hour))
	ctx := context.Background()
	flow := func(port uint32) *pb.FiveTuple {
		return &pb.FiveTuple{SrcIp: "198.18.0.1", DstIp: "198.18.3.9", SrcPort: port, DstPort: 80, Proto: 6}
	}
	a, err := srv.AssignFlow(ctx, &pb.AssignFlowRequest{Flow: flow(4001)})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Assigned || a.Instance.Id != "chain3/1" {
		t.Fatalf("a new flow went to %v (%s), want the new version's chain3/1, not the draining chain3/0", a.Instance.GetId(), a.Reason)
	}
	// Its flow is live: the control loop keeps it (and never detaches it into the pool).
	if err := srv.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if in := instanceIDs(t, st)["chain3/0"]; in == nil || in.State != store.Attached || !in.Draining {
		t.Fatalf("chain3/0 with a live flow: %+v, want it still attached and draining", in)
	}
	// Its last flow expires on the ToR: the next pass removes it, with a decision that says so.
	if r, err := srv.ReleaseFlow(ctx, &pb.ReleaseFlowRequest{Flow: flow(4000)}); err != nil || !r.Released {
		t.Fatalf("release: %v, %v", r, err)
	}
	if err := srv.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if in := instanceIDs(t, st)["chain3/0"]; in != nil {
		t.Fatalf("chain3/0 stayed after its last flow ended: %+v", in)
	}
	var found bool
	for _, d := range srv.Decisions() {
		found = found || (d.Kind == policy.KindRemove && d.Reason == "drained" && d.Instance == "chain3/0")
	}
	if !found {
		t.Fatalf("no remove/drained decision in %+v", srv.Decisions())
	}
}

func Test_a_draining_instance_goes_at_its_deadline_with_the_flows_it_still_has(t *testing.T) {
	srv, st := drainingRack(t, time.Now().Add(-time.Second))
	ctx := context.Background()
	if err := srv.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if in := instanceIDs(t, st)["chain3/0"]; in != nil {
		t.Fatalf("chain3/0 stayed past its drain deadline: %+v", in)
	}
	if fl, _ := st.Flows(ctx, "chain3"); len(fl) != 0 {
		t.Fatalf("its flows are left: %+v", fl)
	}
	d := srv.Decisions()
	if len(d) == 0 || d[0].Reason != "drain_timeout" {
		t.Fatalf("decisions %+v, want the first to be a drain_timeout removal", d)
	}
}
