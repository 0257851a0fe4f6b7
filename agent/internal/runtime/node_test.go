// SPDX-License-Identifier: Apache-2.0

package runtime

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Test_instance_Pod_on_a_real_node_shares_one_exclusive_core runs the Pod the backend makes
// for a 2-NF instance on a real kubelet (make test-k8s: deploy/kubernetes/testcluster/
// cluster.sh, static CPU manager with core 0 reserved, pod-scope topology manager,
// PodLevelResourceManagers) and reads from the node's /proc what the kernel enforces:
// both NF containers are allowed exactly the same one core, not the reserved one, and a
// BestEffort Pod beside them runs on the other cores only. The Pod is Guaranteed and its
// containers have the chain buffer mounted as hugetlbfs.
func Test_instance_Pod_on_a_real_node_shares_one_exclusive_core(t *testing.T) {
	kc := os.Getenv("KEEL_K8S_KUBECONFIG")
	if kc == "" {
		t.Skip("KEEL_K8S_KUBECONFIG not set: make test-k8s runs this against the one-node cluster of deploy/kubernetes/testcluster/cluster.sh")
	}
	node := envOr("KEEL_K8S_NODE", "keel-k8s")
	image := envOr("KEEL_K8S_TEST_IMAGE", "keel.local/pause:1")
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := "keel-node-test"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	for { // Pods need the ServiceAccount the controller-manager makes
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no default ServiceAccount in %s: %v", ns, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	k, err := NewKubernetes(cs, KubeConfig{Namespace: ns, Node: node, CPU: resource.MustParse("1"), MemoryBytes: 32 << 20,
		BufferBytes: 4 << 20, StartTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	specs := make([]Spec, 2)
	for i := range specs {
		specs[i] = Spec{Name: "keel-proof.1-" + strconv.Itoa(i), Image: image,
			Labels: map[string]string{"com.keel.instance": "proof/1", "com.keel.position": strconv.Itoa(i)},
			Mounts: []Mount{{Source: "/run/keel/pktbuf/proof.1", Target: "/pktbuf", Instance: true}}}
	}
	ids, err := k.CreateInstance(ctx, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Remove(context.Background(), ids[0]) })
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, PodName(specs[0].Name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Errorf("instance Pod QoS %q, want Guaranteed", pod.Status.QOSClass)
	}
	var cores []string
	for i, id := range ids {
		c := awaitPid(ctx, t, k, id)
		cpus := procStatus(t, c.Pid, "Cpus_allowed_list")
		t.Logf("%s (pid %d): Cpus_allowed_list %s", c.Name, c.Pid, cpus)
		if strings.ContainsAny(cpus, ",-") || cpus == "0" {
			t.Errorf("NF %d may run on %q: want one exclusive core, not the reserved core 0", i, cpus)
		}
		if !mountedHugetlbfs(t, c.Pid, "/pktbuf") {
			t.Errorf("NF %d has no hugetlbfs at /pktbuf", i)
		}
		cores = append(cores, cpus)
	}
	if cores[0] != cores[1] {
		t.Errorf("the NFs of one instance run on cores %v: want both on the Pod's one core", cores)
	}

	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "besteffort", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image, ImagePullPolicy: corev1.PullNever}},
			NodeName: node, AutomountServiceAccountToken: new(bool), TerminationGracePeriodSeconds: new(int64)}}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	oc, err := k.awaitRunning(ctx, "besteffort", "c", image)
	if err != nil {
		t.Fatal(err)
	}
	cpus := procStatus(t, oc.Pid, "Cpus_allowed_list")
	t.Logf("BestEffort Pod (pid %d): Cpus_allowed_list %s", oc.Pid, cpus)
	for _, c := range strings.Split(cpus, ",") {
		if c == cores[0] {
			t.Errorf("a BestEffort Pod may run on %s, the instance's exclusive core %s", cpus, cores[0])
		}
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// awaitPid waits until the container id runs and returns it with its host pid.
func awaitPid(ctx context.Context, t *testing.T, k *Kubernetes, id string) Container {
	t.Helper()
	for {
		c, err := k.Inspect(ctx, id)
		if err == nil && c.Running && c.Pid > 0 {
			return c
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s not running: %v (%+v)", id, err, c)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// procStatus returns a field of /proc/PID/status.
func procStatus(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

// mountedHugetlbfs says whether pid sees a hugetlbfs at target.
func mountedHugetlbfs(t *testing.T, pid int, target string) bool {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, v := range fields {
			if v == "-" && i > 4 && fields[4] == target && i+1 < len(fields) && fields[i+1] == "hugetlbfs" {
				return true
			}
		}
	}
	return false
}
