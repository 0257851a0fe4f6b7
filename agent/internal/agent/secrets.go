// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/keel-nfv/keel/agent/internal/runtime"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

// ChainSecretsIn is where an instance's chain secrets are mounted read-only: where OpenFaaS
// mounts a function's secrets, and where keel-nf reads an argument written {"secret": NAME}
// (keel-nf --secrets' default).
const ChainSecretsIn = "/var/openfaas/secrets"

// ChainSecretsDir is the host directory of an instance's chain secrets, one file per secret,
// inside its secrets directory (removed with it).
func (c SpecConfig) ChainSecretsDir(instance string) string {
	return filepath.Join(c.SecretDir(instance), "chain")
}

// chainSecrets reports whether an instance of ch mounts the chain's secrets: the chain lists
// some and the agent has a secrets directory.
func (c SpecConfig) chainSecrets(ch *pb.Chain) bool { return len(ch.Secrets) > 0 && c.SecretsDir != "" }

// writeChainSecrets asks the gateway for the values of the secrets the instance's chain lists
// (keel.v1.Control ChainSecrets: only this worker's instances get them) and writes each to a
// file of mode 0600 in ChainSecretsDir, replacing what an earlier build left.
func (a *Agent) writeChainSecrets(ctx context.Context, id string) error {
	dir := a.cfg.ChainSecretsDir(id)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	resp, err := a.Control.ChainSecrets(ctx, &pb.ChainSecretsRequest{Instance: id, Worker: a.cfg.Worker})
	if err != nil {
		return fmt.Errorf("secrets of %s from the gateway: %w", id, err)
	}
	for _, s := range resp.Secrets {
		if s.Name == "" || s.Name == "." || s.Name == ".." || strings.ContainsAny(s.Name, "/\x00") {
			return fmt.Errorf("secrets of %s: the gateway sent a bad name %q", id, s.Name)
		}
		if err := os.WriteFile(filepath.Join(dir, s.Name), s.Value, 0o600); err != nil {
			return fmt.Errorf("secret %s of %s: %w", s.Name, id, err)
		}
	}
	return nil
}

// needsChainSecrets reports whether an instance's containers mount its chain's secrets.
func needsChainSecrets(specs []runtime.Spec) bool {
	for _, s := range specs {
		for _, m := range s.Mounts {
			if m.Target == ChainSecretsIn {
				return true
			}
		}
	}
	return false
}
