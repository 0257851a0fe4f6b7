// SPDX-License-Identifier: Apache-2.0

package upstream

import (
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
