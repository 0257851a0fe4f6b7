// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-nfv/keel/agent/internal/runtime"
	"github.com/keel-nfv/keel/agent/internal/vf"
	"github.com/keel-nfv/keel/internal/testapiserver"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// fakeVF records which instance's VF went into which process.
type fakeVF struct {
	mu      sync.Mutex
	plugged map[string]int // instance -> pid
	vlans   map[string]uint32
}

func (f *fakeVF) Setup(context.Context) error { return nil }
func (f *fakeVF) Capacity() uint32            { return 0 }
func (f *fakeVF) Plug(_ context.Context, instance string, vlan uint32, pid int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plugged[instance], f.vlans[instance] = pid, vlan
	return nil
}
func (f *fakeVF) Unplug(_ context.Context, instance string, _ uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.plugged, instance)
	return nil
}
func (f *fakeVF) List(context.Context) ([]vf.VF, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []vf.VF
	for id := range f.plugged {
		out = append(out, vf.VF{Instance: id, VLAN: f.vlans[id], Name: "veth", Wired: true})
	}
	return out, nil
}

func (f *fakeVF) Counters(context.Context, uint32) (vf.Counters, error) { return vf.Counters{}, nil }

func (f *fakeVF) pid(instance string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.plugged[instance]
}

// fakeCoopsched plays keel-coopsched for NFs it never sees: an instance whose VF is
// plugged has announced itself and forms a detached sgroup.
type fakeCoopsched struct {
	pb.UnimplementedCoopschedServer
	vf     *fakeVF
	pktbuf string
}

func (f *fakeCoopsched) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	f.vf.mu.Lock()
	defer f.vf.mu.Unlock()
	st := &pb.StatusResponse{}
	for id := range f.vf.plugged {
		st.Groups = append(st.Groups, &pb.GroupStatus{GroupId: GroupID(id), State: pb.GroupState_GROUP_STATE_DETACHED,
			PktbufPath: filepath.Join(f.pktbuf, GroupID(id), "pktbuf")})
	}
	return st, nil
}

func (f *fakeCoopsched) Unregister(context.Context, *pb.UnregisterRequest) (*pb.UnregisterResponse, error) {
	return &pb.UnregisterResponse{}, nil
}

func (f *fakeCoopsched) Events(_ *pb.EventsRequest, s pb.Coopsched_EventsServer) error {
	<-s.Context().Done()
	return nil
}

// serve runs a gRPC server on a loopback port for the test and returns a client of it.
func serve(t *testing.T, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Test_agent_runs_a_chain_instance_as_a_Pod_on_a_real_apiserver runs the agent's
// controller with --runtime kubernetes as keel-agent's service account against etcd +
// kube-apiserver built from their modules; the gateway (its Watch of one pooled
// instance), coopsched and the VFs are fakes, and the test plays the kubelet. The
// instance becomes one Pod as the API server stores it (Guaranteed, the chain buffer on
// a hugepages emptyDir, the chain's labels, node affinity to the agent's node); once the
// kubelet says it runs, the VF goes into position 0's process and the gateway hears the
// instance is ready; a restarted agent adopts the Pod; a removed instance's Pod goes.
func Test_agent_runs_a_chain_instance_as_a_Pod_on_a_real_apiserver(t *testing.T) {
	c := testapiserver.Start(t)
	c.ApplyRBAC(t)
	ctx := context.Background()
	admin := c.Client(t, testapiserver.Admin)
	const worker, id, vlan = "node-a", "chain2/0", 103
	criID := strings.Repeat("ab", 32)
	proc := t.TempDir() // the node's /proc as the agent reads it: pid 777 runs position 0
	if err := os.MkdirAll(filepath.Join(proc, "777"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "777", "cgroup"), []byte("0::/kubepods/pod1/"+criID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.NewKubernetes(c.Client(t, testapiserver.Agent), runtime.KubeConfig{Namespace: "keel-nf", Node: worker,
		CPU: resource.MustParse("1"), MemoryBytes: 256 << 20, BufferBytes: 4 << 20, ProcRoot: proc, StartTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ch := &pb.Chain{Name: "chain2", Tenant: "acme", MemoryBytes: 512 << 20, Members: []*pb.ChainMember{
		{Name: "ACL", Nf: "acl", Image: "keel/nf-base:latest", ConfigJson: `{"rules":[]}`},
		{Name: "Encrypt", Nf: "encrypt", Image: "keel/nf-base:latest"}}}
	pooled := &pb.ChainInstance{Id: id, Chain: "chain2", Worker: worker, Vlan: vlan, State: "pooled", Core: -1}
	fc := &fakeControl{live: make(chan *pb.WatchEvent, 16), snapshot: []*pb.WatchEvent{
		{Kind: pb.WatchEvent_CHAIN_ADDED, Chain: ch}, {Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: pooled}}}
	vfs := &fakeVF{plugged: map[string]int{}, vlans: map[string]uint32{}}
	pktbuf := t.TempDir()
	gw := serve(t, func(s *grpc.Server) { pb.RegisterControlServer(s, fc) })
	cs := serve(t, func(s *grpc.Server) { pb.RegisterCoopschedServer(s, &fakeCoopsched{vf: vfs, pktbuf: pktbuf}) })
	cfg := Config{SpecConfig: SpecConfig{Worker: worker, PktbufDir: pktbuf, CoopschedNFSocket: "/run/keel/coopsched-nf.sock",
		Cpuset: "1", VFDriver: "af_packet", StatsIntervalMs: 200, WaitIfaceMs: 30000, StatsDir: PodStatsDir},
		Address: "127.0.0.1:9101", Cores: []int32{1}, Heartbeat: time.Second, StatsInterval: 100 * time.Millisecond,
		Resync: 200 * time.Millisecond, RegisterTimeout: 30 * time.Second, ReadyResetAfter: time.Minute, MaxParallel: 2}
	deps := Deps{Runtime: rt, VF: vfs, Coopsched: pb.NewCoopschedClient(cs), Control: pb.NewControlClient(gw),
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	start := func() func() {
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = New(cfg, deps).Run(actx); close(done) }()
		return func() { cancel(); <-done }
	}
	stop := start()
	defer func() { stop() }()

	var pod corev1.Pod
	waitFor(t, "the instance's Pod", 20*time.Second, func() bool {
		pods := onlyPods(t, admin)
		if len(pods) == 1 {
			pod = pods[0]
		}
		return len(pods) == 1
	})
	checkInstancePod(t, &pod, worker)

	// The kubelet's part: both containers run; position 0 is pid 777 on the node.
	pod.Status.Phase = corev1.PodRunning
	for _, ct := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: ct.Name, Ready: true,
			ContainerID: "containerd://" + criID, Image: ct.Image,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}})
	}
	if _, err := admin.CoreV1().Pods("keel-nf").UpdateStatus(ctx, &pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := func(s *pb.InstanceStats) bool { return s.Phase == "ready" }
	waitFor(t, "the gateway told the instance is ready", 20*time.Second, func() bool { return fc.last(id, ready) != nil })
	if pid := vfs.pid(id); pid != 777 {
		t.Errorf("the VF went into pid %d, want position 0's 777", pid)
	}

	// A restarted agent finds the Pod by its labels and keeps it.
	stop()
	stop = start()
	time.Sleep(time.Second) // several passes (--resync 200ms)
	if pods := onlyPods(t, admin); len(pods) != 1 || pods[0].UID != pod.UID {
		t.Errorf("after the agent's restart: %d Pods, want the same one", len(pods))
	}

	fc.push(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_REMOVED, Instance: pooled})
	waitFor(t, "the removed instance's Pod and VF to go", 20*time.Second, func() bool {
		return len(onlyPods(t, admin)) == 0 && vfs.pid(id) == 0
	})
}

func onlyPods(t *testing.T, cs kubernetes.Interface) []corev1.Pod {
	t.Helper()
	l, err := cs.CoreV1().Pods("keel-nf").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// checkInstancePod compares the Pod of chain2/0 with what keel-agent's --help promises.
func checkInstancePod(t *testing.T, p *corev1.Pod, node string) {
	t.Helper()
	name := runtime.PodName("keel-" + GroupID("chain2/0") + "-0")
	if p.Name != name || p.Status.QOSClass != corev1.PodQOSGuaranteed || len(p.Spec.Containers) != 2 {
		t.Errorf("Pod %s: QoS %q, %d containers; want %s, Guaranteed, 2", p.Name, p.Status.QOSClass, len(p.Spec.Containers), name)
	}
	for key, want := range map[string]string{LabelWorker: node, LabelChain: "chain2", LabelTenant: "acme", LabelVLAN: "103",
		runtime.LabelManagedBy: "keel-agent"} {
		if p.Labels[key] != want {
			t.Errorf("label %s=%q, want %q (labels %v)", key, p.Labels[key], want, p.Labels)
		}
	}
	if v := p.Spec.Volumes[0]; v.Name != runtime.BufferVolume || v.EmptyDir == nil || v.EmptyDir.Medium != "HugePages-2Mi" {
		t.Errorf("the chain buffer's volume: %+v", v)
	}
	// The NFs get coopsched's NF socket, never its admin socket.
	hostSock := false
	for _, v := range p.Spec.Volumes {
		hostSock = hostSock || (v.HostPath != nil && v.HostPath.Path == "/run/keel/coopsched-nf.sock")
		if v.HostPath != nil && v.HostPath.Path == "/run/keel/coopsched.sock" {
			t.Errorf("coopsched's admin socket is mounted into an instance's Pod: %+v", v)
		}
	}
	if !hostSock {
		t.Errorf("no hostPath volume of coopsched's NF socket: %+v", p.Spec.Volumes)
	}
	// The NFs write their statistics on an emptyDir in memory that every container mounts.
	stats := false
	for _, v := range p.Spec.Volumes {
		stats = stats || (v.Name == runtime.StatsVolume && v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory)
	}
	if !stats {
		t.Errorf("no stats emptyDir in memory: %+v", p.Spec.Volumes)
	}
	for _, ct := range p.Spec.Containers {
		if !slices.ContainsFunc(ct.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == runtime.StatsVolume && m.MountPath == PodStatsDir }) ||
			!slices.Contains(ct.Args, PodStatsDir+"/"+StatsName(0)) && !slices.Contains(ct.Args, PodStatsDir+"/"+StatsName(1)) {
			t.Errorf("%s: stats not on %s: mounts %+v args %v", ct.Name, PodStatsDir, ct.VolumeMounts, ct.Args)
		}
	}
	for k, ct := range p.Spec.Containers {
		mem, cpu := ct.Resources.Limits[corev1.ResourceMemory], ct.Resources.Limits[corev1.ResourceCPU]
		if mem.Value() != 512<<20 || !cpu.IsZero() || ct.VolumeMounts[0].Name != runtime.BufferVolume {
			t.Errorf("container %d: limits %v, mounts %+v; want the chain's 512Mi, no CPU of its own, the buffer", k, ct.Resources.Limits, ct.VolumeMounts)
		}
	}
	if r := p.Spec.Resources; r == nil {
		t.Error("no pod-level resources")
	} else if cpu, hp := r.Limits[corev1.ResourceCPU], r.Requests["hugepages-2Mi"]; cpu.MilliValue() != 1000 || hp.Value() != 4<<20 {
		t.Errorf("pod-level resources %+v; want 1 CPU and 4Mi of hugepages-2Mi shared by the NFs", r)
	}
	terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if f := terms[0].MatchFields[0]; f.Key != "metadata.name" || f.Values[0] != node {
		t.Errorf("node affinity %+v, want metadata.name in [%s]", f, node)
	}
}
