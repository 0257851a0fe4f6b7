// SPDX-License-Identifier: Apache-2.0

// Package conformance checks keel-gateway against what an OpenFaaS client expects of
// normal functions, the way the client sees it: replies parsed with faas-provider's types,
// labels, headers, status codes, scale from zero within a bound, scaling up under load and
// back down after, limits in the replicas' cgroups. It runs against a real keel-gateway
// whose functions are real Docker containers of keel/test-watchdog (a classic watchdog
// running fprocess, the stand-in of OpenFaaS's functions/alpine) and keel/test-redirector
// (tests/conformance/images.sh). tests/test_conformance.py starts both and passes them in
// the environment:
//
//	KEEL_CONFORMANCE_GATEWAY           the gateway's URL (the tests skip without it)
//	KEEL_CONFORMANCE_PASSWORD          the basic-auth password of user admin
//	KEEL_CONFORMANCE_DOCKER            the dockerd the gateway deploys into
//	KEEL_CONFORMANCE_WATCHDOG_IMAGE    the watchdog image
//	KEEL_CONFORMANCE_REDIRECTOR_IMAGE  the redirector image
//
// The gateway runs with its defaults (a 10 s load window, a 30 s down window, 5 calls/s
// per replica), as `make up` runs it.
package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/openfaas/faas-provider/logs"
	"github.com/openfaas/faas-provider/types"
)

const namespace = "openfaas-fn"

type env struct {
	gateway, password, docker, watchdogImage, redirectorImage string
}

// config reads the environment; a test without a gateway to test skips.
func config(t *testing.T) env {
	t.Helper()
	e := env{
		gateway:         strings.TrimRight(os.Getenv("KEEL_CONFORMANCE_GATEWAY"), "/"),
		password:        os.Getenv("KEEL_CONFORMANCE_PASSWORD"),
		docker:          os.Getenv("KEEL_CONFORMANCE_DOCKER"),
		watchdogImage:   os.Getenv("KEEL_CONFORMANCE_WATCHDOG_IMAGE"),
		redirectorImage: os.Getenv("KEEL_CONFORMANCE_REDIRECTOR_IMAGE"),
	}
	if e.gateway == "" {
		t.Skip("KEEL_CONFORMANCE_GATEWAY is unset: run these tests through tests/test_conformance.py (pytest), which starts keel-gateway and its dockerd")
	}
	return e
}

var httpClient = &http.Client{Timeout: 60 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// call sends one request; auth adds the gateway's basic auth (the REST API), as faas-cli does.
func (e env) call(t *testing.T, method, path string, body any, auth bool, header ...string) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.gateway+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth {
		req.SetBasicAuth("admin", e.password)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out, resp.Header
}

// deploy deploys fd (namespace openfaas-fn) and removes it when the test ends.
func (e env) deploy(t *testing.T, fd types.FunctionDeployment) {
	t.Helper()
	if fd.Namespace == "" {
		fd.Namespace = namespace
	}
	code, body, _ := e.call(t, http.MethodPost, "/system/functions", fd, true)
	if code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("deploy %s: %d %s", fd.Service, code, body)
	}
	t.Cleanup(func() {
		code, body, _ := e.call(t, http.MethodDelete, "/system/functions?namespace="+namespace,
			types.DeleteFunctionRequest{FunctionName: fd.Service}, true)
		if code != http.StatusAccepted && code != http.StatusOK {
			t.Errorf("remove %s: %d %s", fd.Service, code, body)
		}
	})
}

func (e env) status(t *testing.T, name string) types.FunctionStatus {
	t.Helper()
	code, body, _ := e.call(t, http.MethodGet, "/system/function/"+name+"?namespace="+namespace, nil, true)
	if code != http.StatusOK {
		t.Fatalf("status of %s: %d %s", name, code, body)
	}
	var st types.FunctionStatus
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("status of %s: %v: %s", name, err, body)
	}
	return st
}

// waitFor polls the function's status every 500 ms until ok or the timeout; it returns the
// last status and how long it took.
func (e env) waitFor(t *testing.T, name string, timeout time.Duration, ok func(types.FunctionStatus) bool) (types.FunctionStatus, time.Duration, bool) {
	t.Helper()
	start := time.Now()
	for {
		st := e.status(t, name)
		if ok(st) {
			return st, time.Since(start), true
		}
		if time.Since(start) > timeout {
			return st, time.Since(start), false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// invoke calls the function until it answers want (a replica may still be starting), at most
// for 30 s; it returns the last answer.
func (e env) invoke(t *testing.T, method, name, query, body string, want int, header ...string) (int, []byte, http.Header) {
	t.Helper()
	path := "/function/" + name + "." + namespace
	if query != "" {
		path += "?" + query
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, h := e.call(t, method, path, body, false, header...)
		if code == want || time.Now().After(deadline) {
			return code, out, h
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func (e env) watchdog(name, fprocess string, labels map[string]string) types.FunctionDeployment {
	return types.FunctionDeployment{Service: name, Image: e.watchdogImage, EnvProcess: fprocess, Labels: &labels,
		Annotations: &map[string]string{}}
}

// load calls the function at rps per second from two workers until stop is closed; it
// returns the count of calls that answered 200.
func (e env) load(name string, rps float64, stop <-chan struct{}) *atomic.Int64 {
	var ok atomic.Int64
	u := e.gateway + "/function/" + name
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for w := 0; w < 2; w++ {
		go func() {
			tick := time.NewTicker(time.Duration(float64(2*time.Second) / rps))
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				resp, err := c.Post(u, "text/plain", strings.NewReader("load"))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						ok.Add(1)
					}
				}
			}
		}()
	}
	return &ok
}

// gatewayInfo is the OpenFaaS gateway's /system/info: faas-provider's ProviderInfo and
// VersionInfo in the gateway's envelope (as faas-cli and the certifier read it).
type gatewayInfo struct {
	Provider *types.ProviderInfo `json:"provider"`
	Version  *types.VersionInfo  `json:"version"`
	Arch     string              `json:"arch"`
}

func TestSystemInfo_in_the_gateways_shape(t *testing.T) {
	e := config(t)
	code, body, _ := e.call(t, http.MethodGet, "/system/info", nil, true)
	if code != http.StatusOK {
		t.Fatalf("/system/info: %d %s", code, body)
	}
	var info gatewayInfo
	if err := json.Unmarshal(body, &info); err != nil {
		t.Fatalf("/system/info does not parse as the gateway's info: %v: %s", err, body)
	}
	p := info.Provider
	if p == nil || p.Name != "keel-gateway" || p.Orchestration == "" || p.Version == nil || p.Version.Release == "" || p.Version.SHA == "" {
		t.Fatalf("provider info %s", body)
	}
	if info.Version == nil || info.Version.Release == "" || info.Version.SHA == "" || info.Arch == "" {
		t.Fatalf("gateway info %s", body)
	}
	if code, _, _ := e.call(t, http.MethodGet, "/healthz", nil, false); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
}

func TestNamespaces_one_served_others_refused(t *testing.T) {
	e := config(t)
	code, body, _ := e.call(t, http.MethodGet, "/system/namespaces", nil, true)
	var ns []string
	if code != http.StatusOK || json.Unmarshal(body, &ns) != nil || !slices.Equal(ns, []string{namespace}) {
		t.Fatalf("/system/namespaces: %d %s, want [%q]", code, body, namespace)
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/system/functions?namespace=nosuch"},
		{http.MethodGet, "/system/function/x?namespace=nosuch"},
		{http.MethodPost, "/system/scale-function/x?namespace=nosuch"},
		{http.MethodGet, "/system/logs?name=x&namespace=nosuch"},
	} {
		code, body, _ := e.call(t, c.method, c.path, "{}", true)
		if code != http.StatusBadRequest || !strings.Contains(string(body), `namespace "nosuch" is not served`) {
			t.Errorf("%s %s: %d %s, want 400 naming the namespace", c.method, c.path, code, body)
		}
	}
	fd := e.watchdog("ns-elsewhere", "env", nil)
	fd.Namespace = "nosuch"
	code, body, _ = e.call(t, http.MethodPost, "/system/functions", fd, true)
	if code != http.StatusBadRequest || !strings.Contains(string(body), `namespace "nosuch"`) {
		t.Fatalf("deploy into nosuch: %d %s", code, body)
	}
	if n := len(e.containers(t, "ns-elsewhere")); n != 0 {
		t.Fatalf("a refused deploy left %d container(s)", n)
	}
	if code, _, _ := e.call(t, http.MethodGet, "/system/function/ns-elsewhere?namespace="+namespace, nil, true); code != http.StatusNotFound {
		t.Fatalf("a refused deploy left a function: %d", code)
	}
}

func TestDeploy_metadata_listing_and_limits_as_deployed(t *testing.T) {
	e := config(t)
	ann := map[string]string{"important-date": "Fri Aug 10 08:21:00 BST 2018", "some-json": `{"glossary": {"title": "example"}}`}
	labels := map[string]string{"upstream_uri": "example.com", "canary_build": "true"}
	fd := types.FunctionDeployment{Service: "meta", Image: e.watchdogImage, EnvProcess: "env", Namespace: namespace,
		Labels: &labels, Annotations: &ann, EnvVars: map[string]string{"custom_env": "custom_env_value"},
		Limits: &types.FunctionResources{Memory: "5Mi", CPU: "100m"}}
	e.deploy(t, fd)
	code, body, _ := e.call(t, http.MethodGet, "/system/functions?namespace="+namespace, nil, true)
	var list []types.FunctionStatus
	if code != http.StatusOK || json.Unmarshal(body, &list) != nil {
		t.Fatalf("list: %d %s", code, body)
	}
	i := slices.IndexFunc(list, func(f types.FunctionStatus) bool { return f.Name == "meta" })
	if i < 0 {
		t.Fatalf("meta not in the list %s", body)
	}
	for _, st := range []types.FunctionStatus{list[i], e.status(t, "meta")} {
		if st.Image != fd.Image || st.Namespace != namespace || st.EnvProcess != "env" || st.EnvVars["custom_env"] != "custom_env_value" {
			t.Fatalf("status %+v", st)
		}
		if st.Labels == nil || (*st.Labels)["faas_function"] != "meta" || (*st.Labels)["canary_build"] != "true" || (*st.Labels)["upstream_uri"] != "example.com" {
			t.Fatalf("labels %v: want the deployed ones and faas_function=meta", st.Labels)
		}
		for k, v := range ann {
			if st.Annotations == nil || (*st.Annotations)[k] != v {
				t.Fatalf("annotation %s: got %v", k, st.Annotations)
			}
		}
		if st.Limits == nil || st.Limits.Memory != "5Mi" || st.Limits.CPU != "100m" || st.Requests != nil {
			t.Fatalf("limits %+v requests %+v", st.Limits, st.Requests)
		}
		if st.Replicas != 1 {
			t.Fatalf("replicas %d, want the default min 1", st.Replicas)
		}
	}
	// 5Mi is below Docker's least memory limit: the replica runs with 6 MiB; 100m of CPU is
	// a CFS quota of a tenth of the period.
	mem, quota := e.cgroupLimits(t, "meta")
	if mem != 6<<20 || quota < 0.099 || quota > 0.101 {
		t.Fatalf("cgroup of meta's replica: memory limit %d (want %d), cpu quota %.3f of a core (want 0.1)", mem, 6<<20, quota)
	}
}

func TestLimits_and_requests_are_in_the_replicas_cgroup(t *testing.T) {
	e := config(t)
	fd := e.watchdog("limited", "cat", nil)
	fd.Limits = &types.FunctionResources{Memory: "64Mi", CPU: "250m"}
	fd.Requests = &types.FunctionResources{Memory: "32Mi", CPU: "125m"}
	e.deploy(t, fd)
	if code, out, _ := e.invoke(t, http.MethodPost, "limited", "", "within limits", http.StatusOK); string(out) != "within limits" {
		t.Fatalf("invoke: %d %q", code, out)
	}
	mem, quota := e.cgroupLimits(t, "limited")
	if mem != 64<<20 || quota < 0.249 || quota > 0.251 {
		t.Fatalf("cgroup: memory limit %d (want %d), cpu quota %.3f (want 0.25)", mem, 64<<20, quota)
	}
	ins := e.inspect(t, "limited")
	if ins.HostConfig.MemoryReservation != 32<<20 || ins.HostConfig.CPUShares != 128 {
		t.Fatalf("requests: reservation %d (want %d), shares %d (want 128)", ins.HostConfig.MemoryReservation, 32<<20, ins.HostConfig.CPUShares)
	}
	bad := e.watchdog("badlimit", "cat", nil)
	bad.Limits = &types.FunctionResources{Memory: "lots"}
	code, body, _ := e.call(t, http.MethodPost, "/system/functions", bad, true)
	if code != http.StatusBadRequest || !strings.Contains(string(body), `limits.memory: "lots"`) {
		t.Fatalf("a bad limit: %d %s, want 400 naming limits.memory", code, body)
	}
	if n := len(e.containers(t, "badlimit")); n != 0 {
		t.Fatalf("a refused deploy left %d container(s)", n)
	}
}

func TestInvoke_verbs_call_id_query_env_redirect_and_not_found(t *testing.T) {
	e := config(t)
	e.deploy(t, types.FunctionDeployment{Service: "verbs", Image: e.watchdogImage, EnvProcess: "env",
		EnvVars: map[string]string{"custom_env": "custom_env_value"}})
	e.deploy(t, types.FunctionDeployment{Service: "redirector", Image: e.redirectorImage,
		EnvVars: map[string]string{"destination": "http://example.com"}})
	for _, verb := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		code, out, h := e.invoke(t, verb, "verbs", "", "", http.StatusOK)
		if code != http.StatusOK || !strings.Contains(string(out), "Http_Method="+verb) {
			t.Fatalf("%s: %d %s", verb, code, out)
		}
		id, start := h.Get("X-Call-Id"), h.Get("X-Start-Time")
		if id == "" || start == "" {
			t.Fatalf("%s: X-Call-Id %q, X-Start-Time %q: want both", verb, id, start)
		}
		// The function sees the same call id.
		if !strings.Contains(string(out), "Http_X_Call_Id="+id) {
			t.Fatalf("%s: the function did not get X-Call-Id %s: %s", verb, id, out)
		}
		if ns, err := strconv.ParseInt(start, 10, 64); err != nil || time.Since(time.Unix(0, ns)) > time.Minute {
			t.Fatalf("X-Start-Time %q is not a recent time in Unix nanoseconds", start)
		}
	}
	_, out, h := e.invoke(t, http.MethodPost, "verbs", "testing=1", "", http.StatusOK, "X-Call-Id", "caller-chosen")
	if !strings.Contains(string(out), "Http_Query=testing=1") || !strings.Contains(string(out), "custom_env=custom_env_value") || h.Get("X-Call-Id") != "caller-chosen" {
		t.Fatalf("query, env or the caller's call id lost: %s %v", out, h)
	}
	code, _, h := e.invoke(t, http.MethodPost, "redirector", "", "", http.StatusFound)
	if code != http.StatusFound || h.Get("Location") != "http://example.com" {
		t.Fatalf("redirect: %d Location %q", code, h.Get("Location"))
	}
	for _, path := range []string{"/function/nosuch", "/function/nosuch.openfaas-fn", "/function/nosuch/sub/path", "/async-function/nosuch"} {
		code, body, h := e.call(t, http.MethodPost, path, "", false)
		if code != http.StatusNotFound || !strings.Contains(string(body), "function nosuch not found") || h.Get("X-Call-Id") == "" {
			t.Errorf("POST %s: %d %q (X-Call-Id %q), want 404 naming the function", path, code, body, h.Get("X-Call-Id"))
		}
	}
}

func TestAsyncFunction_accepts_then_calls_back(t *testing.T) {
	e := config(t)
	e.deploy(t, e.watchdog("asyncenv", "env", nil))
	got := make(chan *http.Request, 1)
	bodies := make(chan string, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- string(b)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	e.invoke(t, http.MethodGet, "asyncenv", "", "", http.StatusOK) // a replica is up
	code, _, h := e.call(t, http.MethodPost, "/async-function/asyncenv?x=1", "payload", false, "X-Callback-Url", "http://"+ln.Addr().String()+"/done")
	if code != http.StatusAccepted || h.Get("X-Call-Id") == "" {
		t.Fatalf("async call: %d (X-Call-Id %q), want 202 with a call id", code, h.Get("X-Call-Id"))
	}
	select {
	case r := <-got:
		b := <-bodies
		if r.Header.Get("X-Call-Id") != h.Get("X-Call-Id") || r.Header.Get("X-Function-Status") != "200" ||
			!strings.Contains(b, "Http_Method=POST") || !strings.Contains(b, "Http_Query=x=1") {
			t.Fatalf("callback headers %v body %s", r.Header, b)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no callback within 30 s")
	}
}

func TestLogs_of_a_function(t *testing.T) {
	e := config(t)
	e.deploy(t, e.watchdog("logger", "cat", nil))
	if code, out, _ := e.invoke(t, http.MethodPost, "logger", "", namespace, http.StatusOK); string(out) != namespace {
		t.Fatalf("invoke: %d %q", code, out)
	}
	want := []string{"Forking fprocess", fmt.Sprintf("Wrote %d Bytes", len(namespace))}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body, _ := e.call(t, http.MethodGet, "/system/logs?name=logger&namespace="+namespace+"&follow=false", nil, true)
		var texts []string
		dec := json.NewDecoder(bytes.NewReader(body))
		for {
			var m logs.Message
			if dec.Decode(&m) != nil {
				break
			}
			if m.Name != "logger" {
				t.Fatalf("log line of %q", m.Name)
			}
			texts = append(texts, strings.TrimLeft(m.Text, "0123456789/: "))
		}
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool {
			return slices.ContainsFunc(texts, func(s string) bool { return strings.HasPrefix(s, w) })
		})
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs (%d): %v lack %v", code, texts, missing)
		}
		time.Sleep(time.Second)
	}
}

func TestScaleMinimum_from_the_label(t *testing.T) {
	e := config(t)
	e.deploy(t, e.watchdog("minscale", "sha512sum", map[string]string{"com.openfaas.scale.min": "2"}))
	if st := e.status(t, "minscale"); st.Replicas != 2 {
		t.Fatalf("replicas %d, want 2", st.Replicas)
	}
	if st, _, ok := e.waitFor(t, "minscale", time.Minute, func(s types.FunctionStatus) bool { return s.AvailableReplicas == 2 }); !ok {
		t.Fatalf("available %d of 2 after a minute", st.AvailableReplicas)
	}
	if n := len(e.containers(t, "minscale")); n != 2 {
		t.Fatalf("%d containers, want 2", n)
	}
	bad := e.watchdog("badscale", "env", map[string]string{"com.openfaas.scale.min": "3", "com.openfaas.scale.max": "2"})
	code, body, _ := e.call(t, http.MethodPost, "/system/functions", bad, true)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "labels.com.openfaas.scale.min") {
		t.Fatalf("min above max: %d %s, want 400 naming the label", code, body)
	}
}

func TestScaleFromZero_holds_the_call_until_a_replica_is_ready(t *testing.T) {
	e := config(t)
	t.Parallel()
	e.deploy(t, e.watchdog("fromzero", "sha512sum", nil))
	if _, _, ok := e.waitFor(t, "fromzero", time.Minute, func(s types.FunctionStatus) bool { return s.AvailableReplicas >= 1 }); !ok {
		t.Fatal("no replica within a minute")
	}
	if code, body, _ := e.call(t, http.MethodPost, "/system/scale-function/fromzero?namespace="+namespace,
		types.ScaleServiceRequest{ServiceName: "fromzero", Replicas: 0}, true); code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("scale to 0: %d %s", code, body)
	}
	if st := e.status(t, "fromzero"); st.Replicas != 0 || st.AvailableReplicas != 0 {
		t.Fatalf("after scale to 0: replicas %d available %d", st.Replicas, st.AvailableReplicas)
	}
	if n := len(e.containers(t, "fromzero")); n != 0 {
		t.Fatalf("%d containers at zero", n)
	}
	// One call, no retry: it is held until the replica answers.
	start := time.Now()
	code, out, _ := e.call(t, http.MethodPost, "/function/fromzero", "abc", false)
	took := time.Since(start)
	if code != http.StatusOK || !strings.HasPrefix(string(out), "ddaf35a193617aba") {
		t.Fatalf("call from zero: %d %q after %s", code, out, took)
	}
	if took > 20*time.Second {
		t.Fatalf("call from zero took %s (bound 20 s)", took)
	}
	t.Logf("scale from zero: the first call answered in %s", took.Round(time.Millisecond))
	if st := e.status(t, "fromzero"); st.Replicas != 1 || st.AvailableReplicas != 1 {
		t.Fatalf("after the call: replicas %d available %d, want 1 and 1", st.Replicas, st.AvailableReplicas)
	}
}

func TestScaleUpAndDown_from_throughput(t *testing.T) {
	e := config(t)
	t.Parallel()
	e.deploy(t, e.watchdog("throughput", "sha512sum", map[string]string{"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "2"}))
	if _, _, ok := e.waitFor(t, "throughput", time.Minute, func(s types.FunctionStatus) bool { return s.AvailableReplicas >= 1 }); !ok {
		t.Fatal("no replica within a minute")
	}
	stop := make(chan struct{})
	ok := e.load("throughput", 10, stop)
	st, took, reached := e.waitFor(t, "throughput", time.Minute, func(s types.FunctionStatus) bool { return s.Replicas >= 2 })
	close(stop)
	if !reached {
		t.Fatalf("10 calls/s for a minute (%d answered): %d replicas, want the max 2", ok.Load(), st.Replicas)
	}
	t.Logf("scaled to 2 after %s of 10 calls/s", took.Round(time.Second))
	if st, _, _ := e.waitFor(t, "throughput", 20*time.Second, func(s types.FunctionStatus) bool { return s.AvailableReplicas >= 2 }); st.AvailableReplicas < 2 {
		t.Fatalf("the second replica did not become available: %d", st.AvailableReplicas)
	}
	st, took, reached = e.waitFor(t, "throughput", time.Minute, func(s types.FunctionStatus) bool { return s.Replicas <= 1 })
	if !reached {
		t.Fatalf("a minute after the load: %d replicas, want the min 1", st.Replicas)
	}
	t.Logf("back to 1 replica %s after the load stopped", took.Round(time.Second))
	if n := len(e.containers(t, "throughput")); n != 1 {
		t.Fatalf("%d containers after scaling down, want 1", n)
	}
}

func TestScaling_disabled_when_min_equals_max(t *testing.T) {
	e := config(t)
	t.Parallel()
	e.deploy(t, e.watchdog("fixedscale", "sha512sum", map[string]string{"com.openfaas.scale.min": "2", "com.openfaas.scale.max": "2"}))
	stop := make(chan struct{})
	ok := e.load("fixedscale", 10, stop)
	time.Sleep(20 * time.Second)
	close(stop)
	if st := e.status(t, "fixedscale"); st.Replicas != 2 || ok.Load() == 0 {
		t.Fatalf("after 20 s of 10 calls/s (%d answered): %d replicas, want 2", ok.Load(), st.Replicas)
	}
}

func TestScaleToZero_when_idle_and_back_on_a_call(t *testing.T) {
	e := config(t)
	t.Parallel()
	e.deploy(t, e.watchdog("idler", "cat", map[string]string{"com.openfaas.scale.zero": "true", "com.openfaas.scale.zero-duration": "5s"}))
	if code, out, _ := e.invoke(t, http.MethodPost, "idler", "", "awake", http.StatusOK); string(out) != "awake" {
		t.Fatalf("first call: %d %q", code, out)
	}
	st, took, ok := e.waitFor(t, "idler", time.Minute, func(s types.FunctionStatus) bool { return s.Replicas == 0 })
	if !ok {
		t.Fatalf("idle for a minute with zero-duration 5s: %d replicas", st.Replicas)
	}
	t.Logf("scaled to zero %s after the last call", took.Round(time.Second))
	if code, out, _ := e.call(t, http.MethodPost, "/function/idler", "again", false); code != http.StatusOK || string(out) != "again" {
		t.Fatalf("call from zero: %d %q", code, out)
	}
}

func TestSystemAlert_scales_as_OpenFaaS_CE(t *testing.T) {
	e := config(t)
	e.deploy(t, e.watchdog("alerted", "env", map[string]string{"com.openfaas.scale.max": "5", "com.openfaas.scale.factor": "40"}))
	alert := func(status string) {
		body := fmt.Sprintf(`{"status":%q,"receiver":"scale-up","alerts":[{"status":%q,"labels":{"alertname":"APIHighInvocationRate","function_name":"alerted.openfaas-fn"}}]}`, status, status)
		if code, out, _ := e.call(t, http.MethodPost, "/system/alert", body, true); code != http.StatusOK {
			t.Fatalf("alert %s: %d %s", status, code, out)
		}
	}
	alert("firing")
	if st := e.status(t, "alerted"); st.Replicas != 3 {
		t.Fatalf("after a firing alert: %d replicas, want 1 + 40%% of 5 = 3", st.Replicas)
	}
	alert("resolved")
	if st := e.status(t, "alerted"); st.Replicas != 1 {
		t.Fatalf("after resolved: %d replicas, want the min 1", st.Replicas)
	}
	if code, _, _ := e.call(t, http.MethodPost, "/system/alert", "not json", true); code != http.StatusBadRequest {
		t.Fatalf("a bad alert body: %d, want 400", code)
	}
	if code, _, _ := e.call(t, http.MethodPost, "/system/alert", "{}", false); code != http.StatusUnauthorized {
		t.Fatalf("an alert without credentials: %d, want 401", code)
	}
}

// docker is a client of the dockerd the gateway deploys into.
func (e env) dockerClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.NewClientWithOpts(client.WithHost(e.docker), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (e env) containers(t *testing.T, name string) []container.Summary {
	t.Helper()
	list, err := e.dockerClient(t).ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", "com.keel.function="+name))})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// inspect returns the function's one running replica.
func (e env) inspect(t *testing.T, name string) container.InspectResponse {
	t.Helper()
	var last []container.Summary
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		last = e.containers(t, name)
		if len(last) == 1 && last[0].State == "running" {
			ins, err := e.dockerClient(t).ContainerInspect(context.Background(), last[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			return ins
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("%s: want one running replica, have %v", name, last)
	return container.InspectResponse{}
}

// cgroupLimits reads the memory limit (bytes) and CPU quota (cores) of the function's
// replica from its cgroup on this host (v1 or v2).
func (e env) cgroupLimits(t *testing.T, name string) (int64, float64) {
	t.Helper()
	ins := e.inspect(t, name)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", ins.State.Pid))
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) string {
		v, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(v))
	}
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		return n
	}
	var mem int64 = -1
	quota := -1.0
	unified := ""
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls := strings.Split(parts[1], ",")
		switch {
		case parts[0] == "0" && parts[1] == "":
			unified = parts[2]
		case slices.Contains(ctrls, "memory"):
			mem = num(read(filepath.Join("/sys/fs/cgroup", parts[1], parts[2], "memory.limit_in_bytes")))
		case slices.Contains(ctrls, "cpu"):
			dir := filepath.Join("/sys/fs/cgroup", parts[1], parts[2])
			quota = float64(num(read(filepath.Join(dir, "cpu.cfs_quota_us")))) / float64(num(read(filepath.Join(dir, "cpu.cfs_period_us"))))
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil && unified != "" { // cgroup v2 only
		dir := filepath.Join("/sys/fs/cgroup", unified)
		mem = num(read(filepath.Join(dir, "memory.max")))
		f := strings.Fields(read(filepath.Join(dir, "cpu.max")))
		quota = float64(num(f[0])) / float64(num(f[1]))
	}
	if mem < 0 || quota < 0 {
		t.Fatalf("no memory or cpu cgroup in /proc/%d/cgroup:\n%s", ins.State.Pid, b)
	}
	return mem, quota
}
