// SPDX-License-Identifier: Apache-2.0

package provider

// Chains: validation and placement at deploy, and the pool of instances the controller attaches.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/store"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

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
