// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/types"
)

// flowRack is the embedded rack as make up deploys it, in the store: worker local with managed
// core 1; chain1 on the switch only, chain2 (ACL on the switch, NAT on the server) with one
// attached and one idle instance, chain3 (ACL -> NAT on the server) with two idle instances,
// all ready; a normal function and a packet function beside them. The store reaches Redis
// over loopback TCP, or its Unix socket if unix; the counter counts its round trips.
func flowRack(tb testing.TB, unix bool) (*Server, *store.Store, *testredis.Counter) {
	tb.Helper()
	redis := testredis.Start(tb)
	addr := redis.Addr
	if unix {
		addr = redis.Socket
	}
	st := redis.StoreAt(tb, addr)
	n := testredis.Count(st)
	ctx := context.Background()
	hub := events.NewHub()
	srv := newServer(st, hub, &provider.Provider{Store: st, Hub: hub, Metrics: metrics.New()})
	if err := st.PutWorker(ctx, &store.Worker{Name: "local", Address: "127.0.0.1:50061", Cores: 2, CoreIDs: []uint32{1},
		VFPorts: map[uint32]string{2: "vf0", 3: "vf1", 4: "vf2", 5: "vf3"}}); err != nil {
		tb.Fatal(err)
	}
	put := func(f *chain.Function) {
		if err := st.Put(ctx, f); err != nil {
			tb.Fatal(err)
		}
	}
	put(&chain.Function{Deployment: types.FunctionDeployment{Service: "hello", Image: "keel/hello:latest",
		Labels: &map[string]string{"com.openfaas.scale.min": "1"}}, Replicas: 1})
	put(&chain.Function{Kind: chain.KindNF, Deployment: types.FunctionDeployment{Service: "ttlguard", Image: "keel/nf-ttlguard:latest",
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
			c.ReinjectVLAN = 4000 + uint32(len(name)) // the deploy's allocation, as the provider makes it
		}
		put(&chain.Function{Kind: chain.KindChain, Chain: c, Replicas: replicas, Deployment: types.FunctionDeployment{
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

// overTCPAndUnix runs bench with the store on Redis's loopback TCP port (keel-gateway's
// default, --redis 127.0.0.1:6379) and on its Unix socket (--redis unix:PATH).
func overTCPAndUnix(b *testing.B, bench func(b *testing.B, unix bool)) {
	b.Run("tcp", func(b *testing.B) { bench(b, false) })
	b.Run("unix", func(b *testing.B) { bench(b, true) })
}

// BenchmarkAssignFlow assigns new flows of chain3 as keel-ingress asks for them, after the
// first has attached an instance.
func BenchmarkAssignFlow(b *testing.B) {
	overTCPAndUnix(b, func(b *testing.B, unix bool) {
		srv, _, n := flowRack(b, unix)
		assign(b, srv, 0)
		m := startMeter(b, n)
		for i := 1; i <= b.N; i++ {
			assign(b, srv, i)
		}
		m.stop()
	})
}

// BenchmarkReleaseFlow releases assigned flows of chain3 as their ToR rules expire.
func BenchmarkReleaseFlow(b *testing.B) {
	overTCPAndUnix(b, func(b *testing.B, unix bool) {
		srv, _, n := flowRack(b, unix)
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
	})
}

// trips returns the Redis round trips call makes.
func trips(n *testredis.Counter, call func()) int64 {
	before := n.Trips()
	call()
	return n.Trips() - before
}

// A new flow costs the store one Redis round trip (the script that records the flow, its
// instance and the chain's invocation), a release one, a retried flow none, and neither
// decodes a function record: the controller's index of the chains stays as it was.
func Test_AssignFlow_and_ReleaseFlow_make_one_Redis_round_trip_each(t *testing.T) {
	srv, st, n := flowRack(t, false)
	ctx := context.Background()
	var logged []string
	srv.Logf = func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }
	watch, cancel := srv.Hub.Subscribe()
	defer cancel()
	// A flow of chain2 goes to its attached instance; it reads Redis into the store's cache
	// and builds the index.
	a, err := srv.AssignFlow(ctx, &pb.AssignFlowRequest{Flow: &pb.FiveTuple{SrcIp: "198.18.0.1", DstIp: "198.18.2.1",
		SrcPort: 1024, DstPort: 80, Proto: 6}})
	if err != nil || a.GetInstance().GetId() != "chain2/0" {
		t.Fatalf("a flow of chain2: %v, %v, want it on chain2/0", a, err)
	}
	ix := srv.index.Load()
	// chain3's first flow attaches an idle instance (a scale decision, told to the watchers
	// and logged): still one round trip.
	if got := trips(n, func() { a = assign(t, srv, 0) }); got > 1 || a.Instance.Id != "chain3/0" || a.Instance.State != store.Attached {
		t.Fatalf("chain3's first flow: %v with %d round trips, want chain3/0 attached with 1", a, got)
	}
	if ev := <-watch; ev.Kind != pb.WatchEvent_INSTANCE_CHANGED || ev.Instance.Id != "chain3/0" || ev.Instance.State != store.Attached {
		t.Fatalf("watchers heard %v, want chain3/0 attached", ev)
	}
	lines := len(logged) // the chains' missing cost models, then the attach
	if lines == 0 || !strings.HasPrefix(logged[lines-1], "scale-out: chain chain3 instance chain3/0 attached on worker local core 1") {
		t.Fatalf("logged %q, want the attach last", logged)
	}
	for i := 1; i <= 20; i++ {
		if got := trips(n, func() { assign(t, srv, i) }); got > 1 {
			t.Fatalf("AssignFlow of a new flow made %d round trips, want 1", got)
		}
	}
	if got := trips(n, func() { assign(t, srv, 7) }); got != 0 {
		t.Fatalf("AssignFlow of a flow already assigned (the ingress retries) made %d round trips, want 0", got)
	}
	if len(watch) != 0 || len(logged) != lines {
		t.Fatalf("flows to an attached instance were told to watchers (%d events) or logged (%q)", len(watch), logged)
	}
	got := trips(n, func() {
		if a, err := srv.AssignFlow(ctx, &pb.AssignFlowRequest{Flow: &pb.FiveTuple{SrcIp: "198.18.0.1", DstIp: "198.18.1.1",
			SrcPort: 1024, DstPort: 80, Proto: 6}}); err != nil || !a.SwitchOnly || a.ReinjectVlan != 4006 {
			t.Fatalf("a flow of chain1: %v, %v, want it switch-only with chain1's reinject VLAN 4006", a, err)
		}
	})
	if got > 1 {
		t.Fatalf("AssignFlow of a switch-only chain's flow made %d round trips, want 1", got)
	}
	for i := 1; i <= 20; i++ {
		got := trips(n, func() {
			if r, err := srv.ReleaseFlow(ctx, &pb.ReleaseFlowRequest{Flow: tuple(i)}); err != nil || !r.Released {
				t.Fatalf("release %d: %v, %v", i, r, err)
			}
		})
		if got > 1 {
			t.Fatalf("ReleaseFlow made %d round trips, want 1", got)
		}
	}
	if srv.index.Load() != ix {
		t.Fatal("the index of the chains was rebuilt, though no function changed")
	}
	if calls, _ := st.Invocations(ctx, "chain3"); calls != 21 {
		t.Fatalf("chain3 has %d invocations, want one per flow assigned: 21", calls)
	}
	if in, _ := st.Instance(ctx, "chain3", "chain3/0"); in.Flows != 1 || in.State != store.Attached {
		t.Fatalf("chain3/0 after 21 flows and 20 releases: %+v, want attached with 1 flow", in)
	}
}

// onServer places every NF of a chain (the spec's words between arrows) on worker local, in
// one subgroup of one core.
type onServer struct{}

func (onServer) Validate(_ context.Context, fd *types.FunctionDeployment, _ []*chain.Chain, _ []chain.TenantNF) (*chain.Chain, map[string]chain.Placement, error) {
	ann := *fd.Annotations
	c := &chain.Chain{Name: fd.Service, Spec: ann[chain.AnnotationChain], Filter: ann[chain.AnnotationFilter]}
	var placed []chain.PlacedNF
	for _, nf := range strings.Split(c.Spec, "->") {
		nf = strings.ToLower(strings.TrimSpace(nf))
		c.NFs = append(c.NFs, nf)
		c.NFConfigs = append(c.NFConfigs, chain.Member{Name: nf, NF: nf, Image: chain.LibraryImage})
		placed = append(placed, chain.PlacedNF{Name: nf, NF: nf, Target: "server", Server: "local"})
	}
	pl := chain.Placement{NFs: placed, Subgroups: []chain.Subgroup{{Server: "local", Cores: 1, NFs: c.NFs}}}
	c.SetPlacement(pl)
	return c, map[string]chain.Placement{fd.Service: pl}, nil
}

func chainDeployment(spec, filter string) *types.FunctionDeployment {
	return &types.FunctionDeployment{Service: "chain3", Labels: &map[string]string{chain.LabelKind: chain.KindChain},
		Annotations: &map[string]string{chain.AnnotationChain: spec, chain.AnnotationFilter: filter}}
}

// storeContents is what a store reads of chain3 and of the flows, as JSON.
func storeContents(t *testing.T, st *store.Store) string {
	t.Helper()
	ctx := context.Background()
	fns, err1 := store.List[chain.Function](ctx, st)
	insts, err2 := st.Instances(ctx, "chain3")
	flows, err3 := st.Flows(ctx, "")
	calls, err4 := st.Invocations(ctx, "chain3")
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal([]any{fns, insts, flows, calls})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The controller's reads come from the store's cache and its index of the chains: each
// change of the deployment between flows (faas-cli deploy, scale, deploy of a new version,
// remove) shows in the next flow's assignment, and the cache reads what Redis holds.
func Test_flows_follow_deploy_scale_redeploy_and_remove(t *testing.T) {
	redis := testredis.Start(t)
	st := redis.Store(t)
	ctx := context.Background()
	hub := events.NewHub()
	p := &provider.Provider{Store: st, Validator: onServer{}, Metrics: metrics.New(), Hub: hub, PoolSize: 2, RackCores: 8}
	srv := newServer(st, hub, p)
	if _, err := srv.RegisterWorker(ctx, &pb.RegisterWorkerRequest{Worker: "local", CoreIds: []uint32{1}}); err != nil {
		t.Fatal(err)
	}
	flow := func(dst string, port uint32) *pb.FiveTuple {
		return &pb.FiveTuple{SrcIp: "198.18.0.1", DstIp: dst, SrcPort: port, DstPort: 80, Proto: 6}
	}
	assignTo := func(step string, ft *pb.FiveTuple, want string) {
		t.Helper()
		a, err := srv.AssignFlow(ctx, &pb.AssignFlowRequest{Flow: ft, Chain: "chain3"})
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if got := a.GetInstance().GetId(); got != want || a.Assigned != (want != "") {
			t.Fatalf("%s: the flow went to %q (%s), want %q", step, got, a.Reason, want)
		}
		if got, want := storeContents(t, st), storeContents(t, redis.Store(t)); got != want {
			t.Fatalf("%s: the cache reads\n%s\nbut Redis holds\n%s", step, got, want)
		}
	}

	if err := p.Deploy(ctx, chainDeployment("NAT", "dst net 198.18.3.0/24"), false); err != nil {
		t.Fatal(err)
	}
	assignTo("deploy", flow("198.18.3.1", 4000), "chain3/0")
	if err := p.Scale(ctx, "chain3", 3); err != nil {
		t.Fatal(err)
	}
	if insts, _ := st.Instances(ctx, "chain3"); len(insts) != 3 {
		t.Fatalf("scale to 3: %d instances", len(insts))
	}
	assignTo("scale", flow("198.18.3.1", 4001), "chain3/0")
	// A new version on another filter: chain3/0 drains with its flows and takes no new one;
	// the old filter matches nothing any more.
	if err := p.Deploy(ctx, chainDeployment("ACL -> NAT", "dst net 198.18.4.0/24"), true); err != nil {
		t.Fatal(err)
	}
	assignTo("redeploy, old filter", flow("198.18.3.1", 4002), "")
	// the idle chain3/1 and chain3/2 went at once; the new version's pool took their numbers
	assignTo("redeploy, new filter", flow("198.18.4.1", 4003), "chain3/1")
	if in, _ := st.Instance(ctx, "chain3", "chain3/0"); in == nil || !in.Draining || in.Flows != 2 {
		t.Fatalf("chain3/0 after the redeploy: %+v, want it draining with its 2 flows", in)
	}
	if in, _ := st.Instance(ctx, "chain3", "chain3/1"); in == nil || in.Draining || in.Flows != 1 {
		t.Fatalf("chain3/1 after the redeploy: %+v, want the new version's with the new flow", in)
	}
	if r, err := srv.ReleaseFlow(ctx, &pb.ReleaseFlowRequest{Flow: flow("198.18.3.1", 4000)}); err != nil || !r.Released {
		t.Fatalf("release: %v, %v", r, err)
	}
	if in, _ := st.Instance(ctx, "chain3", "chain3/0"); in.Flows != 1 {
		t.Fatalf("chain3/0 after a release: %d flows, want 1", in.Flows)
	}
	if err := p.Delete(ctx, "chain3"); err != nil {
		t.Fatal(err)
	}
	assignTo("remove", flow("198.18.4.1", 4004), "")
	if r, err := srv.ReleaseFlow(ctx, &pb.ReleaseFlowRequest{Flow: flow("198.18.3.1", 4001)}); err != nil || r.Released {
		t.Fatalf("release of a flow of the removed chain: %v, %v, want nothing released", r, err)
	}
	if fl, _ := st.Flows(ctx, ""); len(fl) != 0 {
		t.Fatalf("flows left after the remove: %+v", fl)
	}
}

func syncMapLen(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

// Test_index_forgets_filters_and_models_of_old_versions_and_removed_chains: redeploying a
// chain with a new filter and spec, over and over, keeps one compiled filter and one model
// per deployed chain; a removed chain's go.
func Test_index_forgets_filters_and_models_of_old_versions_and_removed_chains(t *testing.T) {
	srv, st, _ := flowRack(t, false)
	ctx := context.Background()
	if _, err := srv.chains(ctx); err != nil {
		t.Fatal(err)
	}
	filters, models := syncMapLen(&srv.filters), syncMapLen(&srv.models)
	if filters != 3 || models != 2 {
		t.Fatalf("3 chains (2 with server NFs): %d filters, %d models", filters, models)
	}
	for i := 0; i < 20; i++ {
		f, err := store.Get[chain.Function](ctx, st, "chain3")
		if err != nil {
			t.Fatal(err)
		}
		f.Chain.Filter = fmt.Sprintf("dst net 198.18.3.0/24 and udp port %d", 1000+i)
		f.Chain.Spec = fmt.Sprintf("ACL -> NAT # version %d", i)
		if err := st.Put(ctx, f); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.chains(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if f, m := syncMapLen(&srv.filters), syncMapLen(&srv.models); f != filters || m != models {
		t.Fatalf("after 20 redeploys: %d filters, %d models; want %d and %d", f, m, filters, models)
	}
	if err := st.Delete(ctx, "chain3"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.chains(ctx); err != nil {
		t.Fatal(err)
	}
	if f, m := syncMapLen(&srv.filters), syncMapLen(&srv.models); f != 2 || m != 1 {
		t.Fatalf("after chain3's removal: %d filters, %d models; want 2 and 1", f, m)
	}
}

// A batch of FlowRemoved events (ReleaseMany) costs one Redis round trip however many flows
// it carries; each key is reported released once (a repeat and an unknown key are not), the
// switch-only flow included, and the instance is left with the flows not in the batch.
func Test_ReleaseMany_releases_a_batch_in_one_Redis_round_trip(t *testing.T) {
	srv, st, n := flowRack(t, false)
	ctx := context.Background()
	for i := 0; i < 12; i++ {
		assign(t, srv, i)
	}
	sw := &pb.FiveTuple{SrcIp: "198.18.0.1", DstIp: "198.18.1.1", SrcPort: 1024, DstPort: 80, Proto: 6}
	if a, err := srv.AssignFlow(ctx, &pb.AssignFlowRequest{Flow: sw}); err != nil || !a.SwitchOnly {
		t.Fatalf("a flow of chain1: %v, %v", a, err)
	}
	// The script's first run loads it into Redis (EVALSHA, then EVAL): a round trip more, once.
	if got, err := srv.ReleaseMany(ctx, []string{FlowKey(flowOf(tuple(11)))}); err != nil || !got[0] {
		t.Fatalf("releasing flow 11: %v, %v", got, err)
	}
	keys := []string{FlowKey(flowOf(sw))}
	for i := 0; i < 10; i++ {
		keys = append(keys, FlowKey(flowOf(tuple(i))))
	}
	keys = append(keys, FlowKey(flowOf(tuple(3))), FlowKey(flowOf(tuple(99))))
	var got []bool
	var err error
	if rt := trips(n, func() { got, err = srv.ReleaseMany(ctx, keys) }); err != nil || rt != 1 {
		t.Fatalf("ReleaseMany of %d keys: %v with %d round trips, want 1", len(keys), err, rt)
	}
	want := []bool{true, true, true, true, true, true, true, true, true, true, true, false, false}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("released %v, want %v", got, want)
	}
	if in, _ := st.Instance(ctx, "chain3", "chain3/0"); in.Flows != 1 {
		t.Fatalf("chain3/0 after 12 flows and 11 released: %d flows, want 1", in.Flows)
	}
	for i, k := range keys[:11] {
		if f, _ := st.Flow(ctx, k); f != nil {
			t.Fatalf("flow %d (%s) is still assigned", i, k)
		}
	}
	if again, err := srv.ReleaseMany(ctx, keys[:3]); err != nil || fmt.Sprint(again) != "[false false false]" {
		t.Fatalf("a repeat of the batch: %v, %v, want nothing released", again, err)
	}
}
