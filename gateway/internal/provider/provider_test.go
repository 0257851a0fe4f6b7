// SPDX-License-Identifier: Apache-2.0

package provider

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	"github.com/keel-nfv/keel/internal/dockerlog"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/types"
)

// fakeRuntime is a container engine that has the images in images and runs nothing; it
// records the replicas Apply asks for, which are ready when ready is set.
type fakeRuntime struct {
	images   map[string]bool
	ready    bool
	mu       sync.Mutex
	replicas map[string]int
	applies  int
}

func (r *fakeRuntime) CheckImage(_ context.Context, image string) error {
	if !r.images[image] {
		return fmt.Errorf("%s: image not found", image)
	}
	return nil
}
func (r *fakeRuntime) Apply(_ context.Context, fd *types.FunctionDeployment, n int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.replicas == nil {
		r.replicas = map[string]int{}
	}
	r.replicas[fd.Service] = n
	r.applies++
	return nil
}
func (r *fakeRuntime) Remove(context.Context, string) error { return nil }
func (r *fakeRuntime) Running(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ready {
		return 0
	}
	return r.replicas[name]
}
func (r *fakeRuntime) Await(ctx context.Context, name string) error {
	for r.Running(name) == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}
func (r *fakeRuntime) Resolve(string) (url.URL, error)                            { return url.URL{}, errors.New("none") }
func (r *fakeRuntime) Orphans(context.Context, map[string]bool) ([]string, error) { return nil, nil }
func (r *fakeRuntime) Logs(context.Context, string, dockerlog.Options) (<-chan dockerlog.Line, error) {
	return nil, errors.New("none")
}

// oneSubgroup places every chain's NFs on one server subgroup of `cores` cores; the NFs are
// the chain annotation's words between arrows, each run from the library image.
type oneSubgroup struct{ cores int }

func (v oneSubgroup) Validate(_ context.Context, fd *types.FunctionDeployment, _ []*chain.Chain, _ []chain.TenantNF) (*chain.Chain, map[string]chain.Placement, error) {
	spec := (*fd.Annotations)[chain.AnnotationChain]
	c := &chain.Chain{Name: fd.Service, Spec: spec, Filter: (*fd.Annotations)[chain.AnnotationFilter]}
	var placed []chain.PlacedNF
	for _, nf := range strings.Split(spec, "->") {
		nf = strings.ToLower(strings.TrimSpace(nf))
		c.NFs = append(c.NFs, nf)
		c.NFConfigs = append(c.NFConfigs, chain.Member{Name: nf, NF: nf, Image: chain.LibraryImage})
		placed = append(placed, chain.PlacedNF{Name: nf, NF: nf, Target: "server", Server: "local"})
	}
	pl := chain.Placement{NFs: placed, Subgroups: []chain.Subgroup{{Server: "local", Cores: v.cores, NFs: c.NFs}}}
	c.SetPlacement(pl)
	return c, map[string]chain.Placement{fd.Service: pl}, nil
}

func newProvider(t *testing.T, cores int) *Provider {
	t.Helper()
	return &Provider{Store: testredis.Store(t), Validator: oneSubgroup{cores: cores}, Metrics: metrics.New(),
		Hub: events.NewHub(), PoolSize: 2, Runtime: &fakeRuntime{images: map[string]bool{"keel/nf-ttlguard:latest": true}}}
}

func chainDeployment(name, spec, image string) *types.FunctionDeployment {
	return &types.FunctionDeployment{Service: name, Image: image,
		Labels:      &map[string]string{chain.LabelKind: chain.KindChain},
		Annotations: &map[string]string{chain.AnnotationChain: spec, chain.AnnotationFilter: "dst net 198.18.3.0/24"}}
}

func instances(t *testing.T, p *Provider, name string) map[string]*store.Instance {
	t.Helper()
	insts, err := p.Store.Instances(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*store.Instance{}
	for _, in := range insts {
		out[in.ID] = in
	}
	return out
}

// attach marks an instance attached on core 1 with one flow, as the controller does.
func attach(t *testing.T, p *Provider, in *store.Instance, port uint16) {
	t.Helper()
	ctx := context.Background()
	f := &store.Flow{Key: fmt.Sprintf("6 198.18.0.1:%d 198.18.3.1:80", port), Chain: in.Chain}
	var err error
	if in.State != store.Attached {
		err = p.Attach(ctx, in, 1, in.Batch, "attached by the test", f)
	} else {
		err = p.Store.AssignFlow(ctx, f, in, false)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func Test_Deploy_refuses_a_packet_function_whose_image_is_missing_as_for_a_normal_function(t *testing.T) {
	p := newProvider(t, 1)
	ctx := context.Background()
	nf := func(image string) *types.FunctionDeployment {
		return &types.FunctionDeployment{Service: "ttlguard", Image: image, Labels: &map[string]string{chain.LabelKind: chain.KindNF}}
	}
	err := p.Deploy(ctx, nf("keel/nf-typo:latest"), false)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "image: keel/nf-typo:latest: image not found") {
		t.Fatalf("deploy with a missing image: %v, want invalid naming the image", err)
	}
	if _, err := store.Get[chain.Function](ctx, p.Store, "ttlguard"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused packet function was stored: %v", err)
	}
	if err := p.Deploy(ctx, nf("keel/nf-ttlguard:latest"), false); err != nil {
		t.Fatalf("deploy with a present image: %v", err)
	}
	normal := &types.FunctionDeployment{Service: "web", Image: "keel/nf-typo:latest"}
	if err := p.Deploy(ctx, normal, false); err == nil || !strings.Contains(err.Error(), "image: keel/nf-typo:latest: image not found") {
		t.Fatalf("a normal function's message differs: %v", err)
	}
}

func Test_Deploy_accepts_keel_chain_as_a_chains_image_and_refuses_another(t *testing.T) {
	p := newProvider(t, 1)
	ctx := context.Background()
	err := p.Deploy(ctx, chainDeployment("chain3", "ACL -> NAT", "keel/hello:latest"), false)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `image: "keel/hello:latest" is not keel's chain runtime`) {
		t.Fatalf("chain with a normal function's image: %v", err)
	}
	if fs, _ := store.List[chain.Function](ctx, p.Store); len(fs) != 0 {
		t.Fatalf("the refused chain left %d function(s)", len(fs))
	}
	for i, image := range []string{"keel/chain:latest", "keel/chain", ""} {
		name := fmt.Sprintf("c%d", i)
		if err := p.Deploy(ctx, chainDeployment(name, "ACL -> NAT", image), false); err != nil {
			t.Errorf("image %q: %v", image, err)
		}
	}
}

func Test_Redeploy_with_a_new_spec_drains_attached_instances_and_removes_idle_ones(t *testing.T) {
	p := newProvider(t, 1)
	p.DrainTimeout = time.Minute
	ctx := context.Background()
	if err := p.Deploy(ctx, chainDeployment("chain3", "ACL -> NAT", "keel/chain:latest"), false); err != nil {
		t.Fatal(err)
	}
	before := instances(t, p, "chain3")
	if len(before) != 2 {
		t.Fatalf("deploy made %d instances, want the pool of 2", len(before))
	}
	attach(t, p, before["chain3/0"], 4000)
	events, cancel := p.Hub.Subscribe()
	defer cancel()

	if err := p.Deploy(ctx, chainDeployment("chain3", "ACL -> NAT -> Monitor", "keel/chain:latest"), true); err != nil {
		t.Fatal(err)
	}
	after := instances(t, p, "chain3")
	old := after["chain3/0"]
	if old == nil || !old.Draining || old.State != store.Attached || old.Flows != 1 || old.Runs == nil || old.Runs.Spec != "ACL -> NAT" {
		t.Fatalf("the attached instance with a flow: %+v, want it draining on the old spec", old)
	}
	if d := time.Until(old.DrainUntil); d < 50*time.Second || d > time.Minute {
		t.Fatalf("drain deadline in %s, want about a minute", d)
	}
	// chain3/1 was idle: removed at once (its event below); the new pool takes the next numbers.
	if after["chain3/1"] == nil || after["chain3/2"] == nil || after["chain3/1"].Draining || after["chain3/2"].State != store.Pooled ||
		len(after) != 3 {
		t.Fatalf("instances after the update: %v, want chain3/0 draining and a new pool chain3/1, chain3/2", keys(after))
	}
	if fl, _ := p.Store.Flows(ctx, "chain3"); len(fl) != 1 || fl[0].Instance != "chain3/0" {
		t.Fatalf("the live flow did not stay on its instance: %+v", fl)
	}
	// The agents hear that chain3/0 keeps the old version before they hear of the new one:
	// a pass in between would otherwise rebuild its containers under its flows.
	var kinds []string
	for len(events) > 0 {
		ev := <-events
		kinds = append(kinds, ev.Kind.String()+" "+ev.GetInstance().GetId())
		if ev.Kind == pb.WatchEvent_INSTANCE_CHANGED && ev.Instance.Id == "chain3/0" &&
			(!ev.Instance.Draining || ev.Instance.Runs.GetSpec() != "ACL -> NAT") {
			t.Fatalf("chain3/0's event does not carry its draining version: %v", ev.Instance)
		}
	}
	if len(kinds) < 3 || kinds[0] != "INSTANCE_CHANGED chain3/0" || kinds[1] != "INSTANCE_REMOVED chain3/1" || kinds[2] != "CHAIN_ADDED " {
		t.Fatalf("events %v, want chain3/0 draining, chain3/1 removed, then the new chain", kinds)
	}

	// A redeploy that changes nothing the instances run (a label; the same stack.yml again)
	// keeps every instance: none is removed (a new pool would reuse the old ids).
	for what, label := range map[string]string{"a label change": "blue", "the same deployment": ""} {
		fd := chainDeployment("chain3", "ACL -> NAT -> Monitor", "keel/chain:latest")
		if label != "" {
			(*fd.Labels)["team"] = label
		}
		events, cancel := p.Hub.Subscribe()
		if err := p.Deploy(ctx, fd, true); err != nil {
			t.Fatal(err)
		}
		cancel()
		for len(events) > 0 {
			if ev := <-events; ev.Kind == pb.WatchEvent_INSTANCE_REMOVED {
				t.Fatalf("%s removed instance %s", what, ev.Instance.GetId())
			}
		}
		if got := instances(t, p, "chain3"); len(got) != 3 || got["chain3/2"] == nil || !got["chain3/0"].Draining {
			t.Fatalf("%s replaced instances: %v", what, keys(got))
		}
	}

	// The controller's end of the drain removes chain3/0 with its flow.
	if err := p.Remove(ctx, old); err != nil {
		t.Fatalf("Remove = %v", err)
	}
	if fl, _ := p.Store.Flows(ctx, "chain3"); len(fl) != 0 {
		t.Fatalf("flows of the removed instance are left: %+v", fl)
	}
	if err := p.Remove(ctx, old); !errors.Is(err, store.ErrGone) {
		t.Fatalf("Remove of a removed instance = %v, want store.ErrGone", err)
	}
}

func keys(m map[string]*store.Instance) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func Test_Scale_of_a_chain_is_checked_against_the_racks_cores_and_reports_what_is_there(t *testing.T) {
	p := newProvider(t, 1)
	p.RackCores = 2
	p.PoolSize = 1
	ctx := context.Background()
	for _, name := range []string{"chain2", "chain3"} {
		if err := p.Deploy(ctx, chainDeployment(name, "ACL -> NAT", "keel/chain:latest"), false); err != nil {
			t.Fatal(err)
		}
	}
	err := p.Scale(ctx, "chain3", 5)
	want := "replicas: 5 instance(s) of chain chain3 need 5 server core(s) (1 each), but 1 of the rack's 2 are free: " +
		"the other chains hold 1 (chain2 1); nothing changed"
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("scale chain3 to 5 on 2 cores: %v\nwant %q", err, want)
	}
	if got := instances(t, p, "chain3"); len(got) != 1 {
		t.Fatalf("the refused scale changed the instances: %v", keys(got))
	}
	if f, _ := store.Get[chain.Function](ctx, p.Store, "chain3"); f.Replicas != 1 {
		t.Fatalf("the refused scale changed replicas to %d", f.Replicas)
	}

	// Scaling down removes idle instances only: the stored count is what is left.
	p.RackCores = 0
	if err := p.Scale(ctx, "chain3", 3); err != nil {
		t.Fatal(err)
	}
	insts := instances(t, p, "chain3")
	attach(t, p, insts["chain3/0"], 4000)
	attach(t, p, insts["chain3/1"], 4001)
	if err := p.Scale(ctx, "chain3", 1); err != nil {
		t.Fatal(err)
	}
	f, _ := store.Get[chain.Function](ctx, p.Store, "chain3")
	got := instances(t, p, "chain3")
	if f.Replicas != 2 || len(got) != 2 || got["chain3/2"] != nil {
		t.Fatalf("scale to 1 with 2 attached: replicas %d, instances %v; want 2 (both attached, the idle one removed)", f.Replicas, keys(got))
	}
}

func Test_Status_counts_as_available_only_instances_their_agent_reported_running_lately(t *testing.T) {
	p := newProvider(t, 1)
	ctx := context.Background()
	if err := p.Deploy(ctx, chainDeployment("chain3", "ACL -> NAT", "keel/chain:latest"), false); err != nil {
		t.Fatal(err)
	}
	insts := instances(t, p, "chain3")
	fresh, stale := insts["chain3/0"], insts["chain3/1"]
	attach(t, p, fresh, 4000)
	attach(t, p, stale, 4001)
	fresh.Phase, fresh.ReportedAt = "ready", time.Now()
	stale.Phase, stale.ReportedAt = "ready", time.Now().Add(-2*DefaultReportStale)
	for _, in := range []*store.Instance{fresh, stale} {
		if err := p.Store.UpdateStatus(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	st, err := p.Status(ctx, "chain3")
	if err != nil {
		t.Fatal(err)
	}
	if st.Replicas != 2 || st.AvailableReplicas != 1 {
		t.Fatalf("replicas %d, available %d; want 2 attached, 1 reported running lately", st.Replicas, st.AvailableReplicas)
	}
	if desc := (*st.Annotations)["com.keel.instances"]; !strings.Contains(desc, "chain3/1 attached") || !strings.Contains(desc, "phase=ready (no report for 1m0s)") {
		t.Fatalf("describe does not say the report is old: %s", desc)
	}
}

// A name as OpenFaaS clients write it, NAME.NAMESPACE, is read in the namespace the provider
// serves (--namespace), not only in openfaas-fn.
func Test_names_drop_the_served_namespace(t *testing.T) {
	p := &Provider{Store: testredis.Store(t), Namespace: "fns"}
	if got := p.trimNamespace("hello.fns"); got != "hello" {
		t.Fatalf("hello.fns: %q", got)
	}
	if got := p.trimNamespace("hello.openfaas-fn"); got != "hello.openfaas-fn" {
		t.Fatalf("another namespace's suffix must stay: %q", got)
	}
	err := p.CheckLogs(context.Background(), "ghost.fns")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "function ghost") || strings.Contains(err.Error(), "ghost.fns") {
		t.Fatalf("logs of ghost.fns: %v", err)
	}
}

func Test_a_chain_keeps_one_reinject_VLAN_for_its_life(t *testing.T) {
	p := newProvider(t, 1)
	ctx := context.Background()
	inUse := func() []uint32 {
		t.Helper()
		v, err := p.Store.VLANsInUse(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	reinject := func() uint32 {
		t.Helper()
		f, err := store.Get[chain.Function](ctx, p.Store, "chain3")
		if err != nil {
			t.Fatal(err)
		}
		return f.Chain.ReinjectVLAN
	}
	if err := p.Deploy(ctx, chainDeployment("chain3", "ACL -> NAT", "keel/chain:latest"), false); err != nil {
		t.Fatal(err)
	}
	v := reinject()
	if v < 100 || v > 4092 {
		t.Fatalf("reinject VLAN %d, want one of the instance VLANs' range 100..4092", v)
	}
	taken := map[uint32]bool{v: true}
	for id, in := range instances(t, p, "chain3") {
		if taken[in.VLAN] {
			t.Fatalf("instance %s has VLAN %d, taken already", id, in.VLAN)
		}
		taken[in.VLAN] = true
	}
	if got := inUse(); len(got) != len(taken) {
		t.Fatalf("VLANs in use %v, want the chain's %d and its instances'", got, v)
	}

	// A redeploy keeps it, and the agents and the ToR hear it with the chain.
	events, cancel := p.Hub.Subscribe()
	defer cancel()
	if err := p.Deploy(ctx, chainDeployment("chain3", "ACL -> NAT -> Monitor", "keel/chain:latest"), true); err != nil {
		t.Fatal(err)
	}
	if got := reinject(); got != v {
		t.Fatalf("redeploy: reinject VLAN %d, was %d", got, v)
	}
	heard := false
	for len(events) > 0 {
		if ev := <-events; ev.Kind == pb.WatchEvent_CHAIN_ADDED {
			heard = true
			if ev.Chain.ReinjectVlan != v {
				t.Fatalf("CHAIN_ADDED carries reinject VLAN %d, want %d", ev.Chain.ReinjectVlan, v)
			}
		}
	}
	if !heard {
		t.Fatal("no CHAIN_ADDED for the redeploy")
	}

	// A refused deploy takes none.
	before := inUse()
	if err := p.Deploy(ctx, chainDeployment("other", "ACL", "keel/hello:latest"), false); !errors.Is(err, ErrInvalid) {
		t.Fatalf("deploy with a normal function's image: %v", err)
	}
	if got := inUse(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("a refused deploy changed the VLANs in use: %v, was %v", got, before)
	}

	// faas-cli remove gives back every VLAN of the chain, its own included.
	if err := p.Delete(ctx, "chain3"); err != nil {
		t.Fatal(err)
	}
	if got := inUse(); len(got) != 0 {
		t.Fatalf("VLANs still in use after the chain's removal: %v", got)
	}
}
