// SPDX-License-Identifier: Apache-2.0

package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/secrets"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	"github.com/keel-nfv/keel/gateway/internal/ui"
	"github.com/keel-nfv/keel/internal/dockerlog"
	"github.com/openfaas/faas-provider/auth"
	"github.com/openfaas/faas-provider/logs"
	"github.com/openfaas/faas-provider/types"
)

type emptyStore struct{}

func (emptyStore) Functions(context.Context) ([]*chain.Function, error)         { return nil, nil }
func (emptyStore) Instances(context.Context, string) ([]*store.Instance, error) { return nil, nil }
func (emptyStore) Workers(context.Context) (map[string]*store.Worker, error)    { return nil, nil }
func (emptyStore) Flows(context.Context, string) ([]*store.Flow, error)         { return nil, nil }

func Test_operator_view_is_behind_basic_auth(t *testing.T) {
	creds := &auth.BasicAuthCredentials{User: "admin", Password: "secret"}
	v := &ui.View{Source: emptyStore{}, History: &ui.History{Keep: 1}}
	r := NewRouter(context.Background(), nil, metrics.New(), v, creds, nil, nil)
	for _, path := range []string{"/ui/", "/ui/app.js", "/system/keel/topology"} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("%s without credentials: %d, want 401", path, rec.Code)
		}
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.SetBasicAuth("admin", "secret")
		rec = httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("%s with credentials: %d, want 200", path, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui", nil))
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/ui/" {
		t.Errorf("/ui: %d to %q, want a redirect to /ui/", rec.Code, rec.Header().Get("Location"))
	}
}

func Test_invoking_a_packet_chain_or_function_says_how_it_is_used(t *testing.T) {
	st := testredis.Store(t)
	ctx := context.Background()
	for _, f := range []*chain.Function{
		{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: "chain2"},
			Chain: &chain.Chain{Name: "chain2", Filter: "dst net 198.18.2.0/24"}},
		{Kind: chain.KindNF, Deployment: types.FunctionDeployment{Service: "ttlguard"}},
	} {
		if err := st.Put(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	p := &provider.Provider{Store: st}
	r := NewRouter(context.Background(), p, metrics.New(), nil, nil, nil, nil)
	for path, want := range map[string]string{
		"/function/chain2":             `chain2 is a packet chain, not an HTTP function: it processes the packets of new flows that match its filter "dst net 198.18.2.0/24"`,
		"/function/chain2.openfaas-fn": `chain2 is a packet chain`,
		"/function/ttlguard":           `ttlguard is a packet function (an NF), not an HTTP function: it runs inside the chains that name it`,
	} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader("hi")))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%s: %d %q, want 400 with %q", path, rec.Code, rec.Body.String(), want)
		}
	}
}

func Test_logs_of_a_chain_come_from_the_agents_of_its_workers(t *testing.T) {
	st := testredis.Store(t)
	ctx := context.Background()
	var asked []string
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer agents-token" {
			http.Error(w, "no token", http.StatusUnauthorized) // keel-agent's /logs takes the control-plane token
			return
		}
		asked = append(asked, r.URL.RequestURI())
		for i, text := range []string{"keel-nf: urlfilter up", "keel-nf: encrypt up", "keel-nf: 12 blocked"} {
			json.NewEncoder(w).Encode(dockerlog.Line{Container: fmt.Sprintf("keel-chain2-0-%d", i%2), Time: time.Unix(int64(i), 0).UTC(), Text: text})
		}
	}))
	defer agent.Close()
	for _, f := range []*chain.Function{
		{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: "chain2"}, Chain: &chain.Chain{Name: "chain2",
			Placement: chain.Placement{Subgroups: []chain.Subgroup{{Server: "w1", Cores: 1}}}}},
		{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: "chain1"}, Chain: &chain.Chain{Name: "chain1"}},
		{Kind: chain.KindNF, Deployment: types.FunctionDeployment{Service: "ttlguard"}},
	} {
		if err := st.Put(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutWorker(ctx, &store.Worker{Name: "w1", Address: strings.TrimPrefix(agent.URL, "http://")}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutInstance(ctx, &store.Instance{ID: "chain2/0", Chain: "chain2", Worker: "w1", State: store.Pooled, Core: -1}); err != nil {
		t.Fatal(err)
	}
	r := NewRouter(context.Background(), &provider.Provider{Store: st, ControlToken: "agents-token"}, metrics.New(), nil, nil, nil, nil)
	gw := httptest.NewServer(r) // faas-provider's log handler needs a real connection (CloseNotifier)
	defer gw.Close()
	resp, err := http.Get(gw.URL + "/system/logs?name=chain2&tail=2")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s", resp.Status)
	}
	var got []string
	dec := json.NewDecoder(resp.Body)
	for dec.More() {
		var m logs.Message
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Name+" "+m.Instance+" "+m.Text)
	}
	if strings.Join(got, "|") != "chain2 keel-chain2-0-1 keel-nf: encrypt up|chain2 keel-chain2-0-0 keel-nf: 12 blocked" {
		t.Errorf("the newest two lines: %q", got)
	}
	if len(asked) != 1 || asked[0] != "/logs?chain=chain2&tail=2" {
		t.Errorf("agent asked %q", asked)
	}
	for q, want := range map[string]struct {
		code int
		text string
	}{
		"/system/logs?name=ttlguard": {400, "ttlguard is a packet function: it has no process of its own"},
		"/system/logs?name=nosuch":   {404, "function nosuch"},
		"/system/logs?name=chain1":   {400, "chain chain1 runs on the ToR switch only: it has no containers and so no logs"},
		"/system/logs":               {400, "name: missing"},
	} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, q, nil))
		if rec.Code != want.code || !strings.Contains(rec.Body.String(), want.text) {
			t.Errorf("%s: %d %q", q, rec.Code, rec.Body.String())
		}
	}
}

func Test_secrets_are_created_listed_updated_and_removed_as_faas_cli_does(t *testing.T) {
	st := testredis.Store(t)
	p := &provider.Provider{Store: st, Secrets: &secrets.Store{Dir: filepath.Join(t.TempDir(), "functions")}}
	r := NewRouter(context.Background(), p, metrics.New(), nil, nil, nil, nil)
	call := func(method, body string) (int, string) {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(method, "/system/secrets", strings.NewReader(body)))
		return rec.Code, rec.Body.String()
	}
	if code, body := call(http.MethodPost, `{"name":"db-password","value":"s3cret"}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body := call(http.MethodPost, `{"name":"db-password","value":"x"}`); code != http.StatusConflict {
		t.Fatalf("create twice: %d %s", code, body)
	}
	if code, body := call(http.MethodPost, `{"name":"../x","value":"x"}`); code != http.StatusBadRequest || !strings.Contains(body, "name") {
		t.Fatalf("bad name: %d %s", code, body)
	}
	if code, body := call(http.MethodPut, `{"name":"db-password","rawValue":"cm90YXRlZA=="}`); code != http.StatusOK {
		t.Fatalf("update: %d %s", code, body)
	}
	path, _ := p.Secrets.Path("db-password")
	if b, _ := os.ReadFile(path); string(b) != "rotated" {
		t.Fatalf("value after update %q", b)
	}
	if code, body := call(http.MethodGet, ""); code != 200 || strings.TrimSpace(body) != `[{"name":"db-password","namespace":"openfaas-fn"}]` {
		t.Fatalf("list: %d %s", code, body)
	}
	// A function that names a missing secret is refused; one that uses a secret keeps it.
	labels := map[string]string{}
	err := p.Deploy(context.Background(), &types.FunctionDeployment{Service: "web", Image: "x", Labels: &labels, Secrets: []string{"api-key"}}, false)
	if err == nil || !strings.Contains(err.Error(), "secrets: ") {
		t.Fatalf("deploy with a missing secret: %v", err)
	}
	if err := st.Put(context.Background(), &chain.Function{Deployment: types.FunctionDeployment{Service: "web", Secrets: []string{"db-password"}}}); err != nil {
		t.Fatal(err)
	}
	if code, body := call(http.MethodDelete, `{"name":"db-password"}`); code != http.StatusConflict || !strings.Contains(body, "used by web") {
		t.Fatalf("remove while used: %d %s", code, body)
	}
	if err := st.Delete(context.Background(), "web"); err != nil {
		t.Fatal(err)
	}
	if code, body := call(http.MethodDelete, `{"name":"db-password"}`); code != http.StatusOK {
		t.Fatalf("remove: %d %s", code, body)
	}
	if code, _ := call(http.MethodDelete, `{"name":"db-password"}`); code != http.StatusNotFound {
		t.Fatalf("remove twice: %d", code)
	}
}
