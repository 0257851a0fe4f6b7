// SPDX-License-Identifier: Apache-2.0

// Package secrets keeps functions' secrets (faas-cli secret create/list/update/remove) as
// files, one per secret, as faasd does: DIR/NAME, in a directory only root can enter. A
// function that names a secret gets the file mounted read-only at /var/openfaas/secrets/NAME.
package secrets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
)

// MountDir is where a function finds its secrets (OpenFaaS's path).
const MountDir = "/var/openfaas/secrets"

var (
	// ErrNotFound: no secret of that name.
	ErrNotFound = errors.New("no such secret")
	// ErrExists: create of a name that is taken.
	ErrExists = errors.New("secret exists")
	// ErrInvalid: a bad name or an empty value.
	ErrInvalid = errors.New("invalid secret")
	nameRe     = regexp.MustCompile(`^[a-zA-Z0-9][-a-zA-Z0-9_.]{0,252}$`)
)

// Store is a directory of secrets.
type Store struct{ Dir string }

func (s *Store) path(name string) (string, error) {
	if !nameRe.MatchString(name) || name == "." || name == ".." {
		return "", fmt.Errorf("%w: name %q: letters, digits, '-', '_' and '.', starting with a letter or digit", ErrInvalid, name)
	}
	return filepath.Join(s.Dir, name), nil
}

// Path is the file of secret name on this host.
func (s *Store) Path(name string) (string, error) {
	p, err := s.path(name)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return p, nil
}

// Names lists the secrets in name order.
func (s *Store) Names() ([]string, error) {
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && nameRe.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Put writes a secret: create (update=false) refuses an existing name, update a missing one.
// An update rewrites the file in place: a replica's bind mount holds the file's inode, so a
// new file would leave running replicas with the old value.
func (s *Store) Put(name string, value []byte, update bool) error {
	p, err := s.path(name)
	if err != nil {
		return err
	}
	if len(value) == 0 {
		return fmt.Errorf("%w: %s: empty value (faas-cli secret create %s --from-literal VALUE or --from-file FILE)", ErrInvalid, name, name)
	}
	_, statErr := os.Stat(p)
	switch {
	case update && errors.Is(statErr, os.ErrNotExist):
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	case !update && statErr == nil:
		return fmt.Errorf("%w: %s (faas-cli secret update changes it)", ErrExists, name)
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return err
	}
	if update {
		return os.WriteFile(p, value, 0o644)
	}
	tmp, err := os.CreateTemp(s.Dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// World-readable inside a root-only directory: a function's non-root user can read the
	// file mounted into its container; nobody on the host gets past the directory.
	if _, err := tmp.Write(value); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// Delete removes a secret.
func (s *Store) Delete(name string) error {
	p, err := s.Path(name)
	if err != nil {
		return err
	}
	return os.Remove(p)
}
