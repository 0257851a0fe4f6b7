// SPDX-License-Identifier: Apache-2.0

package provider

// Normal functions: HTTP functions run as containers by the Runtime, like any OpenFaaS provider.

import (
	"context"
	"fmt"
	"log"
	"net/url"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/fnscale"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/openfaas/faas-provider/types"
	"k8s.io/apimachinery/pkg/api/resource"
)

func (p *Provider) deployNormal(ctx context.Context, f *chain.Function, created bool) error {
	if p.Runtime == nil {
		return fmt.Errorf("%w: image: normal functions need a container engine (--docker)", ErrInvalid)
	}
	fd := &f.Deployment
	spec, err := p.ScaleSpec(fd)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := checkResources(fd); err != nil {
		return err
	}
	if err := p.checkImage(ctx, fd.Image); err != nil {
		return err
	}
	if created {
		f.Replicas = spec.Min
	} else if f.Replicas > 0 {
		f.Replicas = max(spec.Min, min(spec.Max, f.Replicas)) // an update's new bounds apply at once
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
	p.Metrics.Services.WithLabelValues(fd.Service).Set(float64(f.Replicas))
	p.heard(fd.Service, f.Replicas)
	return nil
}

// ScaleSpec reads a normal function's com.openfaas.scale.* labels (fnscale) with the
// provider's defaults; an error names the label.
func (p *Provider) ScaleSpec(fd *types.FunctionDeployment) (fnscale.Spec, error) {
	d := fnscale.OpenFaaS()
	if p.Scaling != nil {
		d = *p.Scaling
	}
	var labels map[string]string
	if fd.Labels != nil {
		labels = *fd.Labels
	}
	s, err := fnscale.Parse(labels, d)
	if err == nil && s.Type == fnscale.CPU {
		if _, ok := p.Runtime.(CPUReader); !ok {
			err = fmt.Errorf("labels.%s: cpu: this gateway's backend cannot read its functions' CPU use; use rps or capacity", fnscale.LabelType)
		}
	}
	return s, err
}

// CPUReader is a Runtime that can read its functions' CPU use (com.openfaas.scale.type=cpu).
type CPUReader interface {
	// CPUSeconds is the CPU time the function's running replicas have used so far.
	CPUSeconds(ctx context.Context, name string) (float64, error)
}

// checkResources refuses limits and requests that are not Kubernetes quantities (both
// backends take them so: 128Mi, 0.5, 500m).
func checkResources(fd *types.FunctionDeployment) error {
	for _, r := range []struct {
		field string
		res   *types.FunctionResources
	}{{"limits", fd.Limits}, {"requests", fd.Requests}} {
		if r.res == nil {
			continue
		}
		for _, q := range []struct{ name, v string }{{"memory", r.res.Memory}, {"cpu", r.res.CPU}} {
			if q.v == "" {
				continue
			}
			if v, err := resource.ParseQuantity(q.v); err != nil || v.Sign() <= 0 {
				return fmt.Errorf("%w: %s.%s: %q: expected a positive quantity such as 128Mi (memory) or 500m (cpu)", ErrInvalid, r.field, q.name, q.v)
			}
		}
	}
	return nil
}

// Wake makes sure a normal function has a replica ready for a call: a function scaled to
// zero is scaled to its com.openfaas.scale.min (at least one), and the call waits, up to
// WakeTimeout, for a replica to pass its health check (OpenFaaS' scale from zero). It
// returns ErrNotFound for a name keel does not hold, ErrInvalid for a chain or packet
// function (saying how they are used) and ErrUnavailable when no replica was ready in time.
func (p *Provider) Wake(ctx context.Context, name string) error {
	if p.Runtime != nil && p.Runtime.Running(name) > 0 {
		return nil // the common case: no store read on the invoke path
	}
	f, err := p.lookup(ctx, name)
	if err != nil {
		return err
	}
	if f.Kind != "" {
		return p.CheckInvocable(ctx, name)
	}
	if p.Runtime == nil {
		return fmt.Errorf("%w: function %s: no container engine runs normal functions", ErrUnavailable, name)
	}
	if f.Replicas == 0 {
		if err := p.scaleFromZero(ctx, name); err != nil {
			return err
		}
	}
	wait := p.WakeTimeout
	if wait <= 0 {
		wait = DefaultWakeTimeout
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := p.Runtime.Await(wctx, name); err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // the caller went away
		}
		return fmt.Errorf("%w: function %s has no replica ready after %s (faas-cli describe %s, faas-cli logs %s)",
			ErrUnavailable, name, wait, name, name)
	}
	return nil
}

// scaleFromZero scales a function that has no replicas to its minimum; of calls that come
// together, the first scales and the others find it done.
func (p *Provider) scaleFromZero(ctx context.Context, name string) error {
	ctx, cancel := p.bounded(ctx)
	defer cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := p.lookup(ctx, name)
	if err != nil || f.Replicas > 0 || f.Kind != "" {
		return err
	}
	spec, err := p.ScaleSpec(&f.Deployment)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := p.setReplicas(ctx, f, spec.Min); err != nil {
		return err
	}
	log.Printf("scaled %s from zero to %d replica(s) for a call", name, spec.Min)
	p.heard(name, spec.Min)
	return nil
}

// Autoscale sets a normal function's replicas from `from` to `to` for the controller,
// unless they changed meanwhile (a deploy, faas-cli scale, a call from zero): false then.
func (p *Provider) Autoscale(ctx context.Context, name string, from, to uint64, why string) (bool, error) {
	ctx, cancel := p.bounded(ctx)
	defer cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := p.lookup(ctx, name)
	if err != nil || f.Kind != "" || f.Replicas != from || p.Runtime == nil {
		return false, err
	}
	if err := p.setReplicas(ctx, f, to); err != nil {
		return false, err
	}
	log.Printf("autoscaled %s from %d to %d replica(s): %s", name, from, to, why)
	return true, nil
}

// Orchestration names where normal functions run, for /system/info: "kubernetes" or "docker".
func (p *Provider) Orchestration() string {
	if o, ok := p.Runtime.(interface{ Orchestration() string }); ok {
		return o.Orchestration()
	}
	return "docker"
}

// NormalFunction returns the normal function name; ErrNotFound when keel holds no function
// of that name, ErrInvalid when it is a chain or a packet function.
func (p *Provider) NormalFunction(ctx context.Context, name string) (*chain.Function, error) {
	f, err := p.lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	if f.Kind != "" {
		return nil, fmt.Errorf("%w: %s is a %s: only normal functions scale by replicas", ErrInvalid, name, kindName(f.Kind))
	}
	return f, nil
}

// NormalFunctions returns the deployed normal functions.
func (p *Provider) NormalFunctions(ctx context.Context) ([]*chain.Function, error) {
	all, err := store.List[chain.Function](ctx, p.Store)
	if err != nil {
		return nil, err
	}
	var out []*chain.Function
	for _, f := range all {
		if f.Kind == "" {
			out = append(out, f)
		}
	}
	return out, nil
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
	name = p.trimNamespace(name)
	u, err := p.Runtime.Resolve(name)
	if err == nil {
		if err := p.Store.CountInvocation(context.Background(), name); err != nil {
			log.Printf("count invocation of %s: %v", name, err)
		}
	}
	return u, err
}

// CPUSeconds is the CPU time normal function name's replicas have used so far: 0 when the
// container engine cannot tell (ScaleSpec refuses com.openfaas.scale.type=cpu then).
func (p *Provider) CPUSeconds(ctx context.Context, name string) (float64, error) {
	r, ok := p.Runtime.(CPUReader)
	if !ok {
		return 0, nil
	}
	return r.CPUSeconds(ctx, name)
}
