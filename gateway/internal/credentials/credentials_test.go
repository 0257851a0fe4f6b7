// SPDX-License-Identifier: Apache-2.0

package credentials

import (
	"os"
	"path/filepath"
	"testing"
)

func Test_Ensure_creates_once_then_reads_back(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	c1, created, err := Ensure(dir)
	if err != nil || !created || c1.User != "admin" || len(c1.Password) != 40 {
		t.Fatalf("first start: %+v %v %v", c1, created, err)
	}
	st, _ := os.Stat(filepath.Join(dir, "basic-auth-password"))
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("password file mode %v", st.Mode())
	}
	c2, created, err := Ensure(dir)
	if err != nil || created || *c2 != *c1 {
		t.Fatalf("second start: %+v %v %v", c2, created, err)
	}
}

func Test_Ensure_rejects_a_half_written_dir(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "basic-auth-user"), []byte("admin"), 0o600)
	if _, _, err := Ensure(dir); err == nil {
		t.Fatal("want an error without basic-auth-password")
	}
}
