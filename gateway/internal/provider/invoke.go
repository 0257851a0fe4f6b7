// SPDX-License-Identifier: Apache-2.0

package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/store"
)

// CheckInvocable returns an ErrInvalid that says how a packet chain or a packet function is
// used when someone invokes it over HTTP (faas-cli invoke); nil for a normal function or a
// name the store does not know (the proxy answers those).
func (p *Provider) CheckInvocable(ctx context.Context, name string) error {
	name = p.trimNamespace(name)
	if p.Runtime != nil && p.Runtime.Running(name) > 0 {
		return nil // a normal function with replicas: no store read on the invoke path
	}
	f, err := store.Get[chain.Function](ctx, p.Store, name)
	if errors.Is(err, store.ErrNotFound) || f == nil {
		return nil
	}
	if err != nil {
		return err
	}
	switch f.Kind {
	case chain.KindChain:
		filter := ""
		if f.Chain != nil {
			filter = f.Chain.Filter
		}
		return fmt.Errorf("%w: %s is a packet chain, not an HTTP function: it processes the packets of new flows "+
			"that match its filter %q, which the ToR steers to it through the ingress; send such traffic to "+
			"see it work (faas-cli describe %s shows its instances and flows)", ErrInvalid, name, filter, name)
	case chain.KindNF:
		return fmt.Errorf("%w: %s is a packet function (an NF), not an HTTP function: it runs inside the chains "+
			"that name it in annotation %s (e.g. \"ACL -> %s\")", ErrInvalid, name, chain.AnnotationChain, name)
	}
	return nil
}
