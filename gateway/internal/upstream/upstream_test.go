// SPDX-License-Identifier: Apache-2.0

package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func Test_New_refuses_what_is_not_a_provider_address_or_password(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ url, user, file, want string }{
		{"", "admin", "", "want http(s)://HOST"},
		{"gateway.openfaas:8080", "admin", "", "want http(s)://HOST"},
		{"ftp://gateway.openfaas", "admin", "", "want http(s)://HOST"},
		{"http://admin:pw@gateway.openfaas:8080", "admin", "", "without credentials"},
		{"http://gateway.openfaas:8080", "admin", filepath.Join(dir, "missing"), "--upstream-password-file: open"},
		{"http://gateway.openfaas:8080", "admin", empty, "empty password"},
		{"http://gateway.openfaas:8080", "", empty, "--upstream-user"},
	} {
		if _, err := New(c.url, c.user, c.file); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q, %q, %q): %v, want an error with %q", c.url, c.user, c.file, err, c.want)
		}
	}
	p, err := New("http://gateway.openfaas:8080/", "admin", "")
	if err != nil || p.URL() != "http://gateway.openfaas:8080" {
		t.Errorf("a plain address: %v %v", p, err)
	}
}

func Test_an_upstream_that_refuses_keels_credentials_is_named_not_passed_on_as_a_401(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "invalid credentials", http.StatusUnauthorized)
	}))
	defer srv.Close()
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := New(srv.URL, "admin", pw)
	if err != nil {
		t.Fatal(err)
	}
	want := "upstream faas-provider " + srv.URL + ": it refused keel-gateway's credentials (401)"
	if _, err := p.Has(context.Background(), "hello"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Has: %v, want %q", err, want)
	}
	rec := httptest.NewRecorder()
	p.Forward(rec, httptest.NewRequest(http.MethodPost, "/system/scale-function/hello", strings.NewReader(`{"replicas":2}`)))
	if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), want) {
		t.Errorf("Forward: %d %q, want 502 with %q", rec.Code, rec.Body.String(), want)
	}
	// A function's own 401 is its answer to its caller.
	rec = httptest.NewRecorder()
	p.Invoke(rec, httptest.NewRequest(http.MethodPost, "/function/hello", strings.NewReader("hi")))
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "invalid credentials") {
		t.Errorf("Invoke: %d %q, want the function's 401", rec.Code, rec.Body.String())
	}
}

func Test_Invoke_passes_the_callers_request_without_the_upstreams_credentials(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Write([]byte(r.URL.RequestURI()))
	}))
	defer srv.Close()
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("up-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := New(srv.URL, "admin", pw)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/function/hello/path?q=1", strings.NewReader("hi"))
	req.Header.Set("X-Caller", "yes")
	rec := httptest.NewRecorder()
	p.Invoke(rec, req)
	if rec.Body.String() != "/function/hello/path?q=1" || got.Get("X-Caller") != "yes" || got.Get("Authorization") != "" {
		t.Errorf("the function saw %q with headers %v", rec.Body.String(), got)
	}
}
