// SPDX-License-Identifier: Apache-2.0

// Package provider is the gateway's function registry: it deploys, updates, scales and removes
// normal functions (containers), packet functions (the NF catalog) and chains (validated,
// placed, with a pool of instances), keeping everything in the store.
//
// provider.go holds what every kind shares (Deploy, Delete, Scale, Adopt); normal.go,
// packetfn.go and pool.go what is particular to each kind; status.go what faas-cli list and
// describe show; invoke.go, logs.go and secrets.go the faas-cli verbs beside deploy.
package provider

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/apierr"
	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/fnscale"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/nfcatalog"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/secrets"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/internal/dockerlog"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/types"
)

// DefaultDrainTimeout is how long a rolling update lets the previous version's instances
// keep their flows: a few of the ToR's idle timeouts (10 s), so that flows that go quiet
// end on their own first.
const DefaultDrainTimeout = 60 * time.Second

// DefaultCallTimeout bounds one change of the deployment (deploy, scale, remove), placer,
// image checks and container engine calls included: the provider's lock is never held
// longer, however slow a peer is.
const DefaultCallTimeout = 2 * time.Minute

// DefaultReportStale is three of keel-agent's heartbeats (--heartbeat 10s): an instance whose
// agent has said nothing for that long is not counted available, whatever it said last.
const DefaultReportStale = 30 * time.Second

// Errors the handlers map to HTTP status codes (package apierr).
var (
	ErrNotFound    = apierr.ErrNotFound
	ErrConflict    = apierr.ErrConflict
	ErrInvalid     = apierr.ErrInvalid
	ErrUnavailable = apierr.ErrUnavailable
)

// DefaultNamespace is OpenFaaS's namespace of functions, the one keel serves by default.
const DefaultNamespace = "openfaas-fn"

// DefaultWakeTimeout bounds how long a call of a function scaled to zero waits for its
// first replica (OpenFaaS' gateway waits about as long).
const DefaultWakeTimeout = 30 * time.Second

// Runtime runs normal functions' replicas (Docker here, Kubernetes in production).
type Runtime interface {
	CheckImage(ctx context.Context, image string) error
	Apply(ctx context.Context, fd *types.FunctionDeployment, replicas int) error
	Remove(ctx context.Context, name string) error
	Running(name string) int
	Resolve(name string) (url.URL, error)
	// Await returns once the function has a replica ready for calls, or ctx's error.
	Await(ctx context.Context, name string) error
	Orphans(ctx context.Context, known map[string]bool) ([]string, error)
	Logs(ctx context.Context, name string, o dockerlog.Options) (<-chan dockerlog.Line, error)
}

// Validator checks and places chains.
type Validator interface {
	Validate(ctx context.Context, fd *types.FunctionDeployment, others []*chain.Chain, tenantNFs []chain.TenantNF) (*chain.Chain, map[string]chain.Placement, error)
}

// ChainModeler models a chain from its server NFs and its SLO's p99 bound (costs.Modeler).
type ChainModeler interface {
	Model(name string, nfs []string, p99us float64) (*policy.Model, error)
}

// Provider ties the store, the chain validator, the container runtime, metrics and events.
type Provider struct {
	Store     *store.Store
	Validator Validator
	Runtime   Runtime // nil: normal functions are refused
	// Images runs a packet function's image once to read the NF it adds (keel-nf --list
	// --json); nil: the NF's catalogue entry comes from its com.keel.nf annotation.
	Images nfcatalog.Runner
	// Library is the library's NF catalogue: a packet function may not take one of its names.
	Library *nfcatalog.Catalog
	Metrics *metrics.Metrics
	Hub     *events.Hub
	// Secrets keeps functions' secrets (faas-cli secret); nil: secrets are not supported.
	Secrets *secrets.Store
	// PoolSize is the number of pooled instances a chain with server NFs gets on deploy.
	PoolSize int
	// DrainTimeout bounds a rolling update: an instance of a chain's previous version is
	// removed this long after the redeploy even if flows remain (0: DefaultDrainTimeout).
	DrainTimeout time.Duration
	// RackCores is the server cores of the rack the placer places chains on (the topology's);
	// faas-cli scale of a chain is checked against it as deploy is. 0: not checked.
	RackCores int
	// ReportStale is how old an agent's latest report of an instance may be for the instance
	// to count as available (0: DefaultReportStale).
	ReportStale time.Duration
	// ServerBudget is the server's share of a chain's p99 SLO (controller.SLOLoop's), shown
	// beside its measured p99; nil: the whole SLO.
	ServerBudget func(sloUs float64) float64
	// Models, when set, models a placed chain as the controller will (package costs), so
	// that deploy refuses a chain the controller cannot scale: an SLO no per-core load meets.
	Models ChainModeler
	// Namespace is the one namespace of functions keel serves ("" : DefaultNamespace).
	Namespace string
	// Scaling holds the defaults of normal functions' com.openfaas.scale.* labels (zero
	// value: fnscale.OpenFaaS()).
	Scaling *fnscale.Defaults
	// WakeTimeout bounds a call's wait for a function scaled to zero (0: DefaultWakeTimeout).
	WakeTimeout time.Duration
	// ControlToken is the control-plane token, sent to the agents' /logs.
	ControlToken string
	// CallTimeout bounds each change of the deployment (0: DefaultCallTimeout).
	CallTimeout time.Duration
	// OnReplicas, when set, hears of every change of a normal function's replicas that the
	// autoscaler did not make (deploy, faas-cli scale, scale from zero), so it starts over.
	OnReplicas func(name string, replicas uint64)

	mu sync.Mutex // serialises changes to the deployment
}

// Deploy creates (update=false) or updates (update=true) a function of any kind.
func (p *Provider) Deploy(ctx context.Context, fd *types.FunctionDeployment, update bool) error {
	if fd.Service == "" {
		return fmt.Errorf("%w: service: missing function name", ErrInvalid)
	}
	kind, err := chain.Kind(fd)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if fd.Image == "" && kind == "" {
		return fmt.Errorf("%w: image: missing", ErrInvalid)
	}
	ctx, cancel := p.bounded(ctx)
	defer cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	old, err := store.Get[chain.Function](ctx, p.Store, fd.Service)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if update {
			return fmt.Errorf("%w: function %s", ErrNotFound, fd.Service)
		}
	case err != nil:
		return err
	case !update:
		return fmt.Errorf("%w: function %s is already deployed", ErrConflict, fd.Service)
	case old.Kind != kind:
		return fmt.Errorf("%w: service: the name %s is already used by a %s; remove it first", ErrConflict, fd.Service, kindName(old.Kind))
	}
	if err := p.checkSecrets(fd, kind); err != nil {
		return err
	}
	f := &chain.Function{Kind: kind, Deployment: *fd, CreatedAt: time.Now().UTC(), Replicas: 1}
	if old != nil {
		f.CreatedAt, f.Replicas = old.CreatedAt, old.Replicas
	}
	switch kind {
	case chain.KindChain:
		return p.deployChain(ctx, f, old)
	case chain.KindNF:
		return p.deployNF(ctx, f)
	default:
		return p.deployNormal(ctx, f, old == nil)
	}
}

// bounded gives a change of the deployment its deadline (CallTimeout).
func (p *Provider) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	d := p.CallTimeout
	if d <= 0 {
		d = DefaultCallTimeout
	}
	return context.WithTimeout(ctx, d)
}

func kindName(kind string) string {
	switch kind {
	case chain.KindChain:
		return "chain"
	case chain.KindNF:
		return "packet function"
	}
	return "normal function"
}

func label(fd *types.FunctionDeployment, key string) string {
	if fd.Labels == nil {
		return ""
	}
	return (*fd.Labels)[key]
}

func annotation(fd *types.FunctionDeployment, key string) string {
	if fd.Annotations == nil {
		return ""
	}
	return (*fd.Annotations)[key]
}

// Delete removes a function; a chain's instances, VLANs and keys go with it.
func (p *Provider) Delete(ctx context.Context, name string) error {
	ctx, cancel := p.bounded(ctx)
	defer cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := p.lookup(ctx, name)
	if err != nil {
		return err
	}
	switch f.Kind {
	case chain.KindNF:
		users, err := p.chainsUsing(ctx, name)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return fmt.Errorf("%w: packet function %s is used by chain(s) %s; remove them first", ErrConflict, name, strings.Join(users, ", "))
		}
	case chain.KindChain:
		if err := p.releaseInstances(ctx, name); err != nil {
			return err
		}
	default:
		if p.Runtime != nil {
			if err := p.Runtime.Remove(ctx, name); err != nil {
				return fmt.Errorf("delete %s: %w", name, err)
			}
		}
	}
	var vlans []uint32
	if f.Kind == chain.KindChain && f.Chain != nil && f.Chain.ReinjectVLAN != 0 {
		vlans = append(vlans, f.Chain.ReinjectVLAN)
	}
	if err := p.Store.Delete(ctx, name, vlans...); err != nil {
		return err
	}
	if f.Kind == chain.KindChain {
		p.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_CHAIN_REMOVED, Chain: events.ChainProto(f.Chain)})
		p.Metrics.ForgetChain(name)
	} else {
		p.Metrics.ForgetFunction(name)
	}
	return nil
}

// lookup reads a function from the store; ErrNotFound names it when absent.
func (p *Provider) lookup(ctx context.Context, name string) (*chain.Function, error) {
	f, err := store.Get[chain.Function](ctx, p.Store, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: function %s", ErrNotFound, name)
	}
	return f, err
}

func (p *Provider) chainsUsing(ctx context.Context, nf string) ([]string, error) {
	all, err := store.List[chain.Function](ctx, p.Store)
	if err != nil {
		return nil, err
	}
	var users []string
	for _, f := range all {
		if f.Kind != chain.KindChain {
			continue
		}
		for _, n := range f.Chain.NFs {
			if n == nf {
				users = append(users, f.Deployment.Service)
				break
			}
		}
	}
	return users, nil
}

// Scale sets a normal function's replicas or a chain's instance count.
func (p *Provider) Scale(ctx context.Context, name string, replicas uint64) error {
	ctx, cancel := p.bounded(ctx)
	defer cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := p.lookup(ctx, name)
	if err != nil {
		return err
	}
	switch f.Kind {
	case chain.KindNF:
		return fmt.Errorf("%w: replicas: a packet function is not scaled by itself; scale the chain that uses it", ErrInvalid)
	case chain.KindChain:
		if len(f.Chain.Placement.Subgroups) == 0 {
			return fmt.Errorf("%w: replicas: chain %s runs on the switch only and has no instances", ErrInvalid, name)
		}
		if err := p.checkCores(ctx, f, int(replicas)); err != nil {
			return err
		}
		n, err := p.resizePool(ctx, f, int(replicas))
		if err != nil {
			return err
		}
		// What is there now: only idle instances are removed, so instances that carry flows
		// may keep the chain above the request until the controller detaches them.
		f.Replicas = uint64(n)
		if err := p.Store.Put(ctx, f); err != nil {
			return err
		}
		if uint64(n) > replicas {
			log.Printf("scale %s to %d: %d instance(s) carry flows and stay; the chain keeps %d", name, replicas, n, n)
		}
		p.UpdateChainMetrics(ctx, name)
		return nil
	}
	if p.Runtime == nil {
		return fmt.Errorf("%w: no container engine", ErrInvalid)
	}
	if err := p.setReplicas(ctx, f, replicas); err != nil {
		return err
	}
	p.heard(name, replicas)
	return nil
}

// setReplicas runs replicas of normal function f and records them; the caller holds p.mu.
func (p *Provider) setReplicas(ctx context.Context, f *chain.Function, replicas uint64) error {
	name := f.Deployment.Service
	if err := p.Runtime.Apply(ctx, &f.Deployment, int(replicas)); err != nil {
		return fmt.Errorf("scale %s: %w", name, err)
	}
	f.Replicas = replicas
	if err := p.Store.Put(ctx, f); err != nil {
		return err
	}
	p.Metrics.Services.WithLabelValues(name).Set(float64(replicas))
	return nil
}

func (p *Provider) heard(name string, replicas uint64) {
	if p.OnReplicas != nil {
		p.OnReplicas(name, replicas)
	}
}

// trimNamespace drops the served namespace from a name as OpenFaaS clients write it
// (NAME.NAMESPACE: faas-cli invoke, logs and the certifier do).
func (p *Provider) trimNamespace(name string) string {
	return strings.TrimSuffix(name, "."+p.NamespaceName())
}

// NamespaceName is the namespace keel serves.
func (p *Provider) NamespaceName() string {
	if p.Namespace == "" {
		return DefaultNamespace
	}
	return p.Namespace
}

// checkCores refuses to scale chain f to n instances when they would not fit in the rack's
// server cores beside the other deployed chains, counted as deploy counts them (each chain's
// placement holds its subgroups' cores; an instance of f needs all of f's).
func (p *Provider) checkCores(ctx context.Context, f *chain.Function, n int) error {
	if p.RackCores <= 0 {
		return nil
	}
	per := 0
	for _, sg := range f.Chain.Placement.Subgroups {
		per += sg.Cores
	}
	all, err := store.List[chain.Function](ctx, p.Store)
	if err != nil {
		return err
	}
	held, holders := 0, []string{}
	for _, o := range all {
		if o.Kind != chain.KindChain || o.Deployment.Service == f.Deployment.Service {
			continue
		}
		c := 0
		for _, sg := range o.Chain.Placement.Subgroups {
			c += sg.Cores
		}
		if c > 0 {
			held += c
			holders = append(holders, fmt.Sprintf("%s %d", o.Deployment.Service, c))
		}
	}
	free := max(0, p.RackCores-held)
	if n*per <= free {
		return nil
	}
	others := "no other chain holds any"
	if len(holders) > 0 {
		others = "the other chains hold " + strconv.Itoa(held) + " (" + strings.Join(holders, ", ") + ")"
	}
	return fmt.Errorf("%w: replicas: %d instance(s) of chain %s need %d server core(s) (%d each), but %d of the rack's %d are free: "+
		"%s; nothing changed", ErrInvalid, n, f.Deployment.Service, n*per, per, free, p.RackCores, others)
}

// Adopt brings the container runtime in line with the store after a (re)start: existing
// replicas are kept, missing ones created, containers of unknown functions removed.
func (p *Provider) Adopt(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	all, err := store.List[chain.Function](ctx, p.Store)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, f := range all {
		switch f.Kind {
		case "":
			known[f.Deployment.Service] = true
			if p.Runtime == nil {
				continue
			}
			if err := p.Runtime.Apply(ctx, &f.Deployment, int(f.Replicas)); err != nil {
				return fmt.Errorf("adopt %s: %w", f.Deployment.Service, err)
			}
			p.Metrics.Services.WithLabelValues(f.Deployment.Service).Set(float64(f.Replicas))
		case chain.KindChain:
			p.UpdateChainMetrics(ctx, f.Deployment.Service)
		}
	}
	if p.Runtime == nil {
		return nil
	}
	orphans, err := p.Runtime.Orphans(ctx, known)
	if err != nil {
		return err
	}
	for _, o := range orphans {
		if err := p.Runtime.Remove(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// Holds says what keel holds under name: "chain", "packet function" or "normal function",
// or "" when nothing.
func (p *Provider) Holds(ctx context.Context, name string) (string, error) {
	f, err := store.Get[chain.Function](ctx, p.Store, name)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return kindName(f.Kind), nil
}
