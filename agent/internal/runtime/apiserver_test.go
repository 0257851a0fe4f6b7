// SPDX-License-Identifier: Apache-2.0

package runtime

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keel-nfv/keel/internal/testapiserver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Test_Kubernetes_against_a_real_apiserver runs the backend as keel-agent's service account
// (deploy/kubernetes/rbac.yaml) against etcd + kube-apiserver built from their modules; the
// test plays the kubelet (Pod status) as the admin.
func Test_Kubernetes_against_a_real_apiserver(t *testing.T) {
	c := testapiserver.Start(t)
	c.ApplyRBAC(t)
	ctx := context.Background()
	admin := c.Client(t, testapiserver.Admin)
	proc := fakeProc(t, map[string]string{"777": "4:cpuset:/kubepods/pod9/" + strings.Repeat("a", 64) + "\n"})
	cfg := KubeConfig{Namespace: "keel-nf", Node: "node-a", CPU: resource.MustParse("1"), MemoryBytes: 256 << 20, BufferBytes: 4 << 20,
		ProcRoot: proc, StartTimeout: 30 * time.Second}
	k, err := NewKubernetes(c.Client(t, testapiserver.Agent), cfg)
	if err != nil {
		t.Fatal(err)
	}

	kubelet(t, admin, "keel-nf", func(int) corev1.ContainerState {
		return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	})
	var pid int
	ids, err := k.CreateInstance(ctx, testSpecs(), func(c Container) error { pid = c.Pid; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if pid != 777 {
		t.Errorf("position 0's pid %d, want 777", pid)
	}
	pods, err := admin.CoreV1().Pods("keel-nf").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods %v %v", pods, err)
	}
	p := pods.Items[0]
	if p.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Errorf("the API server classed the Pod %q, not Guaranteed", p.Status.QOSClass)
	}
	if cpu := p.Spec.Resources.Limits[corev1.ResourceCPU]; cpu.MilliValue() != 1000 {
		t.Errorf("pod cpu %s", cpu.String())
	}
	for _, ct := range p.Spec.Containers {
		if cpu, ok := ct.Resources.Requests[corev1.ResourceCPU]; ok {
			t.Errorf("%s requests cpu %s: the API server defaulted one", ct.Name, cpu.String())
		}
	}
	if hp := p.Spec.Resources.Requests["hugepages-2Mi"]; hp.Value() != 4<<20 {
		t.Errorf("pod hugepages-2Mi request %s", hp.String())
	}
	if v := p.Spec.Volumes[0]; v.Name != BufferVolume || v.EmptyDir == nil || v.EmptyDir.Medium != "HugePages-2Mi" {
		t.Errorf("buffer volume %+v", v)
	}
	for _, ct := range p.Spec.Containers {
		if ct.VolumeMounts[0].Name != BufferVolume {
			t.Errorf("%s does not mount the buffer: %+v", ct.Name, ct.VolumeMounts)
		}
	}
	if f := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0]; f.Key != "metadata.name" || f.Values[0] != "node-a" {
		t.Errorf("node affinity %+v", f)
	}
	if p.Labels["com.keel.worker"] != "node-a" || p.Labels["com.keel.vlan"] != "103" || p.Labels[LabelManagedBy] != "keel-agent" {
		t.Errorf("labels %v", p.Labels)
	}

	// A restarted agent (a new client) finds the instance as it was and adopts its Pod.
	k2, err := NewKubernetes(c.Client(t, testapiserver.Agent), cfg)
	if err != nil {
		t.Fatal(err)
	}
	list, err := k2.List(ctx, map[string]string{"com.keel.worker": "node-a"})
	if err != nil || len(list) != 2 || list[0].Labels["com.keel.instance"] != "Chain_1/3" || !list[1].Running {
		t.Fatalf("after restart: %+v %v", list, err)
	}
	if _, err := k2.CreateInstance(ctx, testSpecs(), nil); err != nil {
		t.Errorf("re-create after restart: %v", err)
	}
	changed := testSpecs()
	for i := range changed {
		changed[i].Labels["com.keel.spec"] = "def"
	}
	if _, err := k2.CreateInstance(ctx, changed, nil); err == nil || !strings.Contains(err.Error(), "another spec") {
		t.Errorf("a changed spec over a live Pod: %v", err)
	}
	if pods, _ := admin.CoreV1().Pods("keel-nf").List(ctx, metav1.ListOptions{}); len(pods.Items) != 1 {
		t.Errorf("%d pods after the restart, want 1", len(pods.Items))
	}

	// Deletion: the agent's event stream sees the Pod go, and nothing is left.
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	evs, errs := k2.Events(ectx, map[string]string{"com.keel.worker": "node-a"})
	if err := k2.Remove(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := k2.Remove(ctx, ids[1]); err != nil {
		t.Errorf("removing the second container of a gone Pod: %v", err)
	}
	destroyed := false
	for !destroyed {
		select {
		case ev := <-evs:
			destroyed = ev.Action == "destroy" && ev.Labels["com.keel.instance"] == "Chain_1/3"
		case err := <-errs:
			t.Fatalf("events: %v", err)
		case <-ectx.Done():
			t.Fatal("no destroy event")
		}
	}
	if l, err := k2.List(ctx, nil); err != nil || len(l) != 0 {
		t.Errorf("left after remove: %v %v", l, err)
	}

	// What the agent's service account must not do.
	agent := c.Client(t, testapiserver.Agent)
	denied := map[string]error{}
	_, denied["list secrets"] = agent.CoreV1().Secrets("keel-nf").List(ctx, metav1.ListOptions{})
	_, denied["list pods of openfaas-fn"] = agent.CoreV1().Pods("openfaas-fn").List(ctx, metav1.ListOptions{})
	_, denied["create deployment"] = agent.AppsV1().Deployments("keel-nf").Create(ctx,
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	_, denied["list pods of keel"] = agent.CoreV1().Pods("keel").List(ctx, metav1.ListOptions{})
	_, denied["update pod status"] = agent.CoreV1().Pods("keel-nf").UpdateStatus(ctx, &p, metav1.UpdateOptions{})
	_, denied["list nodes"] = agent.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	other := cfg
	other.Namespace = "kube-system"
	ko, _ := NewKubernetes(agent, other)
	_, denied["create pod in kube-system"] = ko.CreateInstance(ctx, testSpecs(), nil)
	for what, err := range denied {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want forbidden", what, err)
		}
	}

	// Pod Security (deploy/kubernetes/namespace.yaml): the instance Pod the agent made was
	// admitted in keel-nf; the same Pod in openfaas-fn, whose normal functions get baseline
	// enforced, is refused for what a packet path needs beyond it (a hostPath socket,
	// NET_ADMIN).
	nf := p.DeepCopy()
	nf.ObjectMeta = metav1.ObjectMeta{Name: "nf-in-openfaas-fn", Namespace: "openfaas-fn"}
	nf.Status = corev1.PodStatus{}
	_, err = admin.CoreV1().Pods("openfaas-fn").Create(ctx, nf, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "violates PodSecurity \"baseline") ||
		!strings.Contains(err.Error(), "hostPath") {
		t.Errorf("an instance Pod in openfaas-fn: %v, want forbidden by PodSecurity baseline (hostPath)", err)
	}
}
