// SPDX-License-Identifier: Apache-2.0

package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func testSpecs() []Spec {
	lab := func(pos string) map[string]string {
		return map[string]string{"com.keel.worker": "node-a", "com.keel.instance": "Chain_1/3", "com.keel.chain": "Chain_1",
			"com.keel.position": pos, "com.keel.of": "2", "com.keel.tenant": "t1", "com.keel.vlan": "103", "com.keel.spec": "abc"}
	}
	mounts := []Mount{{Source: "/run/keel/pktbuf/Chain_1.3", Target: "/run/keel/pktbuf/Chain_1.3", Instance: true},
		{Source: "/run/keel/coopsched-nf.sock", Target: "/run/keel/coopsched.sock"},
		{Source: "/var/run/redis/redis.sock", Target: "/run/keel/redis.sock"},
		{Target: "/run/keel/stats", Scratch: true}}
	return []Spec{
		{Name: "keel-Chain_1.3-0", Image: "keel/acl:1", Args: []string{"--nf", "acl"}, Labels: lab("0"), Mounts: mounts,
			CPUs: 0.5, MemoryBytes: 128 << 20, CapAdd: []string{"NET_ADMIN"}},
		{Name: "keel-Chain_1.3-1", Image: "keel/nat:1", Args: []string{"--nf", "nat"}, Labels: lab("1"), Mounts: mounts},
	}
}

func testKube(t *testing.T, cfg KubeConfig) (*Kubernetes, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset()
	if cfg.Namespace == "" {
		cfg = KubeConfig{Namespace: "openfaas-fn", Node: "node-a", CPU: resource.MustParse("1"), MemoryBytes: 256 << 20, BufferBytes: 4 << 20,
			ProcRoot: cfg.ProcRoot, SRIOVResource: cfg.SRIOVResource, StartTimeout: 10 * time.Second}
	}
	k, err := NewKubernetes(cs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k, cs
}

func Test_Pod_is_guaranteed_at_pod_level_so_its_NFs_share_its_cores_and_buffer(t *testing.T) {
	k, _ := testKube(t, KubeConfig{SRIOVResource: "intel.com/sriov_netdevice"})
	p, err := k.Pod(testSpecs())
	if err != nil {
		t.Fatal(err)
	}
	if len(validation.IsDNS1123Label(p.Name)) > 0 || !strings.HasPrefix(p.Name, "keel-chain-1-3-") {
		t.Errorf("pod name %q", p.Name)
	}
	if len(p.Spec.Containers) != 2 || p.Spec.Containers[0].Name != "nf-0" || p.Spec.Containers[1].Image != "keel/nat:1" {
		t.Fatalf("containers %+v", p.Spec.Containers)
	}
	if p.Spec.Resources == nil {
		t.Fatal("no pod-level resources")
	}
	for name, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "1",
		corev1.ResourceMemory: "384Mi", "hugepages-2Mi": "4Mi"} {
		req, lim := p.Spec.Resources.Requests[name], p.Spec.Resources.Limits[name]
		if req.Cmp(resource.MustParse(want)) != 0 || req.Cmp(lim) != 0 {
			t.Errorf("pod %s request %s limit %s, want both %s", name, req.String(), lim.String(), want)
		}
	}
	for i, c := range p.Spec.Containers {
		r := c.Resources
		if _, ok := r.Requests[corev1.ResourceCPU]; ok {
			t.Errorf("container %d requests cpu %v: it would get cores of its own", i, r.Requests)
		}
		if _, ok := r.Limits[corev1.ResourceCPU]; ok {
			t.Errorf("container %d limits cpu %v", i, r.Limits)
		}
		if _, ok := r.Limits["hugepages-2Mi"]; ok {
			t.Errorf("container %d has its own hugepages limit %v: the Pod's is every container's", i, r.Limits)
		}
		req, lim := r.Requests[corev1.ResourceMemory], r.Limits[corev1.ResourceMemory]
		if req.IsZero() || req.Cmp(lim) != 0 {
			t.Errorf("container %d memory request %s limit %s", i, req.String(), lim.String())
		}
		if *c.SecurityContext.Privileged {
			t.Errorf("container %d privileged", i)
		}
	}
	if m := p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; m.Value() != 128<<20 {
		t.Errorf("chain memory: %s", m.String())
	}
	if m := p.Spec.Containers[1].Resources.Limits[corev1.ResourceMemory]; m.Value() != 256<<20 {
		t.Errorf("default memory: %s", m.String())
	}
	if v := p.Spec.Containers[0].Resources.Limits["intel.com/sriov_netdevice"]; v.Value() != 1 {
		t.Errorf("position 0 has no VF from the device plugin: %v", p.Spec.Containers[0].Resources.Limits)
	}
	if _, ok := p.Spec.Containers[1].Resources.Limits["intel.com/sriov_netdevice"]; ok {
		t.Error("position 1 asks for a VF too")
	}
	if caps := p.Spec.Containers[0].SecurityContext.Capabilities; caps == nil || caps.Add[0] != "NET_ADMIN" {
		t.Errorf("position 0 capabilities %+v", caps)
	}
	if p.Spec.Containers[1].SecurityContext.Capabilities != nil {
		t.Error("position 1 got capabilities")
	}
	if len(p.Spec.Volumes) != 4 || p.Spec.Volumes[0].EmptyDir == nil || p.Spec.Volumes[0].EmptyDir.Medium != "HugePages-2Mi" {
		t.Fatalf("volumes %+v", p.Spec.Volumes)
	}
	// The stats files need write(2), which hugetlbfs refuses: an emptyDir in memory.
	if st := p.Spec.Volumes[3]; st.Name != StatsVolume || st.EmptyDir == nil || st.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("stats volume %+v", st)
	}
	if hpv := p.Spec.Volumes[1].HostPath; hpv == nil || hpv.Path != "/run/keel/coopsched-nf.sock" || p.Spec.Volumes[1].Name != "coopsched-sock" {
		t.Errorf("coopsched volume %+v", p.Spec.Volumes[1])
	}
	for _, c := range p.Spec.Containers {
		if c.VolumeMounts[0].Name != BufferVolume || c.VolumeMounts[0].MountPath != "/run/keel/pktbuf/Chain_1.3" {
			t.Errorf("%s mounts %+v", c.Name, c.VolumeMounts)
		}
		if m := c.VolumeMounts[3]; m.Name != StatsVolume || m.MountPath != "/run/keel/stats" || m.ReadOnly {
			t.Errorf("%s stats mount %+v", c.Name, m)
		}
	}
	terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || terms[0].MatchFields[0].Key != "metadata.name" || terms[0].MatchFields[0].Values[0] != "node-a" {
		t.Errorf("node affinity %+v", terms)
	}
	if p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restart policy %s", p.Spec.RestartPolicy)
	}
	if p.Labels["com.keel.chain"] != "Chain_1" || p.Labels["com.keel.instance"] == "Chain_1/3" || p.Labels[LabelManagedBy] != "keel-agent" {
		t.Errorf("labels %v", p.Labels)
	}
	if _, ok := p.Labels["com.keel.position"]; ok {
		t.Error("the position differs by container and is no Pod label")
	}
	for k, v := range p.Labels {
		if len(validation.IsValidLabelValue(v)) > 0 || len(validation.IsQualifiedName(k)) > 0 {
			t.Errorf("invalid label %s=%s", k, v)
		}
	}
}

func Test_Pod_mounts_an_instances_secrets_directory_read_only(t *testing.T) {
	k, _ := testKube(t, KubeConfig{})
	specs := testSpecs()
	for i := range specs {
		specs[i].Mounts = append(specs[i].Mounts, Mount{Source: "/run/keel/secrets/Chain_1.3", Target: "/run/secrets/keel", ReadOnly: true, Dir: true})
	}
	p, err := k.Pod(specs)
	if err != nil {
		t.Fatal(err)
	}
	v := p.Spec.Volumes[len(p.Spec.Volumes)-2] // before the stats emptyDir
	if v.HostPath == nil || v.HostPath.Path != "/run/keel/secrets/Chain_1.3" || *v.HostPath.Type != corev1.HostPathDirectory {
		t.Fatalf("secrets volume %+v", v)
	}
	for _, c := range p.Spec.Containers {
		m := c.VolumeMounts[len(c.VolumeMounts)-1]
		if m.Name != v.Name || m.MountPath != "/run/secrets/keel" || !m.ReadOnly {
			t.Errorf("%s: secrets mount %+v", c.Name, m)
		}
	}
}

func Test_PodName_never_shares_a_name(t *testing.T) {
	a, b, c := PodName("keel-a_b.0-0"), PodName("keel-a-b.0-0"), PodName("keel-a-b-0-0")
	if a == b || b == c || c != "keel-a-b-0" || len(validation.IsDNS1123Label(a)) > 0 {
		t.Errorf("%q %q %q", a, b, c)
	}
	long := PodName("keel-" + strings.Repeat("x", 300) + ".1-0")
	if len(validation.IsDNS1123Label(long)) > 0 {
		t.Errorf("%q", long)
	}
	if v := LabelValue("c/0"); v == "c/0" || len(validation.IsValidLabelValue(v)) > 0 || v == LabelValue("c_0") {
		t.Errorf("label value %q", v)
	}
}

// kubelet plays the kubelet for one Pod of the fake clientset: it reports every container
// in the given state once the Pod exists.
func kubelet(t *testing.T, cs kubernetes.Interface, ns string, state func(i int) corev1.ContainerState) {
	t.Helper()
	go func() {
		for range 200 {
			pods, _ := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
			if len(pods.Items) > 0 {
				p := pods.Items[0]
				for i, c := range p.Spec.Containers {
					p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
						Name: c.Name, ContainerID: "containerd://" + strings.Repeat(string(rune('a'+i)), 64), State: state(i)})
				}
				_, _ = cs.CoreV1().Pods(ns).UpdateStatus(context.Background(), &p, metav1.UpdateOptions{})
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

func fakeProc(t *testing.T, pids map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, cgroup := range pids {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "cgroup"), []byte(cgroup), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func Test_CreateInstance_hands_position_0s_pid_to_first(t *testing.T) {
	a := strings.Repeat("a", 64)
	proc := fakeProc(t, map[string]string{
		"4242": "12:cpuset:/kubepods/pod1234/" + a + "\n",
		"4300": "12:cpuset:/kubepods/pod1234/" + a + "\n",
		"4100": "12:cpuset:/kubepods/pod1234/" + strings.Repeat("b", 64) + "\n",
		"self": "0::/\n",
	})
	k, cs := testKube(t, KubeConfig{ProcRoot: proc})
	kubelet(t, cs, "openfaas-fn", func(int) corev1.ContainerState {
		return corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	})
	var got Container
	ids, err := k.CreateInstance(context.Background(), testSpecs(), func(c Container) error { got = c; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if got.Pid != 4242 || !got.Running {
		t.Errorf("first got %+v, want pid 4242", got)
	}
	if len(ids) != 2 || !strings.HasSuffix(ids[1], "/nf-1") {
		t.Errorf("ids %v", ids)
	}
	list, err := k.List(context.Background(), map[string]string{"com.keel.instance": "Chain_1/3"})
	if err != nil || len(list) != 2 {
		t.Fatalf("list %v %v", list, err)
	}
	if list[1].Labels["com.keel.position"] != "1" || list[0].Labels["com.keel.instance"] != "Chain_1/3" || !list[0].Running {
		t.Errorf("listed %+v", list)
	}
	if l, _ := k.List(context.Background(), map[string]string{"com.keel.instance": "Chain_1/4"}); len(l) != 0 {
		t.Errorf("another instance lists %v", l)
	}
	if c, err := k.Inspect(context.Background(), ids[1]); err != nil || c.Pid != 4100 {
		t.Errorf("inspect %+v %v", c, err)
	}
	// A restarted agent creating the same instance adopts its Pod instead of making a second.
	if _, err := k.CreateInstance(context.Background(), testSpecs(), nil); err != nil {
		t.Errorf("re-create: %v", err)
	}
	if pods, _ := cs.CoreV1().Pods("openfaas-fn").List(context.Background(), metav1.ListOptions{}); len(pods.Items) != 1 {
		t.Errorf("%d pods", len(pods.Items))
	}
	for _, id := range ids {
		if err := k.Remove(context.Background(), id); err != nil {
			t.Errorf("remove %s: %v", id, err)
		}
	}
	if l, _ := k.List(context.Background(), nil); len(l) != 0 {
		t.Errorf("left after remove: %v", l)
	}
}

func Test_CreateInstance_reports_a_missing_image_and_an_early_exit(t *testing.T) {
	k, cs := testKube(t, KubeConfig{ProcRoot: t.TempDir()})
	kubelet(t, cs, "openfaas-fn", func(int) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "not present"}}
	})
	_, err := k.CreateInstance(context.Background(), testSpecs(), nil)
	if !errors.Is(err, ErrImageMissing) || !strings.Contains(err.Error(), "keel/acl:1") {
		t.Errorf("missing image: %v", err)
	}

	k, cs = testKube(t, KubeConfig{ProcRoot: t.TempDir()})
	kubelet(t, cs, "openfaas-fn", func(int) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", Message: "a\nbad config: acl\n"}}
	})
	_, err = k.CreateInstance(context.Background(), testSpecs(), func(Container) error { t.Error("first ran"); return nil })
	if err == nil || !strings.Contains(err.Error(), "exit code 3: bad config: acl") {
		t.Errorf("early exit: %v", err)
	}
	list, _ := k.List(context.Background(), map[string]string{"com.keel.worker": "node-a"})
	if len(list) != 2 || list[0].Running || Why(list[0]) != "exited with exit code 3: bad config: acl" {
		t.Errorf("listed %+v", list)
	}
}

func Test_a_Pod_of_a_core_share_asks_that_share_and_no_whole_core(t *testing.T) {
	// Instances side by side on coopsched's core (light chains, pooled instances): a
	// Guaranteed Pod of 100m is in the kubelet's shared pool, never given a core of its own.
	k, _ := testKube(t, KubeConfig{Namespace: "openfaas-fn", Node: "node-a", CPU: resource.MustParse("100m"),
		MemoryBytes: 256 << 20, BufferBytes: 4 << 20})
	specs := testSpecs()
	// A chain's cpus raise the share, never to a whole core: that would take the core from
	// the shared pool the other instances run in.
	for want, chainCPUs := range map[string]float64{"100m": 0, "500m": 0.5, "999m": 1.25} {
		specs[0].CPUs = chainCPUs
		p, err := k.Pod(specs)
		if err != nil {
			t.Fatal(err)
		}
		req, lim := p.Spec.Resources.Requests[corev1.ResourceCPU], p.Spec.Resources.Limits[corev1.ResourceCPU]
		if req.Cmp(resource.MustParse(want)) != 0 || req.Cmp(lim) != 0 {
			t.Errorf("chain cpus %v: pod cpu request %s limit %s, want %s", chainCPUs, req.String(), lim.String(), want)
		}
	}
	// Whole cores round a chain's fraction up to a core.
	k, _ = testKube(t, KubeConfig{Namespace: "openfaas-fn", Node: "node-a", CPU: resource.MustParse("1"),
		MemoryBytes: 256 << 20, BufferBytes: 4 << 20})
	specs[0].CPUs = 1.25
	p, err := k.Pod(specs)
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Spec.Resources.Requests[corev1.ResourceCPU]; c.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("whole cores for a chain of 1.25 cpus: %s, want 2", c.String())
	}
}

func Test_NewKubernetes_refuses_odd_cpu_and_buffers(t *testing.T) {
	cs := fake.NewClientset()
	base := KubeConfig{Namespace: "n", Node: "x", CPU: resource.MustParse("1"), MemoryBytes: 1 << 20, BufferBytes: 2 << 20}
	for _, ok := range []string{"1", "2", "250m", "999m"} {
		good := base
		good.CPU = resource.MustParse(ok)
		if _, err := NewKubernetes(cs, good); err != nil {
			t.Errorf("cpu %s: %v", ok, err)
		}
	}
	for _, no := range []string{"0", "1500m", "-1"} {
		bad := base
		bad.CPU = resource.MustParse(no)
		if _, err := NewKubernetes(cs, bad); err == nil {
			t.Errorf("cpu %s accepted", no)
		}
	}
	bad := base
	bad.BufferBytes = 3 << 20
	if _, err := NewKubernetes(cs, bad); err == nil {
		t.Error("3 MiB buffer accepted")
	}
}
