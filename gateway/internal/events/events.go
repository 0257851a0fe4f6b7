// SPDX-License-Identifier: Apache-2.0

// Package events fans out changes to chains, instances and workers to Watch streams.
package events

import (
	"sync"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/keel-nfv/keel/gateway/internal/store"
)

// Hub delivers every published event to every subscriber.
type Hub struct {
	mu   sync.Mutex
	subs map[chan *pb.WatchEvent]struct{}
}

// NewHub returns a hub without subscribers.
func NewHub() *Hub { return &Hub{subs: map[chan *pb.WatchEvent]struct{}{}} }

// Subscribe returns a channel of events and a function that ends the subscription.
// A subscriber that falls 256 events behind loses the oldest events it has not read.
func (h *Hub) Subscribe() (<-chan *pb.WatchEvent, func()) {
	ch := make(chan *pb.WatchEvent, 256)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// Publish sends ev to every subscriber without blocking.
func (h *Hub) Publish(ev *pb.WatchEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
			select {
			case <-ch:
			default:
			}
			select {
			case ch <- ev:
			default:
			}
		}
	}
}

// InstanceProto converts a stored chain instance to its wire form.
func InstanceProto(in *store.Instance) *pb.ChainInstance {
	return &pb.ChainInstance{Id: in.ID, Chain: in.Chain, Worker: in.Worker, VfPort: in.VFPort, Vlan: in.VLAN,
		State: in.State, Core: in.Core, Flows: in.Flows, RateGbps: in.RateGbps, P99Us: in.P99us, Overloaded: in.Overloaded,
		Phase: in.Phase, Reason: in.Reason, Batch: in.Batch}
}

// ChainProto converts a stored chain to its wire form.
func ChainProto(c *chain.Chain) *pb.Chain {
	pc := &pb.Chain{Name: c.Name, Filter: c.Filter, Spec: c.Spec, Slo: c.SLOText, Nfs: c.NFs,
		MemoryBytes: c.MemoryBytes, Cpus: c.CPUs, Tenant: c.Tenant}
	for _, m := range c.Members {
		pc.Members = append(pc.Members, &pb.ChainMember{Name: m.Name, Nf: m.NF, Image: m.Image, ConfigJson: m.Config})
	}
	return pc
}
