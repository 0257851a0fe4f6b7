// SPDX-License-Identifier: Apache-2.0

package ui

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log"
	"net/http"
	"sync"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/store"
)

// Source is the part of the store the view reads.
type Source interface {
	Functions(ctx context.Context) ([]*chain.Function, error)
	Instances(ctx context.Context, chain string) ([]*store.Instance, error)
	Workers(ctx context.Context) (map[string]*store.Worker, error)
	Flows(ctx context.Context, chain string) ([]*store.Flow, error)
}

// StoreSource is the gateway's store as a Source.
type StoreSource struct{ *store.Store }

// Functions returns every deployed function.
func (s StoreSource) Functions(ctx context.Context) ([]*chain.Function, error) {
	return store.List[chain.Function](ctx, s.Store)
}

// Read takes a snapshot of the store: every function, the instances of chains, the workers
// and how many flows each chain has.
func Read(ctx context.Context, src Source) (Snapshot, error) {
	s := Snapshot{Time: time.Now().UTC(), Instances: map[string][]*store.Instance{}, Flows: map[string]int{}}
	var err error
	if s.Functions, err = src.Functions(ctx); err != nil {
		return s, err
	}
	for _, f := range s.Functions {
		if f.Chain == nil {
			continue
		}
		if s.Instances[f.Deployment.Service], err = src.Instances(ctx, f.Deployment.Service); err != nil {
			return s, err
		}
	}
	flows, err := src.Flows(ctx, "")
	if err != nil {
		return s, err
	}
	for _, f := range flows {
		s.Flows[f.Chain]++
	}
	s.Workers, err = src.Workers(ctx)
	return s, err
}

// History keeps the latest samples of each chain and of each of its instances (a ring of
// Keep each), by chain name and by instance ID ("chain/N": no chain's name has a slash).
type History struct {
	Keep    int
	mu      sync.Mutex
	samples map[string][]Sample
}

// Add appends every chain's and every instance's current point; chains and instances no
// longer there are forgotten.
func (h *History) Add(t Topology) {
	h.mu.Lock()
	defer h.mu.Unlock()
	next := make(map[string][]Sample, len(t.Chains))
	add := func(key string, p Sample) {
		s := append(h.samples[key], p)
		if len(s) > h.Keep {
			s = append([]Sample(nil), s[len(s)-h.Keep:]...)
		}
		next[key] = s
	}
	for _, c := range t.Chains {
		add(c.Name, c.Point(t.Time))
	}
	for _, w := range t.Workers {
		for _, c := range w.Cores {
			for _, sg := range c.Sgroups {
				add(sg.Instance, sg.Point(t.Time))
			}
		}
		for _, sg := range w.Pool {
			add(sg.Instance, sg.Point(t.Time))
		}
	}
	h.samples = next
}

// All returns a copy of every chain's and instance's samples, oldest first.
func (h *History) All() map[string][]Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string][]Sample, len(h.samples))
	for k, v := range h.samples {
		out[k] = append([]Sample(nil), v...)
	}
	return out
}

// View serves the operator's view: it samples the rack every period into History and
// builds the topology on request.
type View struct {
	Source    Source
	Decisions func() []policy.Decision
	History   *History
	// OnSample, when set, sees every sampled topology (the gateway sets its keel_gateway_* gauges).
	OnSample func(Topology)
	// ServerBudget is the server's share of a p99 SLO (Snapshot.ServerBudget).
	ServerBudget func(sloUs float64) float64
}

// Topology reads the store and builds the current topology with the history so far.
func (v *View) Topology(ctx context.Context) (Topology, error) {
	s, err := Read(ctx, v.Source)
	if err != nil {
		return Topology{}, err
	}
	s.ServerBudget = v.ServerBudget
	var d []policy.Decision
	if v.Decisions != nil {
		d = v.Decisions()
	}
	return Build(s, d, v.History.All()), nil
}

// Run samples the rack every period until ctx ends.
func (v *View) Run(ctx context.Context, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		t, err := v.Topology(ctx)
		if err != nil {
			log.Printf("ui: sample: %v", err)
		} else {
			v.History.Add(t)
			if v.OnSample != nil {
				v.OnSample(t)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// MakeTopologyHandler serves GET /system/keel/topology: the topology as JSON.
func MakeTopologyHandler(v *View) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, err := v.Topology(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err := json.NewEncoder(w).Encode(t); err != nil {
			log.Printf("ui: write topology: %v", err)
		}
	}
}

//go:embed static
var static embed.FS

// StaticHandler serves the dashboard's page, script and style sheet under prefix (/ui/).
func StaticHandler(prefix string) http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.StripPrefix(prefix, http.FileServer(http.FS(sub)))
}
