// SPDX-License-Identifier: Apache-2.0

package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"
	"github.com/keel-nfv/keel/gateway/internal/controller"
	"github.com/openfaas/faas-provider/auth"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeInstanceMover answers with rep or err and records what it was asked.
type fakeInstanceMover struct {
	rep   *controller.MoveReport
	err   error
	asked []MoveRequest
}

func (f *fakeInstanceMover) MoveInstance(_ context.Context, from, to string, batch, limit int) (*controller.MoveReport, error) {
	f.asked = append(f.asked, MoveRequest{From: from, To: to, Batch: batch, Limit: limit})
	return f.rep, f.err
}

// POST /system/keel/moves needs the gateway's basic auth, takes a JSON request (batch 100
// unless given), answers the move's report as JSON, and maps the controller's refusals to
// HTTP codes with the reason in the body.
func Test_the_moves_endpoint_authenticates_moves_and_maps_errors(t *testing.T) {
	creds := &auth.BasicAuthCredentials{User: "admin", Password: "secret"}
	mv := &fakeInstanceMover{rep: &controller.MoveReport{Chain: "chain3", From: "chain3/0", To: "chain3/1", Flows: 1, Moved: 1,
		Batches: []controller.MoveBatch{{Flows: 1, Moved: 1, Ms: 2.5, Results: []controller.MoveResult{{Key: "6 198.18.0.1:1 198.18.3.1:80", Moved: true, PauseUs: 120}}}}}}
	r := mux.NewRouter()
	AddMoves(r, mv, creds)
	post := func(body string, login bool) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/system/keel/moves", strings.NewReader(body))
		if login {
			req.SetBasicAuth("admin", "secret")
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w
	}
	if w := post(`{"from":"chain3/0","to":"chain3/1"}`, false); w.Code != http.StatusUnauthorized || len(mv.asked) != 0 {
		t.Fatalf("without login: %d, asked %v", w.Code, mv.asked)
	}
	w := post(`{"from":"chain3/0","to":"chain3/1"}`, true)
	if w.Code != http.StatusOK || len(mv.asked) != 1 || mv.asked[0] != (MoveRequest{From: "chain3/0", To: "chain3/1", Batch: DefaultMoveBatch}) {
		t.Fatalf("move: %d %s, asked %v", w.Code, w.Body, mv.asked)
	}
	var rep controller.MoveReport
	if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil || rep.Moved != 1 || rep.Batches[0].Results[0].PauseUs != 120 {
		t.Fatalf("answer %s: %v", w.Body, err)
	}
	if w := post(`{"from":"chain3/0","to":"chain3/1","batch":5,"limit":7}`, true); w.Code != http.StatusOK || mv.asked[1].Batch != 5 || mv.asked[1].Limit != 7 {
		t.Fatalf("batch and limit: %d, asked %v", w.Code, mv.asked[1])
	}
	for _, body := range []string{`not json`, `{"from":"chain3/0","to":"chain3/1","flows":3}`} {
		if w := post(body, true); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "request body") {
			t.Errorf("%s: %d %s, want 400", body, w.Code, w.Body)
		}
	}
	for code, want := range map[codes.Code]int{codes.InvalidArgument: 400, codes.NotFound: 404, codes.FailedPrecondition: 409,
		codes.Unavailable: 503, codes.Internal: 500} {
		mv.err = status.Error(code, "the reason")
		if w := post(`{"from":"chain3/0","to":"chain3/1"}`, true); w.Code != want || !strings.Contains(w.Body.String(), "the reason") {
			t.Errorf("%v: %d %q, want %d with the reason", code, w.Code, w.Body, want)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/system/keel/moves", nil)
	req.SetBasicAuth("admin", "secret")
	w = httptest.NewRecorder()
	r.ServeHTTP(w, req)
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", w.Code)
	}
}
