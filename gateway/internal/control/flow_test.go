// SPDX-License-Identifier: Apache-2.0

package control

import (
	"context"
	"fmt"
	"syscall"
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

// flowRack is the embedded rack as make up deploys it, in the store: worker local with managed
// core 1; chain1 on the switch only, chain2 (ACL on the switch, NAT on the server) with one
// attached and one idle instance, chain3 (ACL -> NAT on the server) with two idle instances,
// all ready; a normal function and a packet function beside them. The counter counts the
// store's Redis round trips.
func flowRack(tb testing.TB) (*Server, *store.Store, *testredis.Counter) {
	tb.Helper()
	st, n := testredis.Counted(tb)
	ctx := context.Background()
	hub := events.NewHub()
	srv := &Server{Store: st, Hub: hub, Policy: policy.Keel(),
		Provider: &provider.Provider{Store: st, Hub: hub, Metrics: metrics.New()}}
	if err := st.PutWorker(ctx, &store.Worker{Name: "local", Address: "127.0.0.1:50061", Cores: 2, CoreIDs: []uint32{1},
		VFPorts: map[uint32]string{2: "vf0", 3: "vf1", 4: "vf2", 5: "vf3"}}); err != nil {
		tb.Fatal(err)
	}
	put := func(f *store.Function) {
		if err := st.Put(ctx, f); err != nil {
			tb.Fatal(err)
		}
	}
	put(&store.Function{Deployment: types.FunctionDeployment{Service: "hello", Image: "keel/hello:latest",
		Labels: &map[string]string{"com.openfaas.scale.min": "1"}}, Replicas: 1})
	put(&store.Function{Kind: chain.KindNF, Deployment: types.FunctionDeployment{Service: "ttlguard", Image: "keel/nf-ttlguard:latest",
		Labels: &map[string]string{chain.LabelKind: chain.KindNF}}})
	rackChain := func(name, spec, filter string, nfs []string, server map[string]bool) *chain.Chain {
		c := &chain.Chain{Name: name, Spec: spec, Filter: filter, SLOText: "p99=100us", SLO: chain.SLO{P99us: 100},
			NFs: nfs, Tenant: "openfaas-fn"}
		pl := chain.Placement{RateGbps: 1, LatencyUs: 20}
		var onServer []string
		for _, nf := range nfs {
			c.NFConfigs = append(c.NFConfigs, chain.Member{Name: nf, NF: nf, Image: chain.LibraryImage, Config: `{"rules":[]}`})
			p := chain.PlacedNF{Name: nf, NF: nf, Target: "switch", Subgroup: -1}
			if server[nf] {
				p = chain.PlacedNF{Name: nf, NF: nf, Target: "server", Server: "local"}
				onServer = append(onServer, nf)
			}
			pl.NFs = append(pl.NFs, p)
		}
		if len(onServer) > 0 {
			pl.Subgroups = []chain.Subgroup{{Server: "local", Cores: 1, NFs: onServer}}
		}
		c.SetPlacement(pl)
		replicas := uint64(2)
		if len(onServer) == 0 {
			replicas = 0
		}
		put(&store.Function{Kind: chain.KindChain, Chain: c, Replicas: replicas, Deployment: types.FunctionDeployment{
			Service: name, Image: chain.LibraryImage, Namespace: "openfaas-fn",
			Labels: &map[string]string{chain.LabelKind: chain.KindChain},
			Annotations: &map[string]string{chain.AnnotationChain: spec, chain.AnnotationFilter: filter,
				chain.AnnotationSLO: "p99=100us"}}})
		return c
	}
	rackChain("chain1", "Tunnel -> IPv4Fwd", "dst net 198.18.1.0/24", []string{"tunnel", "ipv4fwd"}, nil)
	rackChain("chain2", "ACL -> NAT", "dst net 198.18.2.0/24", []string{"acl", "nat"}, map[string]bool{"nat": true})
	rackChain("chain3", "ACL -> NAT", "dst net 198.18.3.0/24", []string{"acl", "nat"}, map[string]bool{"acl": true, "nat": true})
	vlan := uint32(100)
	for _, in := range []*store.Instance{
		{ID: "chain2/0", Chain: "chain2", State: store.Attached, Core: 1},
		{ID: "chain2/1", Chain: "chain2", State: store.Pooled, Core: -1},
		{ID: "chain3/0", Chain: "chain3", State: store.Pooled, Core: -1},
		{ID: "chain3/1", Chain: "chain3", State: store.Pooled, Core: -1},
	} {
		in.Worker, in.VLAN, in.VFPort, in.Cores, in.Phase, in.Batch = "local", vlan, vlan-98, 1, "ready", 1
		vlan++
		if err := st.PutInstance(ctx, in); err != nil {
			tb.Fatal(err)
		}
	}
	return srv, st, n
}

// tuple is the i-th new flow of chain3: UDP from 198.18.0.1, a source port and address each.
func tuple(i int) *pb.FiveTuple {
	return &pb.FiveTuple{SrcIp: fmt.Sprintf("198.18.0.%d", 1+i/60000%200), DstIp: "198.18.3.1",
		SrcPort: uint32(1024 + i%60000), DstPort: 5001, Proto: 17}
}

func assign(tb testing.TB, srv *Server, i int) *pb.AssignFlowResponse {
	tb.Helper()
	a, err := srv.AssignFlow(context.Background(), &pb.AssignFlowRequest{Flow: tuple(i), Chain: "chain3"})
	if err != nil {
		tb.Fatal(err)
	}
	if !a.Assigned {
		tb.Fatalf("flow %d not assigned: %s", i, a.Reason)
	}
	return a
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// meter reports, per op of b's timed loop, the gateway's CPU time (cpu-ns/op: what a new
// flow costs core 0, unlike ns/op, which waits for Redis too) and the store's Redis round
// trips and commands.
type meter struct {
	b               *testing.B
	n               *testredis.Counter
	cpu             time.Duration
	trips, commands int64
}

func startMeter(b *testing.B, n *testredis.Counter) *meter {
	b.ReportAllocs()
	m := &meter{b: b, n: n, cpu: cpuTime(b), trips: n.Trips(), commands: n.Commands()}
	b.ResetTimer()
	return m
}

func (m *meter) stop() {
	m.b.StopTimer()
	per := func(x float64) float64 { return x / float64(m.b.N) }
	m.b.ReportMetric(per(float64(cpuTime(m.b)-m.cpu)), "cpu-ns/op")
	m.b.ReportMetric(per(float64(m.n.Trips()-m.trips)), "trips/op")
	m.b.ReportMetric(per(float64(m.n.Commands()-m.commands)), "cmds/op")
}

// BenchmarkAssignFlow assigns new flows of chain3 as keel-ingress asks for them, after the
// first has attached an instance.
func BenchmarkAssignFlow(b *testing.B) {
	srv, _, n := flowRack(b)
	assign(b, srv, 0)
	m := startMeter(b, n)
	for i := 1; i <= b.N; i++ {
		assign(b, srv, i)
	}
	m.stop()
}

// BenchmarkReleaseFlow releases assigned flows of chain3 as their ToR rules expire.
func BenchmarkReleaseFlow(b *testing.B) {
	srv, _, n := flowRack(b)
	for i := 0; i <= b.N; i++ {
		assign(b, srv, i)
	}
	m := startMeter(b, n)
	for i := 1; i <= b.N; i++ {
		r, err := srv.ReleaseFlow(context.Background(), &pb.ReleaseFlowRequest{Flow: tuple(i)})
		if err != nil || !r.Released {
			b.Fatalf("release %d: %v %v", i, r, err)
		}
	}
	m.stop()
}
