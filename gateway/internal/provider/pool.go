// SPDX-License-Identifier: Apache-2.0

package provider

// Chains: validation and placement at deploy, and the pool of instances the controller attaches.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/store"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/protobuf/proto"
)

func (p *Provider) deployChain(ctx context.Context, f *chain.Function, old *chain.Function) error {
	if err := chain.CheckImage(f.Deployment.Image); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if f.Deployment.Labels != nil {
		if _, err := chain.ScaleTarget(*f.Deployment.Labels); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	all, err := store.List[chain.Function](ctx, p.Store)
	if err != nil {
		return err
	}
	var others []*chain.Chain
	var othersF []*chain.Function
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
	if err := p.checkSLO(c); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if old == nil || old.Replicas == 0 {
		f.Replicas = uint64(p.PoolSize)
	}
	if len(c.Placement.Subgroups) == 0 {
		f.Replicas = 0
	}
	// The chain's reinject VLAN: kept from the version it replaces (before the comparison
	// below, which sees it as part of what the instances run), else a new one, given back if
	// the deploy fails from here on.
	if old != nil && old.Chain != nil {
		c.ReinjectVLAN = old.Chain.ReinjectVLAN
	}
	// A rolling update: the old version's instances that carry flows drain (told to the agents
	// before the new version is), the others go at once; the new version's pool follows.
	if old != nil {
		if why := replaces(old.Chain, c); why != "" {
			log.Printf("redeploy of %s replaces its instances (rolling update): %s", c.Name, why)
			if err := p.drainInstances(ctx, old); err != nil {
				return err
			}
		}
	}
	fresh := uint32(0)
	if c.ReinjectVLAN == 0 {
		v, err := p.Store.AllocVLAN(ctx)
		if err != nil {
			return fmt.Errorf("deploy %s: reinject VLAN: %w", c.Name, err)
		}
		c.ReinjectVLAN, fresh = v, v
	}
	if err := p.Store.Put(ctx, f); err != nil {
		if fresh != 0 {
			if ferr := p.Store.FreeVLAN(context.WithoutCancel(ctx), fresh); ferr != nil {
				log.Printf("deploy %s failed and its reinject VLAN %d stays taken: %v", c.Name, fresh, ferr)
			}
		}
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
	if _, err := p.resizePool(ctx, f, int(f.Replicas)); err != nil {
		return err
	}
	p.UpdateChainMetrics(ctx, c.Name)
	return nil
}

// checkSLO refuses a placed chain whose SLO no per-core load meets: even at the lightest
// load of its profile the chain's p99 is over the bound, so no number of instances would
// meet it. Without a model (no Models, or no cost of its NFs) there is nothing to check.
func (p *Provider) checkSLO(c *chain.Chain) error {
	if p.Models == nil || len(c.Placement.Subgroups) == 0 {
		return nil
	}
	var nfs []string
	for _, m := range c.Members {
		nfs = append(nfs, m.NF)
	}
	m, err := p.Models.Model(c.Name, nfs, c.SLO.P99us)
	if err != nil {
		return nil
	}
	if pt, bad := m.Unmeetable(); bad {
		return fmt.Errorf("annotations.%s: p99=%gus cannot be met: at %.0f%% of a core the chain's p99 is already %.1f us (%s)",
			chain.AnnotationSLO, c.SLO.P99us, 100*pt.Load, pt.P99us, m.Profile.Method)
	}
	return nil
}

// replaces says why instances of chain a cannot serve chain b as they run, or "" when they
// can: the same NFs, arguments, images, filter and SLO as the agents and the ingress see them,
// on the same subgroups. A redeploy that changes only labels (e.g. the scale target) keeps its
// instances. Subgroups are compared by what runs in them (server, cores, NFs), not by their
// ids: the placer numbers subgroups across every chain it places, so another chain's deploy
// renumbers them without changing what any instance runs.
func replaces(a, b *chain.Chain) string {
	switch {
	case a == nil || b == nil:
		return "no previous version"
	case !proto.Equal(events.ChainProto(a), events.ChainProto(b)):
		return "its NFs, their arguments or images, its filter or its SLO changed"
	case len(a.Placement.Subgroups) != len(b.Placement.Subgroups):
		return fmt.Sprintf("the placer splits it into %d subgroup(s), was %d", len(b.Placement.Subgroups), len(a.Placement.Subgroups))
	}
	for i, sa := range a.Placement.Subgroups {
		sb := b.Placement.Subgroups[i]
		if sa.Server != sb.Server || sa.Cores != sb.Cores || !slices.Equal(sa.NFs, sb.NFs) {
			return fmt.Sprintf("subgroup %d now runs %v on %s with %d core(s), was %v on %s with %d",
				i, sb.NFs, sb.Server, sb.Cores, sa.NFs, sa.Server, sa.Cores)
		}
	}
	return ""
}

// drainInstances starts a rolling update of old's chain: its attached instances that carry
// flows keep them and the version they run, take no new flows and are removed by the
// controller when the flows end or after DrainTimeout; every other instance of the old
// version is removed at once. Instances already draining from an earlier update keep their
// own version and deadline. Each change is a compare-and-set on the instance as read: one
// that the controller changed meanwhile (attached it, gave it a flow) is read again.
func (p *Provider) drainInstances(ctx context.Context, old *chain.Function) error {
	until := time.Now().UTC().Add(p.drainTimeout())
	runs := events.ChainProto(old.Chain)
	for attempt := 0; ; attempt++ {
		insts, err := p.Store.Instances(ctx, old.Deployment.Service)
		if err != nil {
			return err
		}
		again := false
		for _, in := range insts {
			var err error
			kind := pb.WatchEvent_INSTANCE_CHANGED
			switch {
			case in.Draining:
				continue
			case in.State == store.Attached && in.Flows > 0:
				in.Draining, in.DrainUntil, in.Runs = true, until, runs
				in.Why = fmt.Sprintf("draining: the chain was redeployed; keeps its flow(s) on the previous version, takes no new ones, "+
					"removed when they end or at %s", until.Format(time.TimeOnly))
				err = p.Store.UpdateSpec(ctx, in, false)
			default:
				// Removed only while it has no flow: one assigned meanwhile makes it drain.
				kind, err = pb.WatchEvent_INSTANCE_REMOVED, p.Store.DeleteInstance(ctx, in, true)
			}
			switch {
			case errors.Is(err, store.ErrGone):
			case errors.Is(err, store.ErrStale):
				again = true // read it again: a flow or an attach came meanwhile
			case err != nil:
				return err
			default:
				p.Hub.Publish(&pb.WatchEvent{Kind: kind, Instance: in.Proto()})
			}
		}
		if !again {
			return nil
		}
		if attempt >= 100 {
			return fmt.Errorf("drain %s: its instances kept changing; deploy again", old.Deployment.Service)
		}
	}
}

func (p *Provider) drainTimeout() time.Duration {
	if p.DrainTimeout > 0 {
		return p.DrainTimeout
	}
	return DefaultDrainTimeout
}

// Remove removes an instance with the flows still on it (the controller's end of a rolling
// update, or its scale-in of an idle instance) if it is still as the controller read it:
// store.ErrStale if it changed meanwhile (attached again, say), store.ErrGone if it went.
// A pooled instance is removed only while it carries no flow.
func (p *Provider) Remove(ctx context.Context, in *store.Instance) error {
	if err := p.Store.DeleteInstance(ctx, in, !in.Draining); err != nil {
		return err
	}
	p.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_REMOVED, Instance: in.Proto()})
	p.UpdateChainMetrics(ctx, in.Chain)
	return nil
}

// Attach gives pooled instance in a core and a batch for its first flow f (the controller's
// attach for a new flow), in one step with the flow's assignment, if it is still as the
// controller read it.
func (p *Provider) Attach(ctx context.Context, in *store.Instance, core int32, batch uint32, why string, f *store.Flow) error {
	next := *in
	next.State, next.Core, next.Overloaded, next.Batch, next.Why = store.Attached, core, false, batch, why
	if err := p.Store.AssignFlow(ctx, f, &next, true); err != nil {
		return err
	}
	*in = next
	p.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: in.Proto()})
	return nil
}

// Detach returns attached instance in to the pool, its core given back, if it is still as
// the controller read it and carries no flow.
func (p *Provider) Detach(ctx context.Context, in *store.Instance, why string) error {
	next := *in
	next.State, next.Core, next.Overloaded, next.Why = store.Pooled, -1, false, why
	if err := p.Store.UpdateSpec(ctx, &next, true); err != nil {
		return err
	}
	*in = next
	p.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: in.Proto()})
	return nil
}

// resizePool adds pooled instances, or removes pooled ones, until the chain has n instances
// besides the draining ones (attached instances stay); it returns how many it has then.
func (p *Provider) resizePool(ctx context.Context, f *chain.Function, n int) (int, error) {
	c := f.Chain
	all, err := p.Store.Instances(ctx, c.Name)
	if err != nil {
		return 0, err
	}
	var insts []*store.Instance
	for _, in := range all {
		if !in.Draining {
			insts = append(insts, in)
		}
	}
	for len(insts) < n {
		in, err := p.newInstance(ctx, f, "")
		if err != nil {
			return 0, err
		}
		insts = append(insts, in)
	}
	for i := len(insts) - 1; i >= 0 && len(insts) > n; i-- {
		if insts[i].State != store.Pooled {
			continue
		}
		// Only as read, and without flows: one the controller attached meanwhile stays.
		err := p.Store.DeleteInstance(ctx, insts[i], true)
		if errors.Is(err, store.ErrStale) || errors.Is(err, store.ErrGone) {
			continue
		} else if err != nil {
			return 0, err
		}
		p.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_REMOVED, Instance: insts[i].Proto()})
		insts = append(insts[:i], insts[i+1:]...)
	}
	return len(insts), nil
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

// newInstance stores a pooled instance of f on worker ("" = the placement's server) with
// the next free number and a VLAN of its own, and announces it.
func (p *Provider) newInstance(ctx context.Context, f *chain.Function, worker string) (*store.Instance, error) {
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
	p.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: in.Proto()})
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
		in.Gen = 0 // whatever it is now: the chain goes
		if err := p.Store.DeleteInstance(ctx, in, false); err != nil && !errors.Is(err, store.ErrGone) {
			return err
		}
		p.Hub.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_REMOVED, Instance: in.Proto()})
	}
	return nil
}
