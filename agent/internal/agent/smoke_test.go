// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-nfv/keel/agent/internal/runtime"
	"github.com/keel-nfv/keel/agent/internal/vf"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// fakeControl is a gateway that serves one worker a fixed snapshot, then the events the
// test pushes, and records the stats it receives.
type fakeControl struct {
	pb.UnimplementedControlServer
	snapshot []*pb.WatchEvent
	live     chan *pb.WatchEvent
	mu       sync.Mutex
	stats    []*pb.InstanceStats
	regs     []*pb.RegisterWorkerRequest
}

func (f *fakeControl) RegisterWorker(_ context.Context, r *pb.RegisterWorkerRequest) (*pb.RegisterWorkerResponse, error) {
	f.mu.Lock()
	f.regs = append(f.regs, r)
	f.mu.Unlock()
	return &pb.RegisterWorkerResponse{}, nil
}

// push sends a live event and makes it part of the snapshot of later watches.
func (f *fakeControl) push(ev *pb.WatchEvent) {
	f.mu.Lock()
	kept := f.snapshot[:0]
	for _, old := range f.snapshot {
		if old.Instance == nil || old.Instance.Id != ev.Instance.Id {
			kept = append(kept, old)
		}
	}
	f.snapshot = kept
	if ev.Kind == pb.WatchEvent_INSTANCE_CHANGED {
		f.snapshot = append(f.snapshot, ev)
	}
	f.mu.Unlock()
	f.live <- ev
}

func (f *fakeControl) Watch(_ *pb.WatchRequest, s pb.Control_WatchServer) error {
	f.mu.Lock()
	snapshot := append([]*pb.WatchEvent(nil), f.snapshot...)
	f.mu.Unlock()
	for _, ev := range snapshot {
		if err := s.Send(ev); err != nil {
			return err
		}
	}
	if err := s.Send(&pb.WatchEvent{Kind: pb.WatchEvent_SYNCED}); err != nil {
		return err
	}
	for {
		select {
		case <-s.Context().Done():
			return nil
		case ev := <-f.live:
			if err := s.Send(ev); err != nil {
				return err
			}
		}
	}
}

func (f *fakeControl) StreamStats(s pb.Control_StreamStatsServer) error {
	for {
		m, err := s.Recv()
		if err == io.EOF {
			return s.SendAndClose(&pb.StreamStatsResponse{})
		}
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.stats = append(f.stats, m)
		f.mu.Unlock()
	}
}

// last returns the newest stats of instance that satisfy ok.
func (f *fakeControl) last(instance string, ok func(*pb.InstanceStats) bool) *pb.InstanceStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.stats) - 1; i >= 0; i-- {
		if f.stats[i].Instance == instance && ok(f.stats[i]) {
			return f.stats[i]
		}
	}
	return nil
}

func waitFor(t *testing.T, what string, timeout time.Duration, fn func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		if fn() {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s", what, timeout)
	return 0
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Test_agent_smoke_runs_an_ACL_NAT_instance drives the agent against a real dockerd, OVS
// and keel-coopsched (they must run; core 1 taken under flock /tmp/keel-core1.lock by the
// caller) with a fake gateway: the instance comes up pooled (sgroup detached), attaches,
// survives a killed NF container and an agent restart, and is removed without a trace.
// KEEL_AGENT_SMOKE=1 runs it; KEEL_OVSDB=unix:PATH, KEEL_COOPSCHED=unix:PATH (the admin
// socket), KEEL_COOPSCHED_NF=unix:PATH (the NF socket the containers get) and
// KEEL_NF_IMAGE pick the services and the image. keel-coopsched must map the thread ids
// a containerised keel-nf announces to the host's (NSpid).
func Test_agent_smoke_runs_an_ACL_NAT_instance(t *testing.T) {
	if os.Getenv("KEEL_AGENT_SMOKE") == "" || os.Geteuid() != 0 {
		t.Skip("a smoke run against real dockerd, OVS and keel-coopsched: KEEL_AGENT_SMOKE=1, as root")
	}
	env := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	ovsdb, coop, image := env("KEEL_OVSDB", ""), env("KEEL_COOPSCHED", "unix:/run/keel/coopsched.sock"), env("KEEL_NF_IMAGE", "keel/nf-base")
	coopNF := env("KEEL_COOPSCHED_NF", "unix:/run/keel/coopsched-nf.sock")
	const worker, id, vlan = "keelsm", "smoke/0", 3901
	group := GroupID(id)
	ch := &pb.Chain{Name: "smoke", Tenant: "smoketenant", MemoryBytes: 512 << 20, Members: []*pb.ChainMember{
		{Name: "ACL", Nf: "acl", Image: image, ConfigJson: `{"rules":[{"dst_ip":"198.18.0.0/15","drop":false}]}`},
		{Name: "NAT", Nf: "nat", Image: image, ConfigJson: `{"external_ip":"198.18.255.3","port_range":[10000,20000]}`}}}
	pooled := &pb.ChainInstance{Id: id, Chain: "smoke", Worker: worker, Vlan: vlan, State: "pooled", Core: -1}
	fc := &fakeControl{live: make(chan *pb.WatchEvent, 16), snapshot: []*pb.WatchEvent{
		{Kind: pb.WatchEvent_CHAIN_ADDED, Chain: ch}, {Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: pooled}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterControlServer(srv, fc)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	ctx := context.Background()
	docker, err := runtime.NewDocker(ctx, "unix:///var/run/docker.sock")
	if err != nil {
		t.Fatal(err)
	}
	gw, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	cs, _ := grpc.NewClient(coop, grpc.WithTransportCredentials(insecure.NewCredentials()))
	dir, err := os.MkdirTemp("/dev/shm", "keel-agent-smoke-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ovsv := vf.NewOVSVeth(ovsdb, "", worker)
	defer func() {
		ovsArgs := []string{"--if-exists", "del-br", ovsv.Bridge}
		if ovsdb != "" {
			ovsArgs = append([]string{"--db=" + ovsdb}, ovsArgs...)
		}
		_ = exec.Command("ovs-vsctl", ovsArgs...).Run()
		_ = exec.Command("ip", "link", "del", ovsv.Uplink).Run()
	}()
	rt, err := EnsureRT("/sys/fs/cgroup/cpu", 10000)
	if err != nil {
		t.Fatal(err)
	}
	rtus := int64(0)
	if rt {
		rtus = 10000
	}
	cfg := Config{SpecConfig: SpecConfig{Worker: worker, PktbufDir: dir, CoopschedNFSocket: strings.TrimPrefix(coopNF, "unix:"),
		Cpuset: "1", VFDriver: "af_packet", StatsIntervalMs: 200, RTRuntimeUs: rtus, WaitIfaceMs: 30000},
		Address: "127.0.0.1:0", Cores: []int32{1}, Heartbeat: 2 * time.Second, StatsInterval: 200 * time.Millisecond,
		Resync: 2 * time.Second, RegisterTimeout: 30 * time.Second, ReadyResetAfter: time.Minute, MaxParallel: 2}
	deps := Deps{Runtime: docker, VF: ovsv, Coopsched: pb.NewCoopschedClient(cs), Control: pb.NewControlClient(gw),
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	start := func() (context.CancelFunc, chan struct{}) {
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = New(cfg, deps).Run(actx); close(done) }()
		return cancel, done
	}
	cancel, done := start()
	defer func() { cancel(); <-done }()
	containers := func() []runtime.Container {
		l, err := docker.List(ctx, map[string]string{LabelInstance: id})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	defer func() {
		for _, c := range containers() {
			_ = docker.Remove(ctx, c.ID)
		}
		_ = exec.Command("ip", "link", "del", vf.VethName(vlan)).Run()
		_, _ = pb.NewCoopschedClient(cs).Unregister(ctx, &pb.UnregisterRequest{GroupId: group})
	}()
	group1 := func(state pb.GroupState) bool {
		st, err := pb.NewCoopschedClient(cs).Status(ctx, &pb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range st.Groups {
			if g.GroupId == group {
				return g.State == state
			}
		}
		return state == pb.GroupState_GROUP_STATE_UNSPECIFIED
	}
	ready := func(s *pb.InstanceStats) bool { return s.Phase == "ready" }

	d := waitFor(t, "pooled instance ready", 60*time.Second, func() bool { return fc.last(id, ready) != nil })
	t.Logf("deploy -> ready (sgroup formed, detached): %s", d.Round(time.Millisecond))
	if !group1(pb.GroupState_GROUP_STATE_DETACHED) {
		t.Fatal("the sgroup is not detached")
	}
	cs0 := containers()
	if len(cs0) != 2 {
		t.Fatalf("%d containers", len(cs0))
	}
	var mem int64
	for _, c := range cs0 {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory/docker", c.ID, "memory.usage_in_bytes"))
		if err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			mem += n
		}
	}
	t.Logf("memory of the pooled instance (2 containers, cgroup memory.usage_in_bytes): %.1f MiB", float64(mem)/(1<<20))
	if tag := strings.TrimSpace(sh(t, "ovs-vsctl", append(dbArgs(ovsdb), "get", "port", vf.VethName(vlan), "tag")...)); tag != strconv.Itoa(vlan) {
		t.Fatalf("VF port tag %q", tag)
	}

	attached := &pb.ChainInstance{Id: id, Chain: "smoke", Worker: worker, Vlan: vlan, State: "attached", Core: 1, Batch: 4}
	t0 := time.Now()
	fc.push(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: attached})
	waitFor(t, "attached on core 1", 10*time.Second, func() bool { return group1(pb.GroupState_GROUP_STATE_ATTACHED) })
	t.Logf("INSTANCE_CHANGED attached -> coopsched ATTACHED: %s", time.Since(t0).Round(time.Millisecond))
	waitFor(t, "stats say attached", 10*time.Second, func() bool {
		return fc.last(id, func(s *pb.InstanceStats) bool { return s.Attached && s.Core == 1 && s.Batch == 4 }) != nil
	})
	for _, c := range containers() {
		full, err := docker.Inspect(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", full.Pid))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
		if policy := f[38]; policy != "1" { // field 41: policy, 1 = SCHED_FIFO
			t.Fatalf("%s: the packet thread's policy is %s, not SCHED_FIFO", c.Name, policy)
		}
	}

	// The NAT's container dies: failed with the reason, rebuilt in place.
	for _, c := range cs0 {
		if c.Labels[LabelPosition] == "1" {
			_ = exec.Command("docker", "kill", c.ID).Run()
		}
	}
	waitFor(t, "reported failed", 20*time.Second, func() bool {
		return fc.last(id, func(s *pb.InstanceStats) bool { return s.Phase == "failed" }) != nil
	})
	f := fc.last(id, func(s *pb.InstanceStats) bool { return s.Phase == "failed" })
	t.Logf("failed: %s", f.Reason)
	d = waitFor(t, "rebuilt and attached again", 60*time.Second, func() bool {
		return fc.last(id, func(s *pb.InstanceStats) bool { return s.Phase == "ready" && s.Restarts == 1 && s.Attached }) != nil
	})
	t.Logf("failed -> rebuilt, ready and attached: %s", d.Round(time.Millisecond))

	// The agent restarts: everything is adopted, nothing restarted.
	before := map[string]bool{}
	for _, c := range containers() {
		before[c.ID] = true
	}
	cancel()
	<-done
	cancel, done = start()
	time.Sleep(3 * time.Second)
	for _, c := range containers() {
		if !before[c.ID] || !c.Running {
			t.Fatalf("agent restart touched container %s", c.Name)
		}
	}
	if len(containers()) != len(before) || !group1(pb.GroupState_GROUP_STATE_ATTACHED) {
		t.Fatal("agent restart changed the instance")
	}

	// Removal leaves nothing.
	fc.push(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_REMOVED, Instance: attached})
	d = waitFor(t, "removed", 30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, group))
		return len(containers()) == 0 && os.IsNotExist(err) && group1(pb.GroupState_GROUP_STATE_UNSPECIFIED) &&
			!strings.Contains(sh(t, "ovs-vsctl", append(dbArgs(ovsdb), "list-ports", ovsv.Bridge)...), vf.VethName(vlan))
	})
	t.Logf("INSTANCE_REMOVED -> nothing left: %s", d.Round(time.Millisecond))
	if err := exec.Command("ip", "link", "show", vf.VethName(vlan)).Run(); err == nil {
		t.Fatal("the VF veth is still there")
	}
	fmt.Fprintln(os.Stderr, "smoke: done")
}

func dbArgs(db string) []string {
	if db == "" {
		return nil
	}
	return []string{"--db=" + db}
}
