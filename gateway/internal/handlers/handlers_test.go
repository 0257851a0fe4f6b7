// SPDX-License-Identifier: Apache-2.0

package handlers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	"github.com/keel-nfv/keel/gateway/internal/ui"
	"github.com/openfaas/faas-provider/auth"
	"github.com/openfaas/faas-provider/types"
)

type emptyStore struct{}

func (emptyStore) List(context.Context) ([]*store.Function, error)              { return nil, nil }
func (emptyStore) Instances(context.Context, string) ([]*store.Instance, error) { return nil, nil }
func (emptyStore) Workers(context.Context) (map[string]*store.Worker, error)    { return nil, nil }
func (emptyStore) Flows(context.Context, string) ([]*store.Flow, error)         { return nil, nil }

func Test_operator_view_is_behind_basic_auth(t *testing.T) {
	creds := &auth.BasicAuthCredentials{User: "admin", Password: "secret"}
	v := &ui.View{Source: emptyStore{}, History: &ui.History{Keep: 1}}
	r := NewRouter(nil, metrics.New(), v, creds)
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
	for _, f := range []*store.Function{
		{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: "chain2"},
			Chain: &chain.Chain{Name: "chain2", Filter: "dst net 198.18.2.0/24"}},
		{Kind: chain.KindNF, Deployment: types.FunctionDeployment{Service: "ttlguard"}},
	} {
		if err := st.Put(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	p := &provider.Provider{Store: st}
	r := NewRouter(p, metrics.New(), nil, nil)
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
