// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keel-nfv/keel/internal/testapiserver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Test_Kubernetes_against_a_real_apiserver runs the backend as keel-gateway's service
// account (deploy/kubernetes/rbac.yaml) against etcd + kube-apiserver built from their
// modules: the objects faas-cli deploy makes, a restart that re-applies without
// duplicates, scaling, removal, and what the gateway may not do.
func Test_Kubernetes_against_a_real_apiserver(t *testing.T) {
	c := testapiserver.Start(t)
	c.ApplyRBAC(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := c.Client(t, testapiserver.Admin)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api-key"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := func() *Kubernetes {
		o := Options{Backend: "kubernetes", Kubeconfig: c.Kubeconfig(t, dir, testapiserver.Gateway), Namespace: "openfaas-fn",
			ClusterDomain: "cluster.local"}
		k, err := o.Open(ctx, func(n string) (string, error) { return filepath.Join(dir, n), nil })
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k := open()
	if err := k.Apply(ctx, hello(), 2); err != nil {
		t.Fatal(err)
	}
	d, err := admin.AppsV1().Deployments("openfaas-fn").Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ct := d.Spec.Template.Spec.Containers[0]
	if *d.Spec.Replicas != 2 || d.Spec.Template.Labels[LabelFunction] != "hello" || ct.Env[0].Value != "cat" {
		t.Errorf("deployment %+v", d.Spec)
	}
	if m := ct.Resources.Limits[corev1.ResourceMemory]; m.String() != "128Mi" {
		t.Errorf("limits %v", ct.Resources.Limits)
	}
	svc, err := admin.CoreV1().Services("openfaas-fn").Get(ctx, "hello", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP == "" || svc.Spec.Selector[LabelFunction] != "hello" {
		t.Fatalf("service %+v %v", svc, err)
	}
	if s, err := admin.CoreV1().Secrets("openfaas-fn").Get(ctx, "api-key", metav1.GetOptions{}); err != nil || string(s.Data["api-key"]) != "s3cret" {
		t.Errorf("secret %v %v", s, err)
	}

	// A restarted gateway re-applies (Adopt) and scales: still one Deployment, one Service
	// (the same ClusterIP), the new replica count.
	cancel()
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	k = open()
	if err := k.Apply(ctx, hello(), 3); err != nil {
		t.Fatal(err)
	}
	deps, _ := admin.AppsV1().Deployments("openfaas-fn").List(ctx, metav1.ListOptions{})
	svcs, _ := admin.CoreV1().Services("openfaas-fn").List(ctx, metav1.ListOptions{})
	if len(deps.Items) != 1 || len(svcs.Items) != 1 || *deps.Items[0].Spec.Replicas != 3 || svcs.Items[0].Spec.ClusterIP != svc.Spec.ClusterIP {
		t.Errorf("after restart: %d deployments, %d services", len(deps.Items), len(svcs.Items))
	}
	// The Deployment controller's part: available replicas, which Running and Resolve follow.
	d = &deps.Items[0]
	d.Status.Replicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = 3, 3, 3
	if _, err := admin.AppsV1().Deployments("openfaas-fn").UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for k.Running("hello") != 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if u, err := k.Resolve("hello"); err != nil || u.Host != "hello.openfaas-fn.svc.cluster.local:8080" {
		t.Errorf("resolve %v %v (running %d)", u, err, k.Running("hello"))
	}
	if o, err := k.Orphans(ctx, map[string]bool{}); err != nil || len(o) != 1 {
		t.Errorf("orphans %v %v", o, err)
	}

	if err := k.Remove(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AppsV1().Deployments("openfaas-fn").Get(ctx, "hello", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("deployment after remove: %v", err)
	}
	if _, err := admin.CoreV1().Services("openfaas-fn").Get(ctx, "hello", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("service after remove: %v", err)
	}

	// What the gateway's service account must not do.
	gw := c.Client(t, testapiserver.Gateway)
	denied := map[string]error{}
	_, denied["create pod"] = gw.CoreV1().Pods("openfaas-fn").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}, metav1.CreateOptions{})
	_, denied["list secrets"] = gw.CoreV1().Secrets("openfaas-fn").List(ctx, metav1.ListOptions{})
	_, denied["get secret of keel"] = gw.CoreV1().Secrets("keel").Get(ctx, "basic-auth", metav1.GetOptions{})
	_, denied["create deployment in default"] = gw.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
	_, denied["list namespaces"] = gw.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	for what, err := range denied {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want forbidden", what, err)
		}
	}
}
