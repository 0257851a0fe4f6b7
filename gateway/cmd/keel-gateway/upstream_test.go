// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	"github.com/keel-nfv/keel/gateway/internal/upstream"
	"github.com/keel-nfv/keel/internal/testapiserver"
	"github.com/openfaas/faas-provider/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Test_faas_cli_through_keel_gateway_with_an_upstream_provider drives keel-gateway
// --upstream-provider with the stock faas-cli. The upstream is a second keel-gateway with
// --backend kubernetes on a real kube-apiserver: a real faas-provider that makes faas-netes'
// objects (faas-netes itself cannot be had here: the Go module proxy refuses
// github.com/openfaas/faas-netes). The normal function of stack.yml becomes the upstream's
// Deployment, the packet function stays in keel, faas-cli list shows both, an invocation
// reaches the upstream, a name both hold is refused naming the upstream, a stopped
// upstream is named, and faas-cli remove reaches both sides.
func Test_faas_cli_through_keel_gateway_with_an_upstream_provider(t *testing.T) {
	needTools(t)
	c := testapiserver.Start(t)
	c.ApplyRBAC(t)
	ctx := context.Background()
	admin := c.Client(t, testapiserver.Admin)
	up := kubeGateway(t, c, "the upstream keel-gateway --backend kubernetes")
	g := newGateway(t, "keel-gateway --upstream-provider", "--upstream-provider", up.URL,
		"--upstream-password-file", filepath.Join(up.dir, "secrets", "basic-auth-password"))
	g.start()
	g.login()
	if err := os.WriteFile(filepath.Join(g.dir, "functions.yml"), []byte(stackYAML), 0o600); err != nil {
		t.Fatal(err)
	}

	g.mustFaas("secret", "create", "api-key", "--from-literal", "s3cret")
	g.mustFaas("deploy", "-f", "functions.yml")
	checkHello(t, onlyDeployment(t, admin, "hello"))
	onlyService(t, admin, "hello")
	if s, err := admin.CoreV1().Secrets("openfaas-fn").Get(ctx, "api-key", metav1.GetOptions{}); err != nil || string(s.Data["api-key"]) != "s3cret" {
		t.Errorf("secret api-key (created through keel, kept by the upstream): %v %v", s, err)
	}
	if out := g.mustFaas("list"); !strings.Contains(out, "hello") || !strings.Contains(out, "ttlguard") {
		t.Errorf("faas-cli list through keel does not show both sides:\n%s", out)
	}
	if out := up.mustFaas("list"); !strings.Contains(out, "hello") || strings.Contains(out, "ttlguard") {
		t.Errorf("faas-cli list at the upstream, want hello only:\n%s", out)
	}
	if out := g.mustFaas("describe", "hello"); !strings.Contains(out, "keel/hello:latest") {
		t.Errorf("faas-cli describe hello through keel:\n%s", out)
	}

	// An invocation through keel is the upstream's to answer (with no kubelet no replica
	// runs, so it refuses): the upstream counts it.
	if out, err := g.faas("hi", "invoke", "hello"); err == nil {
		t.Errorf("faas-cli invoke hello with no replica running succeeded:\n%s", out)
	}
	if m := get(t, up.URL+"/metrics"); !strings.Contains(m, `function_name="hello"`) {
		t.Errorf("the upstream did not count the invocation of hello:\n%s", m)
	}

	// A normal function deployed at the upstream directly takes a name keel then refuses
	// for a packet function, saying where the name is used.
	up.mustFaas("deploy", "--image", "keel/hello:latest", "--name", "dup")
	out, err := g.faas("", "deploy", "--image", "keel/nf-dup:latest", "--name", "dup", "--label", "com.keel.kind=nf")
	if err == nil || !strings.Contains(out, "409") || !strings.Contains(out, "the name dup is a normal function at the upstream provider "+up.URL) {
		t.Errorf("a packet function named like an upstream function: %v\n%s", err, out)
	}
	up.mustFaas("remove", "dup")

	// A stopped upstream: keel's answer names it.
	up.stop()
	if out, err := g.faas("", "list"); err == nil || !strings.Contains(out, "upstream faas-provider "+up.URL) {
		t.Errorf("faas-cli list with the upstream down: %v\n%s", err, out)
	}
	up.start()

	g.mustFaas("remove", "-f", "functions.yml")
	if _, err := admin.AppsV1().Deployments("openfaas-fn").Get(ctx, "hello", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("hello's Deployment after faas-cli remove through keel: %v", err)
	}
	if out := g.mustFaas("list"); strings.Contains(out, "hello") || strings.Contains(out, "ttlguard") {
		t.Errorf("faas-cli list after remove:\n%s", out)
	}
}

func Test_checkUpstreamMode_refuses_a_store_that_holds_normal_functions(t *testing.T) {
	ctx := context.Background()
	st := testredis.Store(t)
	for _, f := range []*chain.Function{
		{Deployment: types.FunctionDeployment{Service: "hello"}},
		{Kind: chain.KindNF, Deployment: types.FunctionDeployment{Service: "ttlguard"}},
	} {
		if err := st.Put(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	up, err := upstream.New("http://127.0.0.1:1", "", "") // nothing listens: only a warning
	if err != nil {
		t.Fatal(err)
	}
	if err := checkUpstreamMode(ctx, st, up); err == nil || !strings.Contains(err.Error(), "holds normal functions (hello)") {
		t.Errorf("a store with hello: %v", err)
	}
	if err := st.Delete(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	if err := checkUpstreamMode(ctx, st, up); err != nil {
		t.Errorf("packet functions only: %v", err)
	}
}

// get returns the body of an unauthenticated GET.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
