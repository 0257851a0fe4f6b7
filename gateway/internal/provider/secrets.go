// SPDX-License-Identifier: Apache-2.0

package provider

import (
	"context"
	"fmt"

	"github.com/openfaas/faas-provider/types"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/store"
)

// checkSecrets refuses a deployment that names a secret that does not exist, or names secrets
// in a packet function (a chain's NFs take them: the chain lists them and an NF argument
// names one as {"secret": NAME}).
func (p *Provider) checkSecrets(fd *types.FunctionDeployment, kind string) error {
	if len(fd.Secrets) == 0 {
		return nil
	}
	if kind == chain.KindNF {
		return fmt.Errorf("%w: secrets: a packet function takes secrets from the chain that runs it "+
			"(list them under the chain's secrets and name one in an argument as {'secret': NAME})", ErrInvalid)
	}
	if p.Secrets == nil {
		return fmt.Errorf("%w: secrets: this gateway keeps no secrets", ErrInvalid)
	}
	for _, name := range fd.Secrets {
		if _, err := p.Secrets.Path(name); err != nil {
			return fmt.Errorf("%w: secrets: %v (create it first: faas-cli secret create %s --from-literal VALUE)", ErrInvalid, err, name)
		}
	}
	return nil
}

// SecretUsers names the functions deployed with the secret.
func (p *Provider) SecretUsers(ctx context.Context, name string) []string {
	all, err := store.List[chain.Function](ctx, p.Store)
	if err != nil {
		return nil
	}
	var out []string
	for _, f := range all {
		for _, s := range f.Deployment.Secrets {
			if s == name {
				out = append(out, f.Deployment.Service)
			}
		}
	}
	return out
}
