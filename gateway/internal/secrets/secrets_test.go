// SPDX-License-Identifier: Apache-2.0

package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func Test_Store_create_update_list_delete(t *testing.T) {
	s := &Store{Dir: filepath.Join(t.TempDir(), "functions")}
	if names, err := s.Names(); err != nil || len(names) != 0 {
		t.Fatalf("empty store: %v %v", names, err)
	}
	if err := s.Put("db-password", []byte("s3cret"), false); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("db-password", []byte("again"), false); !errors.Is(err, ErrExists) {
		t.Fatalf("create twice: %v", err)
	}
	if err := s.Put("api-key", []byte("k"), true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of a missing secret: %v", err)
	}
	p, err := s.Path("db-password")
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(p)
	if err := s.Put("db-password", []byte("rotated"), true); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(p)
	if b, _ := os.ReadFile(p); string(b) != "rotated" || !os.SameFile(before, after) {
		t.Fatalf("update: %q, same inode %v (a replica's bind mount keeps the inode)", b, os.SameFile(before, after))
	}
	if st, _ := os.Stat(s.Dir); st.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v", st.Mode().Perm())
	}
	if names, _ := s.Names(); len(names) != 1 || names[0] != "db-password" {
		t.Fatalf("names %v", names)
	}
	for _, bad := range []string{"../etc", "a/b", "", ".hidden", "x y"} {
		if err := s.Put(bad, []byte("v"), false); !errors.Is(err, ErrInvalid) {
			t.Errorf("name %q: %v", bad, err)
		}
	}
	if err := s.Put("empty", nil, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty value: %v", err)
	}
	if err := s.Delete("db-password"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("db-password"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}
