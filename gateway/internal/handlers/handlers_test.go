// SPDX-License-Identifier: Apache-2.0

package handlers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/ui"
	"github.com/openfaas/faas-provider/auth"
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
