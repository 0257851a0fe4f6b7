// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func hello() *types.FunctionDeployment {
	return &types.FunctionDeployment{Service: "hello", Image: "ghcr.io/openfaas/alpine:latest", EnvProcess: "cat",
		EnvVars: map[string]string{"write_debug": "true"}, Labels: &map[string]string{"com.openfaas.scale.min": "2"},
		Annotations: &map[string]string{"topic": "x"}, Secrets: []string{"api-key"},
		Limits: &types.FunctionResources{Memory: "128Mi", CPU: "500m"}, Requests: &types.FunctionResources{Memory: "64Mi"}}
}

func Test_Apply_creates_faas_netes_objects_and_scales_in_place(t *testing.T) {
	cs := fake.NewClientset()
	k := New(cs, "openfaas-fn")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api-key"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	k.SecretPath = func(n string) (string, error) { return filepath.Join(dir, n), nil }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := k.Apply(ctx, hello(), 2); err != nil {
		t.Fatal(err)
	}
	d, err := cs.AppsV1().Deployments("openfaas-fn").Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 2 || d.Spec.Selector.MatchLabels[LabelFunction] != "hello" {
		t.Errorf("replicas %d selector %v", *d.Spec.Replicas, d.Spec.Selector)
	}
	tpl := d.Spec.Template
	if tpl.Labels[LabelFunction] != "hello" || tpl.Labels["com.openfaas.scale.min"] != "2" || tpl.Annotations["topic"] != "x" {
		t.Errorf("template meta %v %v", tpl.Labels, tpl.Annotations)
	}
	c := tpl.Spec.Containers[0]
	if c.Env[0].Name != "fprocess" || c.Env[0].Value != "cat" || c.Env[1].Name != "write_debug" {
		t.Errorf("env %v", c.Env)
	}
	if m := c.Resources.Limits[corev1.ResourceMemory]; m.String() != "128Mi" {
		t.Errorf("limits %v", c.Resources.Limits)
	}
	if c.Ports[0].ContainerPort != 8080 || c.ReadinessProbe.HTTPGet.Path != "/_/health" {
		t.Errorf("port/probe %v %v", c.Ports, c.ReadinessProbe)
	}
	if c.VolumeMounts[0].MountPath != "/var/openfaas/secrets" || tpl.Spec.Volumes[0].Projected.Sources[0].Secret.Name != "api-key" {
		t.Errorf("secrets %v %v", c.VolumeMounts, tpl.Spec.Volumes)
	}
	sec, err := cs.CoreV1().Secrets("openfaas-fn").Get(ctx, "api-key", metav1.GetOptions{})
	if err != nil || string(sec.Data["api-key"]) != "s3cret" {
		t.Errorf("secret %v %v", sec, err)
	}
	svc, err := cs.CoreV1().Services("openfaas-fn").Get(ctx, "hello", metav1.GetOptions{})
	if err != nil || svc.Spec.Selector[LabelFunction] != "hello" || svc.Spec.Ports[0].Port != 8080 {
		t.Fatalf("service %v %v", svc, err)
	}

	if err := k.Apply(ctx, hello(), 5); err != nil {
		t.Fatal(err)
	}
	d, _ = cs.AppsV1().Deployments("openfaas-fn").Get(ctx, "hello", metav1.GetOptions{})
	if *d.Spec.Replicas != 5 {
		t.Errorf("scaled to %d", *d.Spec.Replicas)
	}
	if _, err := k.Resolve("hello"); err == nil {
		t.Error("resolved a function without available replicas")
	}
	d.Status.AvailableReplicas = 5
	if _, err := cs.AppsV1().Deployments("openfaas-fn").UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for k.Running("hello") != 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if u, err := k.Resolve("hello"); err != nil || u.Host != "hello.openfaas-fn.svc.cluster.local:8080" {
		t.Errorf("resolve %v %v", u, err)
	}
	if o, err := k.Orphans(ctx, map[string]bool{}); err != nil || len(o) != 1 || o[0] != "hello" {
		t.Errorf("orphans %v %v", o, err)
	}
	if o, _ := k.Orphans(ctx, map[string]bool{"hello": true}); len(o) != 0 {
		t.Errorf("known function is an orphan: %v", o)
	}
	if err := k.Remove(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	if err := k.Remove(ctx, "hello"); err != nil {
		t.Errorf("second remove: %v", err)
	}
	if l, _ := cs.AppsV1().Deployments("openfaas-fn").List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("left %v", l.Items)
	}
	if l, _ := cs.CoreV1().Services("openfaas-fn").List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("left %v", l.Items)
	}
}

func Test_Apply_refuses_bad_quantities_and_foreign_deployments(t *testing.T) {
	cs := fake.NewClientset()
	k := New(cs, "openfaas-fn")
	fd := hello()
	fd.Secrets = nil
	fd.Limits.Memory = "lots"
	if err := k.Apply(context.Background(), fd, 1); err == nil {
		t.Error("memory \"lots\" accepted")
	}
	fd = hello()
	fd.Secrets = nil
	d, _ := k.Deployment(fd, 1)
	d.Labels = map[string]string{LabelFunction: "hello"} // faas-netes' own
	if _, err := cs.AppsV1().Deployments("openfaas-fn").Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.Apply(context.Background(), fd, 1); err == nil {
		t.Error("took over a Deployment that is not keel-gateway's")
	}
	if err := k.CheckImage(context.Background(), "bad image!"); err == nil {
		t.Error("invalid reference accepted")
	}
}
