// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/pcapfilter"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/store"
)

// chainIndex is the controller's index of the deployed chains: what classifying and assigning
// a new flow read of them, built from the store's function records once per store generation
// (a deploy, update, scale or removal of any function, or a reload of the store's cache), so
// that no flow decodes a record.
type chainIndex struct {
	gen    uint64
	chains []*indexedChain // in name order, the order classify tries them in
	byName map[string]*indexedChain
}

// indexedChain is one chain of the index. Its record is shared by every reader of the index:
// nothing changes it.
type indexedChain struct {
	fn         *chain.Function
	filter     *pcapfilter.Filter // nil: a filter that does not compile matches nothing
	switchOnly bool               // no NF on a server: its flows need no instance
	model      *policy.Model      // nil for a switch-only chain
	policy     policy.Chain       // the policy's view of a chain with server NFs
}

func (e *indexedChain) name() string { return e.fn.Deployment.Service }

// chains returns the index of the deployed chains as the store holds them now.
func (s *Controller) chains(ctx context.Context) (*chainIndex, error) {
	gen := s.Store.Generation() // before List: a change after it makes the next call rebuild
	if ix := s.index.Load(); ix != nil && ix.gen == gen {
		return ix, nil
	}
	// One rebuild at a time: after a restart every new flow finds no index, and each building
	// its own (cost models included) took the shared core for seconds while the agent's
	// RegisterWorker timed out behind them.
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	gen = s.Store.Generation()
	if ix := s.index.Load(); ix != nil && ix.gen == gen {
		return ix, nil
	}
	all, err := store.List[chain.Function](ctx, s.Store)
	if err != nil {
		return nil, err
	}
	ix := &chainIndex{gen: gen, byName: map[string]*indexedChain{}}
	for _, f := range all {
		if f.Kind != chain.KindChain {
			continue
		}
		e := &indexedChain{fn: f, switchOnly: switchOnly(f.Chain)}
		if flt, err := s.filter(f.Chain.Filter); err == nil {
			e.filter = flt // else refused at deploy; a stored chain with a bad filter matches nothing
		}
		if !e.switchOnly {
			if e.model, err = s.model(f); err != nil {
				return nil, err
			}
			e.policy = e.model.Chain
			if f.Deployment.Labels != nil {
				e.policy.MaxFlows, _ = chain.ScaleTarget(*f.Deployment.Labels) // checked at deploy
			}
			e.policy.MinInstances = int(f.Replicas)
		}
		ix.chains = append(ix.chains, e)
		ix.byName[e.name()] = e
	}
	s.index.Store(ix)
	s.prune(ix)
	return ix, nil
}

// prune forgets the compiled filters and cost models that no deployed chain uses: both are
// keyed by what a redeploy changes (a new filter, spec or SLO makes a new entry), so without
// this they would grow with every redeploy and never shrink when a chain is removed.
func (s *Controller) prune(ix *chainIndex) {
	filters, models := map[string]bool{}, map[string]bool{}
	for _, e := range ix.chains {
		filters[e.fn.Chain.Filter] = true
		models[modelKey(e.fn)] = true
	}
	s.filters.Range(func(k, _ any) bool {
		if !filters[k.(string)] {
			s.filters.Delete(k)
		}
		return true
	})
	s.models.Range(func(k, _ any) bool {
		if !models[k.(string)] {
			s.models.Delete(k)
		}
		return true
	})
}

// switchOnly: the chain has no NF on a server, so its flows need no instance.
func switchOnly(c *chain.Chain) bool {
	return len(c.Members) == 0 && len(c.Placement.Subgroups) == 0
}

// chainMetrics sets a chain's keel_* gauges from its record in the index and its instances
// in the store (without decoding the record).
func (s *Controller) chainMetrics(ctx context.Context, name string) {
	ix, err := s.chains(ctx)
	if err != nil || ix.byName[name] == nil {
		return
	}
	insts, err := s.Store.Instances(ctx, name)
	if err != nil {
		return
	}
	s.Pool.SetChainMetrics(ix.byName[name].fn, insts)
}
