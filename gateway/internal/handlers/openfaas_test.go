// SPDX-License-Identifier: Apache-2.0

package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	"github.com/openfaas/faas-provider/types"
)

func Test_system_info_parses_as_the_OpenFaaS_gateways(t *testing.T) {
	r := NewRouter(context.Background(), &provider.Provider{Store: testredis.Store(t)}, metrics.New(), nil, nil, nil, nil)
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/system/info", nil))
	var info struct {
		Provider *types.ProviderInfo `json:"provider"`
		Version  *types.VersionInfo  `json:"version"`
		Arch     string              `json:"arch"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &info); err != nil || info.Provider == nil || info.Provider.Name != "keel-gateway" ||
		info.Provider.Orchestration != "docker" || info.Provider.Version == nil || info.Version == nil || info.Arch == "" {
		t.Fatalf("%v: %s", err, rec.Body)
	}
}

// Test_unknown_functions_are_404_and_add_no_metric_series: a call of a name nobody deployed
// is 404 naming it, carries a call id, and leaves /metrics as it was (a scanner trying
// names must not grow the invocation counters by a series per name).
func Test_unknown_functions_are_404_and_add_no_metric_series(t *testing.T) {
	m := metrics.New()
	r := NewRouter(context.Background(), &provider.Provider{Store: testredis.Store(t), Metrics: m}, m, nil, nil, nil, nil)
	for _, path := range []string{"/function/scan1", "/function/scan2.openfaas-fn", "/function/scan3/x", "/async-function/scan4"} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader("x")))
		if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "not found in namespace openfaas-fn") ||
			rec.Header().Get(HeaderCallID) == "" || rec.Header().Get(HeaderStartTime) == "" {
			t.Errorf("%s: %d %q %v", path, rec.Code, rec.Body, rec.Header())
		}
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if strings.Contains(rec.Body.String(), "scan") {
		t.Fatalf("/metrics has series of unknown functions:\n%s", rec.Body)
	}
}

func Test_other_namespaces_are_refused_with_400(t *testing.T) {
	r := NewRouter(context.Background(), &provider.Provider{Store: testredis.Store(t), Namespace: "fns"}, metrics.New(), nil, nil, nil, nil)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/system/functions?namespace=openfaas-fn", ""},
		{http.MethodPost, "/system/functions", `{"service":"x","image":"y","namespace":"other"}`},
		{http.MethodDelete, "/system/functions?namespace=other", `{"functionName":"x"}`},
		{http.MethodGet, "/system/function/x?namespace=other", ""},
	} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, strings.NewReader(c.body)))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `it serves "fns"`) {
			t.Errorf("%s %s: %d %q", c.method, c.path, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/system/namespaces", nil))
	if strings.TrimSpace(rec.Body.String()) != `["fns"]` {
		t.Fatalf("/system/namespaces: %s", rec.Body)
	}
	rec = httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/system/functions?namespace=fns", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("list of the served namespace: %d %s", rec.Code, rec.Body)
	}
}

type recordingAlerter struct{ got []string }

func (a *recordingAlerter) Alert(_ context.Context, name, status string) (uint64, uint64, error) {
	a.got = append(a.got, name+" "+status)
	return 1, 2, nil
}

func Test_system_alert_takes_AlertManagers_webhook(t *testing.T) {
	a := &recordingAlerter{}
	r := NewRouter(context.Background(), &provider.Provider{Store: testredis.Store(t)}, metrics.New(), nil, nil, nil, a)
	body := `{"status":"firing","alerts":[{"status":"firing","labels":{"function_name":"fn.openfaas-fn"}},{"labels":{"function_name":"other"}},{"labels":{}}]}`
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/system/alert", strings.NewReader(body)))
	var out []AlertResult
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil || len(out) != 3 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if strings.Join(a.got, ",") != "fn firing,other firing" || out[2].Error == "" || out[0].To != 2 {
		t.Fatalf("alerts %v, results %+v", a.got, out)
	}
}
