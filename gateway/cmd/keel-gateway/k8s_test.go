// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/kube"
	"github.com/keel-nfv/keel/internal/testapiserver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// stackYAML is what a user writes for one normal function and one packet function; the
// tests keep it in functions.yml, not faas-cli's default stack.yml, so that a faas-cli
// deploy --image ... does not read it.
const stackYAML = `version: 1.0
provider:
  name: openfaas
functions:
  hello:
    lang: dockerfile
    handler: ./hello
    image: keel/hello:latest
    fprocess: cat
    environment:
      write_debug: "true"
    secrets:
      - api-key
    labels:
      com.openfaas.scale.min: "2"
    annotations:
      topic: billing
    limits:
      memory: 128Mi
      cpu: 500m
    requests:
      memory: 64Mi
  ttlguard:
    image: keel/nf-ttlguard:latest
    labels:
      com.keel.kind: nf
`

// kubeGateway starts keel-gateway --backend kubernetes as keel-gateway's service account
// (a kubeconfig with its token) against c, logged in with faas-cli; extra flags follow.
func kubeGateway(t *testing.T, c *testapiserver.Cluster, name string, extra ...string) *gatewayProc {
	t.Helper()
	kc := c.Kubeconfig(t, t.TempDir(), testapiserver.Gateway)
	g := newGateway(t, name, append([]string{"--backend", "kubernetes", "--kubeconfig", kc, "--namespace", "openfaas-fn"}, extra...)...)
	g.start()
	g.login()
	return g
}

// Test_faas_cli_deploys_to_a_real_apiserver_through_keel_gateway drives the real
// keel-gateway (--backend kubernetes, keel-gateway's service account, deploy/kubernetes's
// RBAC) with the stock faas-cli against etcd + kube-apiserver built from their modules:
// faas-cli deploy makes exactly faas-netes' objects for a normal function and none for a
// packet function; describe follows the Deployment's status; a restart reconciles (a
// missing Service back, a stray Deployment gone, nothing doubled); faas-cli remove deletes
// the objects; a namespace RBAC does not open to the gateway stops it at start, saying so.
func Test_faas_cli_deploys_to_a_real_apiserver_through_keel_gateway(t *testing.T) {
	needTools(t)
	c := testapiserver.Start(t)
	c.ApplyRBAC(t)
	ctx := context.Background()
	admin := c.Client(t, testapiserver.Admin)
	g := kubeGateway(t, c, "keel-gateway")
	if err := os.WriteFile(filepath.Join(g.dir, "functions.yml"), []byte(stackYAML), 0o600); err != nil {
		t.Fatal(err)
	}

	g.mustFaas("secret", "create", "api-key", "--from-literal", "s3cret")
	out := g.mustFaas("deploy", "-f", "functions.yml")
	if !strings.Contains(out, "Deployed. 202") {
		t.Errorf("faas-cli deploy said:\n%s", out)
	}
	d := onlyDeployment(t, admin, "hello")
	checkHello(t, d)
	svc := onlyService(t, admin, "hello")
	if s, err := admin.CoreV1().Secrets("openfaas-fn").Get(ctx, "api-key", metav1.GetOptions{}); err != nil || string(s.Data["api-key"]) != "s3cret" {
		t.Errorf("secret api-key: %v %v", s, err)
	}
	if pods, err := admin.CoreV1().Pods("openfaas-fn").List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Errorf("pods in openfaas-fn (the packet function must make none): %v %v", pods, err)
	}
	out = g.mustFaas("list")
	for _, name := range []string{"hello", "ttlguard"} {
		if !strings.Contains(out, name) {
			t.Errorf("faas-cli list does not show %s:\n%s", name, out)
		}
	}
	if out = g.mustFaas("describe", "hello"); !strings.Contains(out, "Not Ready") {
		t.Errorf("faas-cli describe hello before any replica is available:\n%s", out)
	}
	// The Deployment controller's part (no controller-manager runs): two replicas available,
	// which the gateway's informer follows.
	d.Status.Replicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = 2, 2, 2
	if _, err := admin.AppsV1().Deployments("openfaas-fn").UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "faas-cli describe hello to say Ready", func() bool {
		out = g.mustFaas("describe", "hello")
		return strings.Contains(out, "Status:") && !strings.Contains(out, "Not Ready")
	})

	// While the gateway is down, someone deletes hello's Service and a Deployment of a
	// function the gateway no longer knows appears: the restarted gateway puts the
	// Service back, removes the stray Deployment, and keeps hello's Deployment as it was.
	g.stop()
	if err := admin.CoreV1().Services("openfaas-fn").Delete(ctx, "hello", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stray := d.DeepCopy()
	stray.ObjectMeta = metav1.ObjectMeta{Name: "stray", Namespace: "openfaas-fn",
		Labels: map[string]string{kube.LabelFunction: "stray", kube.LabelManagedBy: "keel-gateway"}}
	stray.Spec.Selector.MatchLabels = map[string]string{kube.LabelFunction: "stray"}
	stray.Spec.Template.Labels = map[string]string{kube.LabelFunction: "stray"}
	if _, err := admin.AppsV1().Deployments("openfaas-fn").Create(ctx, stray, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g.start()
	after := onlyDeployment(t, admin, "hello")
	if after.UID != d.UID || *after.Spec.Replicas != 2 {
		t.Errorf("after the restart hello's Deployment is %s with %d replicas, want the same %s with 2", after.UID, *after.Spec.Replicas, d.UID)
	}
	if back := onlyService(t, admin, "hello"); back.UID == svc.UID {
		t.Errorf("hello's Service was not re-created")
	}
	if out = g.mustFaas("list"); !strings.Contains(out, "hello") || !strings.Contains(out, "ttlguard") || strings.Contains(out, "stray") {
		t.Errorf("faas-cli list after the restart:\n%s", out)
	}

	out = g.mustFaas("remove", "-f", "functions.yml")
	if _, err := admin.AppsV1().Deployments("openfaas-fn").Get(ctx, "hello", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("hello's Deployment after faas-cli remove: %v\n%s", err, out)
	}
	if _, err := admin.CoreV1().Services("openfaas-fn").Get(ctx, "hello", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("hello's Service after faas-cli remove: %v", err)
	}
	if out = g.mustFaas("list"); strings.Contains(out, "hello") || strings.Contains(out, "ttlguard") {
		t.Errorf("faas-cli list after remove:\n%s", out)
	}

	// RBAC gives keel-gateway's service account openfaas-fn only: pointed at kube-system it
	// stops at start and says why, instead of waiting for a list it may never make.
	other := newGateway(t, "keel-gateway --namespace kube-system", "--backend", "kubernetes",
		"--kubeconfig", c.Kubeconfig(t, t.TempDir(), testapiserver.Gateway), "--namespace", "kube-system")
	if log := other.exits(40 * time.Second); !strings.Contains(log, "forbidden") || !strings.Contains(log, "kube-system") {
		t.Errorf("keel-gateway in kube-system: %v; its log:\n%s", other.exitErr, log)
	}
}

// onlyDeployment returns the one Deployment of openfaas-fn, failing unless it is name's.
func onlyDeployment(t *testing.T, cs kubernetes.Interface, name string) *appsv1.Deployment {
	t.Helper()
	l, err := cs.AppsV1().Deployments("openfaas-fn").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 || l.Items[0].Name != name {
		t.Fatalf("Deployments of openfaas-fn: %v %v; want only %s", names(l), err, name)
	}
	return &l.Items[0]
}

// onlyService returns the one Service of openfaas-fn, failing unless it is name's.
func onlyService(t *testing.T, cs kubernetes.Interface, name string) *corev1.Service {
	t.Helper()
	l, err := cs.CoreV1().Services("openfaas-fn").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 || l.Items[0].Name != name {
		t.Fatalf("Services of openfaas-fn: %d %v; want only %s", len(l.Items), err, name)
	}
	s := &l.Items[0]
	if s.Spec.ClusterIP == "" || s.Spec.Selector[kube.LabelFunction] != name || s.Spec.Ports[0].Port != 8080 {
		t.Errorf("Service %s: %+v", name, s.Spec)
	}
	return s
}

func names(l *appsv1.DeploymentList) []string {
	var out []string
	if l != nil {
		for _, d := range l.Items {
			out = append(out, d.Name)
		}
	}
	return out
}

// checkHello compares hello's Deployment with stackYAML as faas-netes would make it.
func checkHello(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	tpl := d.Spec.Template
	if d.Labels[kube.LabelFunction] != "hello" || d.Labels[kube.LabelManagedBy] != "keel-gateway" || *d.Spec.Replicas != 2 ||
		d.Spec.Selector.MatchLabels[kube.LabelFunction] != "hello" {
		t.Errorf("hello's Deployment: labels %v, %d replicas, selector %v", d.Labels, *d.Spec.Replicas, d.Spec.Selector)
	}
	if tpl.Labels[kube.LabelFunction] != "hello" || tpl.Labels["com.openfaas.scale.min"] != "2" || tpl.Annotations["topic"] != "billing" {
		t.Errorf("hello's Pod template: labels %v annotations %v", tpl.Labels, tpl.Annotations)
	}
	if len(tpl.Spec.Containers) != 1 {
		t.Fatalf("hello's containers: %+v", tpl.Spec.Containers)
	}
	ct := tpl.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range ct.Env {
		env[e.Name] = e.Value
	}
	if ct.Image != "keel/hello:latest" || env["fprocess"] != "cat" || env["write_debug"] != "true" {
		t.Errorf("hello's container: image %s env %v", ct.Image, env)
	}
	lm, lc, rm := ct.Resources.Limits[corev1.ResourceMemory], ct.Resources.Limits[corev1.ResourceCPU], ct.Resources.Requests[corev1.ResourceMemory]
	if lm.String() != "128Mi" || lc.String() != "500m" || rm.String() != "64Mi" {
		t.Errorf("hello's resources: %+v", ct.Resources)
	}
	if ct.ReadinessProbe == nil || ct.ReadinessProbe.HTTPGet.Path != "/_/health" || ct.Ports[0].ContainerPort != 8080 {
		t.Errorf("hello's probe and port: %+v %+v", ct.ReadinessProbe, ct.Ports)
	}
	secretMounted := false
	for _, m := range ct.VolumeMounts {
		for _, v := range tpl.Spec.Volumes {
			if v.Name == m.Name && m.MountPath == "/var/openfaas/secrets" && v.Projected != nil &&
				v.Projected.Sources[0].Secret.Name == "api-key" {
				secretMounted = true
			}
		}
	}
	if !secretMounted {
		t.Errorf("hello does not mount secret api-key at /var/openfaas/secrets: %+v %+v", ct.VolumeMounts, tpl.Spec.Volumes)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
