// SPDX-License-Identifier: Apache-2.0

// Package events fans out changes to chains, instances and workers to Watch streams.
package events

import (
	"sync"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

// Backlog is how many events a subscriber may fall behind before it is cut off.
const Backlog = 256

// Hub delivers every published event to every subscriber.
type Hub struct {
	mu   sync.Mutex
	subs map[chan *pb.WatchEvent]struct{}
}

// NewHub returns a hub without subscribers.
func NewHub() *Hub { return &Hub{subs: map[chan *pb.WatchEvent]struct{}{}} }

// Subscribe returns a channel of events and a function that ends the subscription. A
// subscriber that falls Backlog events behind is cut off: its channel is closed, so that it
// watches again from a fresh snapshot instead of silently missing a change.
func (h *Hub) Subscribe() (<-chan *pb.WatchEvent, func()) {
	ch := make(chan *pb.WatchEvent, Backlog)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
		h.mu.Unlock()
	}
}

// Publish sends ev to every subscriber without blocking; a subscriber whose backlog is full
// is cut off (see Subscribe).
func (h *Hub) Publish(ev *pb.WatchEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// ChainProto converts a stored chain to its wire form.
func ChainProto(c *chain.Chain) *pb.Chain {
	pc := &pb.Chain{Name: c.Name, Filter: c.Filter, Spec: c.Spec, Slo: c.SLOText, Nfs: c.NFs,
		MemoryBytes: c.MemoryBytes, Cpus: c.CPUs, Tenant: c.Tenant, Secrets: c.Secrets, ReinjectVlan: c.ReinjectVLAN}
	for _, m := range c.Members {
		pc.Members = append(pc.Members, &pb.ChainMember{Name: m.Name, Nf: m.NF, Image: m.Image, ConfigJson: m.Config})
	}
	for _, sw := range c.SwitchNFs {
		pc.SwitchNfs = append(pc.SwitchNfs, &pb.SwitchNf{Name: sw.Name, Nf: sw.NF, ConfigJson: sw.Config, AfterServer: sw.AfterServer})
	}
	for _, n := range c.NICNFs {
		pc.NicNfs = append(pc.NicNfs, &pb.NicNf{Name: n.Name, Nf: n.NF, ConfigJson: n.Config, Egress: n.Egress})
	}
	return pc
}
