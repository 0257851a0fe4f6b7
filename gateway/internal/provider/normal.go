// SPDX-License-Identifier: Apache-2.0

package provider

// Normal functions: HTTP functions run as containers by the Runtime, like any OpenFaaS provider.

import (
	"context"
	"fmt"
	"log"
	"net/url"
	"strconv"
	"strings"

	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/openfaas/faas-provider/types"
)

func (p *Provider) deployNormal(ctx context.Context, f *store.Function, created bool) error {
	if p.Runtime == nil {
		return fmt.Errorf("%w: image: normal functions need a container engine (--docker)", ErrInvalid)
	}
	fd := &f.Deployment
	if err := p.checkImage(ctx, fd.Image); err != nil {
		return err
	}
	if created {
		f.Replicas = minReplicas(fd)
	}
	if err := p.Runtime.Apply(ctx, fd, int(f.Replicas)); err != nil {
		if created {
			_ = p.Runtime.Remove(ctx, fd.Service)
		}
		return fmt.Errorf("deploy %s: %w", fd.Service, err)
	}
	if err := p.Store.Put(ctx, f); err != nil {
		return err
	}
	p.Metrics.Services.WithLabelValues(fd.Service).Set(float64(p.Runtime.Running(fd.Service)))
	return nil
}

// checkImage refuses an image the container engine does not have (no registry is reachable
// here), for normal functions and packet functions alike; without an engine it checks nothing.
func (p *Provider) checkImage(ctx context.Context, image string) error {
	if p.Runtime == nil {
		return nil
	}
	if err := p.Runtime.CheckImage(ctx, image); err != nil {
		return fmt.Errorf("%w: image: %v", ErrInvalid, err)
	}
	return nil
}

// minReplicas reads OpenFaaS's com.openfaas.scale.min label (default 1).
func minReplicas(fd *types.FunctionDeployment) uint64 {
	if fd.Labels != nil {
		if v, err := strconv.ParseUint((*fd.Labels)["com.openfaas.scale.min"], 10, 32); err == nil && v > 0 {
			return v
		}
	}
	return 1
}

// Invocations returns the calls proxied to a function (kept in the store across restarts).
func (p *Provider) Invocations(ctx context.Context, name string) float64 {
	n, err := p.Store.Invocations(ctx, name)
	if err != nil {
		return 0
	}
	return float64(n)
}

// Resolve returns a replica URL of a normal function and counts the invocation
// (faas-provider's BaseURLResolver).
func (p *Provider) Resolve(name string) (url.URL, error) {
	if p.Runtime == nil {
		return url.URL{}, fmt.Errorf("no container engine")
	}
	name = strings.TrimSuffix(name, ".openfaas-fn")
	u, err := p.Runtime.Resolve(name)
	if err == nil {
		if err := p.Store.CountInvocation(context.Background(), name); err != nil {
			log.Printf("count invocation of %s: %v", name, err)
		}
	}
	return u, err
}
