// SPDX-License-Identifier: Apache-2.0

package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	"github.com/keel-nfv/keel/gateway/internal/upstream"
	"github.com/openfaas/faas-provider/auth"
	"github.com/openfaas/faas-provider/types"
)

// fakeUpstream is a faas-provider that keeps functions in a map, wants basic auth
// admin/up-secret on its REST API (not on /function/, as faas-provider), and records the
// calls it answered ("METHOD PATH").
type fakeUpstream struct {
	mu    sync.Mutex
	fns   map[string]types.FunctionStatus
	calls []string
}

func (f *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if u, pw, ok := r.BasicAuth(); strings.HasPrefix(r.URL.Path, "/system/") && (!ok || u != "admin" || pw != "up-secret") {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	name := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	switch {
	case r.URL.Path == "/system/functions" && r.Method == http.MethodGet:
		list := []types.FunctionStatus{}
		for _, fn := range f.fns {
			list = append(list, fn)
		}
		json.NewEncoder(w).Encode(list)
	case r.URL.Path == "/system/functions" && r.Method == http.MethodDelete:
		var req types.DeleteFunctionRequest
		json.NewDecoder(r.Body).Decode(&req)
		delete(f.fns, req.FunctionName)
		w.WriteHeader(http.StatusAccepted)
	case r.URL.Path == "/system/functions":
		var fd types.FunctionDeployment
		json.NewDecoder(r.Body).Decode(&fd)
		f.fns[fd.Service] = types.FunctionStatus{Name: fd.Service, Image: fd.Image}
		w.WriteHeader(http.StatusAccepted)
	case strings.HasPrefix(r.URL.Path, "/system/function/"):
		fn, ok := f.fns[name]
		if !ok {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(fn)
	case strings.HasPrefix(r.URL.Path, "/function/"):
		w.Write([]byte("upstream's " + name))
	default: // scale, logs, secrets
		w.WriteHeader(http.StatusAccepted)
	}
}

func (f *fakeUpstream) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// splitGateway is keel's router with basic auth admin/keel-secret in front of the upstream
// f (functions already there), and keel's store.
func splitGateway(t *testing.T, f *fakeUpstream) (http.Handler, *store.Store, string) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	pw := filepath.Join(t.TempDir(), "basic-auth-password")
	if err := os.WriteFile(pw, []byte("up-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up, err := upstream.New(srv.URL, "admin", pw)
	if err != nil {
		t.Fatal(err)
	}
	st := testredis.Store(t)
	p := &provider.Provider{Store: st, Metrics: metrics.New()}
	return NewRouter(context.Background(), p, metrics.New(), nil, &auth.BasicAuthCredentials{User: "admin", Password: "keel-secret"}, up, nil), st, srv.URL
}

// call sends one request with keel's credentials and returns the status and body.
func call(h http.Handler, method, path, body string) (int, string) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.SetBasicAuth("admin", "keel-secret")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func Test_upstream_mode_sends_every_normal_function_call_upstream(t *testing.T) {
	f := &fakeUpstream{fns: map[string]types.FunctionStatus{}}
	h, st, _ := splitGateway(t, f)
	for _, c := range []struct{ method, path, body, want string }{
		{http.MethodPost, "/system/functions", `{"service":"hello","image":"keel/hello:latest"}`, ""},
		{http.MethodPut, "/system/functions", `{"service":"hello","image":"keel/hello:2"}`, ""},
		{http.MethodGet, "/system/function/hello", "", `"image":"keel/hello:2"`},
		{http.MethodPost, "/system/scale-function/hello", `{"serviceName":"hello","replicas":3}`, ""},
		{http.MethodPost, "/function/hello", "hi", "upstream's hello"},
		{http.MethodPost, "/function/hello.openfaas-fn/path", "hi", "upstream's path"},
		{http.MethodGet, "/system/logs?name=hello", "", ""},
		{http.MethodPost, "/system/secrets", `{"name":"api-key","value":"x"}`, ""},
		{http.MethodDelete, "/system/functions", `{"functionName":"hello"}`, ""},
	} {
		code, body := call(h, c.method, c.path, c.body)
		if code >= 300 || !strings.Contains(body, c.want) {
			t.Errorf("%s %s: %d %q, want success with %q", c.method, c.path, code, body, c.want)
		}
	}
	for _, want := range []string{"POST /system/functions", "PUT /system/functions", "POST /system/scale-function/hello",
		"POST /function/hello", "POST /function/hello.openfaas-fn/path", "GET /system/logs", "POST /system/secrets",
		"DELETE /system/functions"} {
		if !slices.Contains(f.called(), want) {
			t.Errorf("the upstream was not asked %s: %q", want, f.called())
		}
	}
	if fns, _ := store.List[chain.Function](context.Background(), st); len(fns) != 0 {
		t.Errorf("keel's store holds %d functions, want none", len(fns))
	}
	// keel's basic auth guards the upstream too: no credentials, no call.
	before := len(f.called())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/system/function/hello", nil))
	if rec.Code != http.StatusUnauthorized || len(f.called()) != before {
		t.Errorf("without keel's credentials: %d, upstream calls %q", rec.Code, f.called()[before:])
	}
}

func Test_upstream_mode_keeps_packet_functions_in_keel_and_lists_both_sides(t *testing.T) {
	f := &fakeUpstream{fns: map[string]types.FunctionStatus{"hello": {Name: "hello", Image: "keel/hello:latest"}}}
	h, st, _ := splitGateway(t, f)
	if code, body := call(h, http.MethodPost, "/system/functions", `{"service":"ttlguard","image":"keel/nf-ttlguard:latest","labels":{"com.keel.kind":"nf"}}`); code != http.StatusAccepted {
		t.Fatalf("deploy a packet function: %d %s", code, body)
	}
	if _, err := store.Get[chain.Function](context.Background(), st, "ttlguard"); err != nil {
		t.Errorf("ttlguard is not in keel's store: %v", err)
	}
	if _, ok := f.fns["ttlguard"]; ok {
		t.Error("the packet function went upstream")
	}
	code, body := call(h, http.MethodGet, "/system/functions", "")
	var list []types.FunctionStatus
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list) != 2 {
		t.Fatalf("list: %d %s", code, body)
	}
	var got []string
	for _, fn := range list {
		got = append(got, fn.Name)
	}
	slices.Sort(got)
	if strings.Join(got, " ") != "hello ttlguard" {
		t.Errorf("list shows %v, want hello and ttlguard", got)
	}
	if code, body := call(h, http.MethodGet, "/system/functions?namespace=other", ""); code != 200 || strings.Contains(body, "ttlguard") {
		t.Errorf("list of another namespace (keel's functions are all in openfaas-fn): %d %s", code, body)
	}
	if code, body := call(h, http.MethodGet, "/system/function/ttlguard", ""); code != 200 || !strings.Contains(body, "com.keel.packet-function") {
		t.Errorf("describe ttlguard: %d %s", code, body)
	}
	if code, body := call(h, http.MethodPost, "/function/ttlguard", "hi"); code != http.StatusBadRequest || !strings.Contains(body, "is a packet function") {
		t.Errorf("invoke ttlguard: %d %s", code, body)
	}
	if code, body := call(h, http.MethodDelete, "/system/functions", `{"functionName":"ttlguard"}`); code != http.StatusAccepted {
		t.Errorf("remove ttlguard: %d %s", code, body)
	}
	if _, err := store.Get[chain.Function](context.Background(), st, "ttlguard"); err == nil {
		t.Error("ttlguard is still in keel's store")
	}
	for _, c := range f.called() {
		if c != "GET /system/functions" && !strings.HasPrefix(c, "GET /system/function/") {
			t.Errorf("the upstream was asked %s for a packet function", c)
		}
	}
}

func Test_upstream_mode_refuses_a_name_keel_and_the_upstream_both_hold(t *testing.T) {
	f := &fakeUpstream{fns: map[string]types.FunctionStatus{"dup": {Name: "dup"}, "web": {Name: "web"}}}
	h, st, url := splitGateway(t, f)
	if err := st.Put(context.Background(), &chain.Function{Kind: chain.KindNF, Deployment: types.FunctionDeployment{Service: "dup"}}); err != nil {
		t.Fatal(err)
	}
	both := "function dup exists twice: as a packet function in keel and as a normal function at the upstream provider " + url
	for _, c := range []struct{ method, path, body, want string }{
		{http.MethodGet, "/system/functions", "", both},
		{http.MethodGet, "/system/function/dup", "", both},
		{http.MethodPost, "/system/scale-function/dup", `{"replicas":2}`, both},
		{http.MethodDelete, "/system/functions", `{"functionName":"dup"}`, both},
		{http.MethodPost, "/function/dup", "hi", both},
		{http.MethodPut, "/system/functions", `{"service":"dup","image":"x"}`, "the name dup is a packet function in keel"},
		{http.MethodPost, "/system/functions", `{"service":"web","image":"x","labels":{"com.keel.kind":"nf"}}`,
			"the name web is a normal function at the upstream provider " + url},
	} {
		if code, body := call(h, c.method, c.path, c.body); code != http.StatusConflict || !strings.Contains(body, c.want) ||
			strings.Contains(body, "conflict") {
			t.Errorf("%s %s: %d %q, want 409 with %q", c.method, c.path, code, body, c.want)
		}
	}
	if _, err := store.Get[chain.Function](context.Background(), st, "web"); err == nil {
		t.Error("the refused packet function web is in keel's store")
	}
}

func Test_upstream_mode_names_the_upstream_when_it_does_not_answer(t *testing.T) {
	f := &fakeUpstream{fns: map[string]types.FunctionStatus{}}
	srv := httptest.NewServer(f)
	srv.Close() // nothing listens there any more
	up, err := upstream.New(srv.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	h := NewRouter(context.Background(), &provider.Provider{Store: testredis.Store(t), Metrics: metrics.New()}, metrics.New(), nil, nil, up, nil)
	// What keel refuses by itself never waits for the upstream.
	for _, c := range []struct{ method, path, body string }{
		{http.MethodDelete, "/system/functions", `{"functionName":""}`},
		{http.MethodGet, "/system/logs", ""},
	} {
		if code, out := call(h, c.method, c.path, c.body); code != http.StatusBadRequest {
			t.Errorf("%s %s without a name: %d %q, want keel's 400", c.method, c.path, code, out)
		}
	}
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/system/functions", ""},
		{http.MethodPost, "/system/functions", `{"service":"hello","image":"x"}`},
		{http.MethodPost, "/system/functions", `{"service":"ttlguard","image":"x","labels":{"com.keel.kind":"nf"}}`},
		{http.MethodGet, "/system/function/hello", ""},
		{http.MethodPost, "/function/hello", "hi"},
		{http.MethodGet, "/system/secrets", ""},
	} {
		code, body := call(h, c.method, c.path, c.body)
		if code != http.StatusBadGateway || !strings.Contains(body, "upstream faas-provider "+srv.URL+": ") ||
			!strings.Contains(body, "connection refused") {
			t.Errorf("%s %s: %d %q, want 502 naming %s", c.method, c.path, code, body, srv.URL)
		}
	}
}
