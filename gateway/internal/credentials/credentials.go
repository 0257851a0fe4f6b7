// SPDX-License-Identifier: Apache-2.0

// Package credentials creates the gateway's basic-auth credentials on first start.
package credentials

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/openfaas/faas-provider/auth"
)

// Ensure reads basic-auth-user and basic-auth-password from dir, creating them (user admin,
// a random password, mode 0600) if they do not exist yet; created reports whether it did.
func Ensure(dir string) (creds *auth.BasicAuthCredentials, created bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("secrets dir %s: %w", dir, err)
	}
	userFile := filepath.Join(dir, "basic-auth-user")
	passFile := filepath.Join(dir, "basic-auth-password")
	_, uerr := os.Stat(userFile)
	_, perr := os.Stat(passFile)
	if os.IsNotExist(uerr) && os.IsNotExist(perr) {
		b := make([]byte, 20)
		if _, err := rand.Read(b); err != nil {
			return nil, false, err
		}
		if err := os.WriteFile(userFile, []byte("admin"), 0o600); err != nil {
			return nil, false, fmt.Errorf("write %s: %w", userFile, err)
		}
		if err := os.WriteFile(passFile, []byte(hex.EncodeToString(b)), 0o600); err != nil {
			return nil, false, fmt.Errorf("write %s: %w", passFile, err)
		}
		created = true
	}
	reader := auth.ReadBasicAuthFromDisk{SecretMountPath: dir}
	creds, err = reader.Read()
	if err != nil {
		return nil, false, err
	}
	if creds.User == "" || creds.Password == "" {
		return nil, false, fmt.Errorf("secrets dir %s: empty user or password", dir)
	}
	return creds, created, nil
}
