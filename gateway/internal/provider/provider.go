// SPDX-License-Identifier: Apache-2.0

// Package provider is the gateway's function registry: it deploys, updates, scales and removes
// normal functions (containers), packet functions (the NF catalog) and chains (validated,
// placed, with a pool of instances), keeping everything in the store.
package provider

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/nfcatalog"
	"github.com/keel-nfv/keel/gateway/internal/secrets"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/internal/dockerlog"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/types"
)

// Errors the handlers map to HTTP status codes.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	ErrInvalid  = errors.New("invalid")
)

// Runtime runs normal functions' replicas (Docker here, Kubernetes in production).
type Runtime interface {
	CheckImage(ctx context.Context, image string) error
	Apply(ctx context.Context, fd *types.FunctionDeployment, replicas int) error
	Remove(ctx context.Context, name string) error
	Running(name string) int
	Resolve(name string) (url.URL, error)
	Orphans(ctx context.Context, known map[string]bool) ([]string, error)
	Logs(ctx context.Context, name string, o dockerlog.Options) (<-chan dockerlog.Line, error)
}

// Validator checks and places chains.
type Validator interface {
	Validate(ctx context.Context, fd *types.FunctionDeployment, others []*chain.Chain, tenantNFs []chain.TenantNF) (*chain.Chain, map[string]chain.Placement, error)
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
	// CheckChain, when set, refuses a placed chain the controller cannot scale (an SLO no
	// per-core load meets); its error is reported as invalid input.
	CheckChain func(f *store.Function) error

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
	p.mu.Lock()
	defer p.mu.Unlock()
	old, err := p.Store.Get(ctx, fd.Service)
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
	f := &store.Function{Kind: kind, Deployment: *fd, CreatedAt: time.Now().UTC(), Replicas: 1}
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

func kindName(kind string) string {
	switch kind {
	case chain.KindChain:
		return "chain"
	case chain.KindNF:
		return "packet function"
	}
	return "normal function"
}

// deployNF records a packet function with the NF its image adds to keel-nf (name and argument
// schemas), which chains naming the function are checked against.
func (p *Provider) deployNF(ctx context.Context, f *store.Function) error {
	fd := &f.Deployment
	if p.Library != nil && p.Library.Lookup(fd.Service) != nil {
		return fmt.Errorf("%w: service: %s is the name of a library NF; name the packet function differently", ErrInvalid, fd.Service)
	}
	if v := label(fd, chain.LabelCycles); v != "" {
		if c, err := strconv.ParseFloat(v, 64); err != nil || c <= 0 {
			return fmt.Errorf("%w: labels.%s: %q is not a positive number of cycles per packet", ErrInvalid, chain.LabelCycles, v)
		}
	}
	if v := label(fd, chain.LabelStateful); v != "" && v != "true" && v != "false" {
		return fmt.Errorf("%w: labels.%s: %q is not true or false", ErrInvalid, chain.LabelStateful, v)
	}
	var err error
	switch ann := annotation(fd, chain.AnnotationNF); {
	case p.Images != nil:
		if f.NF, err = nfcatalog.Describe(ctx, p.Images, fd.Image, fd.Service); err != nil {
			return fmt.Errorf("%w: image: %v", ErrInvalid, err)
		}
	case ann != "":
		if f.NF, err = nfcatalog.FromAnnotation(ann); err != nil {
			return fmt.Errorf("%w: annotations.%s: %v", ErrInvalid, chain.AnnotationNF, err)
		}
	default:
		log.Printf("packet function %s: no container engine and no %s annotation: it takes no arguments", fd.Service, chain.AnnotationNF)
	}
	return p.Store.Put(ctx, f)
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

// tenantNF is a deployed packet function as chains see it.
func tenantNF(f *store.Function) chain.TenantNF {
	t := chain.TenantNF{Name: f.Deployment.Service, Image: f.Deployment.Image, NF: f.NF}
	t.Cycles, _ = strconv.ParseFloat(label(&f.Deployment, chain.LabelCycles), 64)
	if v := label(&f.Deployment, chain.LabelStateful); v != "" {
		stateful := v == "true"
		t.Stateful = &stateful
	}
	return t
}

func (p *Provider) deployNormal(ctx context.Context, f *store.Function, created bool) error {
	if p.Runtime == nil {
		return fmt.Errorf("%w: image: normal functions need a container engine (--docker)", ErrInvalid)
	}
	fd := &f.Deployment
	if err := p.Runtime.CheckImage(ctx, fd.Image); err != nil {
		return fmt.Errorf("%w: image: %v", ErrInvalid, err)
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

// minReplicas reads OpenFaaS's com.openfaas.scale.min label (default 1).
func minReplicas(fd *types.FunctionDeployment) uint64 {
	if fd.Labels != nil {
		if v, err := strconv.ParseUint((*fd.Labels)["com.openfaas.scale.min"], 10, 32); err == nil && v > 0 {
			return v
		}
	}
	return 1
}

func (p *Provider) deployChain(ctx context.Context, f *store.Function, old *store.Function) error {
	if f.Deployment.Labels != nil {
		if _, err := chain.ScaleTarget(*f.Deployment.Labels); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	all, err := p.Store.List(ctx)
	if err != nil {
		return err
	}
	var others []*chain.Chain
	var othersF []*store.Function
	var nfs []chain.TenantNF
	for _, o := range all {
		switch {
		case o.Kind == chain.KindChain && o.Deployment.Service != f.Deployment.Service:
			others = append(others, o.Chain)
			othersF = append(othersF, o)
		case o.Kind == chain.KindNF:
			nfs = append(nfs, tenantNF(o))
		}
	}
	c, placements, err := p.Validator.Validate(ctx, &f.Deployment, others, nfs)
	var inv *chain.InvalidError
	if errors.As(err, &inv) {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err != nil {
		return fmt.Errorf("deploy %s: %w", f.Deployment.Service, err)
	}
	if err := c.ApplyDeployment(&f.Deployment); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	f.Chain = c
	if p.CheckChain != nil && len(c.Placement.Subgroups) > 0 {
		if err := p.CheckChain(f); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	if old == nil {
		f.Replicas = uint64(p.PoolSize)
	}
	if len(c.Placement.Subgroups) == 0 {
		f.Replicas = 0
	}
	if old != nil {
		if err := p.releaseInstances(ctx, f.Deployment.Service); err != nil {
			return err
		}
	}
	if err := p.Store.Put(ctx, f); err != nil {
		return err
	}
	for _, o := range othersF {
		if pl, ok := placements[o.Deployment.Service]; ok {
			o.Chain.SetPlacement(pl)
			if err := p.Store.Put(ctx, o); err != nil {
				return err
			}
		}
	}
	p.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_CHAIN_ADDED, Chain: events.ChainProto(c)})
	if err := p.resizePool(ctx, f, int(f.Replicas)); err != nil {
		return err
	}
	p.UpdateChainMetrics(ctx, c.Name)
	return nil
}

// resizePool adds pooled instances, or removes pooled ones, until the chain has n instances.
func (p *Provider) resizePool(ctx context.Context, f *store.Function, n int) error {
	c := f.Chain
	insts, err := p.Store.Instances(ctx, c.Name)
	if err != nil {
		return err
	}
	for len(insts) < n {
		in, err := p.newInstance(ctx, f, "")
		if err != nil {
			return err
		}
		insts = append(insts, in)
	}
	for i := len(insts) - 1; i >= 0 && len(insts) > n; i-- {
		if insts[i].State != store.Pooled {
			continue
		}
		if err := p.Store.DeleteInstance(ctx, insts[i]); err != nil {
			return err
		}
		p.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_REMOVED, Instance: events.InstanceProto(insts[i])})
		insts = append(insts[:i], insts[i+1:]...)
	}
	return nil
}

// AddPooled pre-deploys one more idle instance of a chain on a worker (the controller's
// scale-out); the worker's agent starts it detached.
func (p *Provider) AddPooled(ctx context.Context, name, worker string) (*store.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := p.lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	if f.Kind != chain.KindChain || len(f.Chain.Placement.Subgroups) == 0 {
		return nil, fmt.Errorf("%w: %s has no server NFs to run", ErrInvalid, name)
	}
	in, err := p.newInstance(ctx, f, worker)
	if err != nil {
		return nil, err
	}
	p.UpdateChainMetrics(ctx, name)
	return in, nil
}

// RemovePooled removes an idle instance (the controller's scale-in); an instance that is
// attached again meanwhile stays.
func (p *Provider) RemovePooled(ctx context.Context, in *store.Instance) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	insts, err := p.Store.Instances(ctx, in.Chain)
	if err != nil {
		return err
	}
	for _, cur := range insts {
		if cur.ID == in.ID && cur.State == store.Pooled {
			if err := p.Store.DeleteInstance(ctx, cur); err != nil {
				return err
			}
			p.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_REMOVED, Instance: events.InstanceProto(cur)})
			p.UpdateChainMetrics(ctx, in.Chain)
		}
	}
	return nil
}

// newInstance stores a pooled instance of f on worker ("" = the placement's server) with
// the next free number and a VLAN of its own, and announces it.
func (p *Provider) newInstance(ctx context.Context, f *store.Function, worker string) (*store.Instance, error) {
	c := f.Chain
	insts, err := p.Store.Instances(ctx, c.Name)
	if err != nil {
		return nil, err
	}
	next := 0
	for _, in := range insts {
		if k := instanceNumber(in.ID); k >= next {
			next = k + 1
		}
	}
	vlan, err := p.Store.AllocVLAN(ctx)
	if err != nil {
		return nil, err
	}
	sg := c.Placement.Subgroups
	cores := 0
	for _, s := range sg {
		cores += s.Cores
	}
	if worker == "" {
		worker = sg[0].Server
	}
	in := &store.Instance{ID: fmt.Sprintf("%s/%d", c.Name, next), Chain: c.Name, Worker: worker, VLAN: vlan,
		State: store.Pooled, Core: -1, Cores: cores}
	if err := p.Store.PutInstance(ctx, in); err != nil {
		return nil, err
	}
	p.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: events.InstanceProto(in)})
	return in, nil
}

func instanceNumber(id string) int {
	n, err := strconv.Atoi(id[strings.LastIndex(id, "/")+1:])
	if err != nil {
		return -1
	}
	return n
}

func (p *Provider) releaseInstances(ctx context.Context, name string) error {
	insts, err := p.Store.Instances(ctx, name)
	if err != nil {
		return err
	}
	for _, in := range insts {
		if err := p.Store.DeleteInstance(ctx, in); err != nil {
			return err
		}
		p.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_REMOVED, Instance: events.InstanceProto(in)})
	}
	return nil
}

// Delete removes a function; a chain's instances, VLANs and keys go with it.
func (p *Provider) Delete(ctx context.Context, name string) error {
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
	if err := p.Store.Delete(ctx, name); err != nil {
		return err
	}
	if f.Kind == chain.KindChain {
		p.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_CHAIN_REMOVED, Chain: events.ChainProto(f.Chain)})
		p.Metrics.ForgetChain(name)
	} else {
		p.Metrics.Services.DeleteLabelValues(name)
	}
	return nil
}

// lookup reads a function from the store; ErrNotFound names it when absent.
func (p *Provider) lookup(ctx context.Context, name string) (*store.Function, error) {
	f, err := p.Store.Get(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: function %s", ErrNotFound, name)
	}
	return f, err
}

func (p *Provider) chainsUsing(ctx context.Context, nf string) ([]string, error) {
	all, err := p.Store.List(ctx)
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
		if err := p.resizePool(ctx, f, int(replicas)); err != nil {
			return err
		}
		f.Replicas = replicas
		if err := p.Store.Put(ctx, f); err != nil {
			return err
		}
		p.UpdateChainMetrics(ctx, name)
		return nil
	}
	if p.Runtime == nil {
		return fmt.Errorf("%w: no container engine", ErrInvalid)
	}
	if err := p.Runtime.Apply(ctx, &f.Deployment, int(replicas)); err != nil {
		return fmt.Errorf("scale %s: %w", name, err)
	}
	f.Replicas = replicas
	if err := p.Store.Put(ctx, f); err != nil {
		return err
	}
	p.Metrics.Services.WithLabelValues(name).Set(float64(p.Runtime.Running(name)))
	return nil
}

// Adopt brings the container runtime in line with the store after a (re)start: existing
// replicas are kept, missing ones created, containers of unknown functions removed.
func (p *Provider) Adopt(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	all, err := p.Store.List(ctx)
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
			p.Metrics.Services.WithLabelValues(f.Deployment.Service).Set(float64(p.Runtime.Running(f.Deployment.Service)))
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

// UpdateChainMetrics recomputes a chain's keel_* gauges from its instances in the store.
func (p *Provider) UpdateChainMetrics(ctx context.Context, name string) {
	f, err := p.Store.Get(ctx, name)
	if err != nil || f.Chain == nil {
		return
	}
	insts, err := p.Store.Instances(ctx, name)
	if err != nil {
		return
	}
	p.SetChainMetrics(f, insts)
}

// SetChainMetrics sets a chain's keel_* gauges from its record and instances as the caller
// has just read or written them (AssignFlow: no second read of the store per new flow).
func (p *Provider) SetChainMetrics(f *store.Function, insts []*store.Instance) {
	if f == nil || f.Chain == nil {
		return
	}
	name := f.Deployment.Service
	var pooled, attached, flows float64
	var packets, drops, rate, p99 float64
	for _, in := range insts {
		if in.State == store.Attached {
			attached++
		} else {
			pooled++
		}
		flows += float64(in.Flows)
		packets += float64(in.Packets)
		drops += float64(in.Drops)
		rate += in.RateGbps
		if in.P99us > p99 {
			p99 = in.P99us
		}
	}
	cores := 0
	for _, s := range f.Chain.Placement.Subgroups {
		cores += s.Cores
	}
	m := p.Metrics
	m.ChainInstances.WithLabelValues(name, store.Pooled).Set(pooled)
	m.ChainInstances.WithLabelValues(name, store.Attached).Set(attached)
	m.ChainFlows.WithLabelValues(name).Set(flows)
	m.ChainPackets.Set(packets, name)
	m.ChainDrops.Set(drops, name)
	m.ChainRate.WithLabelValues(name).Set(rate * 1e9)
	m.ChainP99.WithLabelValues(name).Set(p99 / 1e6)
	m.ChainCores.WithLabelValues(name).Set(float64(cores * len(insts)))
	m.Services.WithLabelValues(name).Set(float64(len(insts)))
}

// Status describes one function as faas-cli shows it; a chain's NFs, placement and
// instances are in annotations com.keel.*.
func (p *Provider) Status(ctx context.Context, name string) (*types.FunctionStatus, error) {
	f, err := p.lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	return p.status(ctx, f)
}

// List describes every function.
func (p *Provider) List(ctx context.Context) ([]types.FunctionStatus, error) {
	all, err := p.Store.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]types.FunctionStatus, 0, len(all))
	for _, f := range all {
		st, err := p.status(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, *st)
	}
	return out, nil
}

func (p *Provider) status(ctx context.Context, f *store.Function) (*types.FunctionStatus, error) {
	fd := f.Deployment
	labels := map[string]string{}
	if fd.Labels != nil {
		for k, v := range *fd.Labels {
			labels[k] = v
		}
	}
	ann := map[string]string{}
	if fd.Annotations != nil {
		for k, v := range *fd.Annotations {
			ann[k] = v
		}
	}
	st := &types.FunctionStatus{Name: fd.Service, Image: fd.Image, Namespace: fd.Namespace, EnvProcess: fd.EnvProcess,
		EnvVars: fd.EnvVars, Constraints: fd.Constraints, Secrets: fd.Secrets, Labels: &labels, Annotations: &ann,
		Limits: fd.Limits, Requests: fd.Requests, ReadOnlyRootFilesystem: fd.ReadOnlyRootFilesystem,
		Replicas: f.Replicas, CreatedAt: f.CreatedAt, InvocationCount: p.Invocations(ctx, fd.Service)}
	switch f.Kind {
	case "":
		if p.Runtime != nil {
			st.AvailableReplicas = uint64(p.Runtime.Running(fd.Service))
		}
	case chain.KindNF:
		// A packet function has no process of its own: its image was checked at deploy and
		// chains run it. faas-cli shows it Ready with one replica, the image chains can use.
		st.Replicas, st.AvailableReplicas = 1, 1
		users, err := p.chainsUsing(ctx, fd.Service)
		if err != nil {
			return nil, err
		}
		ann["com.keel.packet-function"] = fmt.Sprintf("an NF for chains, not an HTTP function: it runs inside the chains "+
			"that name it in %s; used by: %s", chain.AnnotationChain, orNone(users))
	case chain.KindChain:
		insts, err := p.Store.Instances(ctx, fd.Service)
		if err != nil {
			return nil, err
		}
		describeChain(f.Chain, insts, ann)
		st.Image = f.Chain.Summary()
		// What an OpenFaaS user expects: replicas are the instances serving flows (attached),
		// available ones are those running; the idle pool is described apart.
		st.Replicas = 0
		idle, idleReady := 0, 0
		for _, in := range insts {
			switch {
			case in.State == store.Attached:
				st.Replicas++
				if in.Phase == "ready" {
					st.AvailableReplicas++
				}
			case in.Phase == "ready":
				idle++
				idleReady++
			default:
				idle++
			}
		}
		ann["com.keel.pool"] = fmt.Sprintf("%d idle instance(s), %d ready", idle, idleReady)
		if len(f.Chain.Placement.Subgroups) == 0 {
			// Every NF runs on the ToR: one replica, the switch's program, always there.
			st.Replicas, st.AvailableReplicas = 1, 1
			ann["com.keel.runs"] = "on the ToR switch only: its rules apply the chain's NFs to every packet of a matching flow; no server instance is needed"
		} else {
			ann["com.keel.runs"] = fmt.Sprintf("on server cores: %d attached instance(s) carry flows, %d idle in the pool", st.Replicas, idle)
		}
	}
	return st, nil
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none yet"
	}
	return strings.Join(names, ", ")
}

// describeChain writes the chain's NFs, placement, instances, rate and p99 into annotations.
func describeChain(c *chain.Chain, insts []*store.Instance, ann map[string]string) {
	ann["com.keel.nfs"] = strings.Join(c.NFs, " -> ")
	ann["com.keel.placement"] = c.Summary()
	var sgs []string
	for _, s := range c.Placement.Subgroups {
		sgs = append(sgs, fmt.Sprintf("%s: %d core(s) [%s]", s.Server, s.Cores, strings.Join(s.NFs, ", ")))
	}
	if len(sgs) == 0 {
		sgs = []string{"none (switch only)"}
	}
	ann["com.keel.subgroups"] = strings.Join(sgs, "; ")
	var parts []string
	var rate, p99 float64
	for _, in := range insts {
		core := "-"
		if in.Core >= 0 {
			core = strconv.Itoa(int(in.Core))
		}
		phase := in.Phase
		if phase == "" {
			phase = "unseen"
		}
		if in.Reason != "" {
			phase += " (" + in.Reason + ")"
		}
		line := fmt.Sprintf("%s %s worker=%s vlan=%d core=%s flows=%d phase=%s", in.ID, in.State, in.Worker, in.VLAN, core, in.Flows, phase)
		if in.State == store.Attached {
			line += fmt.Sprintf(" load=%.2f/%.2f batch=%d", in.Load, in.Threshold, in.Batch)
			if in.Overloaded {
				line += " overloaded"
			}
		}
		if in.Why != "" {
			line += " (" + in.Why + ")"
		}
		parts = append(parts, line)
		rate += in.RateGbps
		if in.P99us > p99 {
			p99 = in.P99us
		}
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	sort.Strings(parts)
	ann["com.keel.instances"] = strings.Join(parts, "; ")
	ann["com.keel.rate"] = fmt.Sprintf("%.3f Gbps (placed %.3f Gbps)", rate, c.Placement.RateGbps)
	ann["com.keel.p99"] = fmt.Sprintf("%.1f us (placed latency %.1f us)", p99, c.Placement.LatencyUs)
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
