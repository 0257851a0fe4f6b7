// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keel-nfv/keel/internal/testapiserver"
	"github.com/openfaas/faas-provider/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// api calls the gateway's REST API as admin.
func (g *gatewayProc) api(method, path, body string) (int, string) {
	g.t.Helper()
	req, err := http.NewRequest(method, g.URL+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	req.SetBasicAuth("admin", g.password())
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// Test_OpenFaaS_shapes_and_scaling_on_the_kubernetes_backend: on --backend kubernetes,
// against a real kube-apiserver (no kubelet: the test plays the Deployment controller's
// part by writing the Deployment's status), /system/info names kubernetes, a function's
// status carries faas_function, other namespaces are refused, a call of a function scaled
// to zero scales its Deployment to the min and is held until a replica is available,
// AlertManager's alerts scale the Deployment, and com.openfaas.scale.type=cpu is refused
// (the backend cannot read Pods' CPU).
func Test_OpenFaaS_shapes_and_scaling_on_the_kubernetes_backend(t *testing.T) {
	needTools(t)
	c := testapiserver.Start(t)
	c.ApplyRBAC(t)
	ctx := context.Background()
	admin := c.Client(t, testapiserver.Admin)
	g := kubeGateway(t, c, "keel-gateway", "--wake-timeout", "20s")

	code, body := g.api(http.MethodGet, "/system/info", "")
	var info struct {
		Provider *types.ProviderInfo `json:"provider"`
		Version  *types.VersionInfo  `json:"version"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &info) != nil || info.Provider == nil ||
		info.Provider.Orchestration != "kubernetes" || info.Version == nil {
		t.Fatalf("/system/info: %d %s", code, body)
	}
	fd := types.FunctionDeployment{Service: "sleeper", Image: "keel/hello:latest", Namespace: "openfaas-fn",
		Labels: &map[string]string{"com.openfaas.scale.max": "5", "com.openfaas.scale.factor": "40"}}
	j, _ := json.Marshal(fd)
	if code, body := g.api(http.MethodPost, "/system/functions", string(j)); code != http.StatusAccepted {
		t.Fatalf("deploy: %d %s", code, body)
	}
	var st types.FunctionStatus
	if code, body := g.api(http.MethodGet, "/system/function/sleeper?namespace=openfaas-fn", ""); code != http.StatusOK ||
		json.Unmarshal([]byte(body), &st) != nil || (*st.Labels)["faas_function"] != "sleeper" || st.Namespace != "openfaas-fn" {
		t.Fatalf("status: %d %s", code, body)
	}
	if code, body := g.api(http.MethodGet, "/system/functions?namespace=other", ""); code != http.StatusBadRequest ||
		!strings.Contains(body, `namespace "other" is not served`) {
		t.Fatalf("list of another namespace: %d %s", code, body)
	}
	cpu := fd
	cpu.Service, cpu.Labels = "cpubound", &map[string]string{"com.openfaas.scale.type": "cpu"}
	j, _ = json.Marshal(cpu)
	if code, body := g.api(http.MethodPost, "/system/functions", string(j)); code != http.StatusBadRequest ||
		!strings.Contains(body, "labels.com.openfaas.scale.type: cpu") {
		t.Fatalf("a cpu-scaled function on kubernetes: %d %s", code, body)
	}

	replicas := func() int32 {
		d, err := admin.AppsV1().Deployments("openfaas-fn").Get(ctx, "sleeper", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return *d.Spec.Replicas
	}
	// An alert scales the Deployment (1 + 40 % of 5 = 3), resolved brings it back to 1.
	alert := `{"status":"%s","alerts":[{"status":"%s","labels":{"function_name":"sleeper"}}]}`
	if code, body := g.api(http.MethodPost, "/system/alert", strings.ReplaceAll(alert, "%s", "firing")); code != http.StatusOK || replicas() != 3 {
		t.Fatalf("firing: %d %s; Deployment replicas %d, want 3", code, body, replicas())
	}
	if code, body := g.api(http.MethodPost, "/system/alert", strings.ReplaceAll(alert, "%s", "resolved")); code != http.StatusOK || replicas() != 1 {
		t.Fatalf("resolved: %d %s; Deployment replicas %d, want 1", code, body, replicas())
	}

	// Scale to zero, then call: the call scales the Deployment to 1 and waits until the
	// Deployment has an available replica.
	if code, body := g.api(http.MethodPost, "/system/scale-function/sleeper", `{"serviceName":"sleeper","replicas":0}`); code != http.StatusAccepted || replicas() != 0 {
		t.Fatalf("scale to 0: %d %s; replicas %d", code, body, replicas())
	}
	answered := make(chan time.Time, 1)
	go func() {
		resp, err := http.Post(g.URL+"/function/sleeper", "text/plain", bytes.NewReader([]byte("hi")))
		if err == nil {
			resp.Body.Close()
		}
		answered <- time.Now()
	}()
	waitFor(t, "the call to scale sleeper's Deployment from 0 to 1", func() bool { return replicas() == 1 })
	select {
	case <-answered:
		t.Fatal("the call was answered before any replica was available")
	case <-time.After(time.Second):
	}
	d, err := admin.AppsV1().Deployments("openfaas-fn").Get(ctx, "sleeper", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	d.Status.Replicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = 1, 1, 1
	if _, err := admin.AppsV1().Deployments("openfaas-fn").UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-answered:
		// No kube-proxy or DNS here: the proxied call itself fails; what counts is that it
		// was held until the replica was available, and went on right after.
		if at.Before(ready) || at.Sub(ready) > 5*time.Second {
			t.Fatalf("the call went on %s after the replica was available", at.Sub(ready))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the call was still held 15 s after a replica was available")
	}
	if code, body := g.api(http.MethodGet, "/system/function/sleeper", ""); code != http.StatusOK || !strings.Contains(body, `"replicas":1`) {
		t.Fatalf("status after the call: %d %s", code, body)
	}
}
