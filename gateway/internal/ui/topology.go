// SPDX-License-Identifier: Apache-2.0

// Package ui is the operator's view of the rack: the topology (workers → cores → sgroups),
// per-chain history and the controller's decisions, as the JSON of /system/keel/topology and
// the dashboard at /ui/ that polls it.
package ui

import (
	"sort"
	"strconv"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/store"
)

// DecisionsShown is how many of the controller's latest decisions the topology carries.
const DecisionsShown = 100

// Topology is the JSON of /system/keel/topology.
type Topology struct {
	Time      time.Time         `json:"time"`
	Totals    Totals            `json:"totals"`
	Workers   []Worker          `json:"workers"`
	Chains    []Chain           `json:"chains"`
	Decisions []policy.Decision `json:"decisions"` // newest first
}

// Totals sums the rack.
type Totals struct {
	Chains          int     `json:"chains"`
	Attached        int     `json:"instances_attached"`
	Pooled          int     `json:"instances_pooled"`
	Flows           int     `json:"flows"`
	CoresManaged    int     `json:"cores_managed"`
	CoresUsed       int     `json:"cores_used"`
	RateGbps        float64 `json:"rate_gbps"`
	ChainsOverSLO   int     `json:"chains_over_slo"`
	DecisionsInRing int     `json:"decisions_kept"`
}

// Worker is one worker with its managed cores and the instances it keeps idle.
type Worker struct {
	Name  string    `json:"name"`
	Seen  time.Time `json:"seen"`
	Cores []Core    `json:"cores"`
	Pool  []Sgroup  `json:"pool"` // pre-deployed, detached instances
}

// Core is a managed core and the sgroups attached to it.
type Core struct {
	ID      int32    `json:"id"`
	Load    float64  `json:"load"` // sum of its sgroups' estimated loads
	Sgroups []Sgroup `json:"sgroups"`
}

// Sgroup is a chain instance as the controller and its agent last saw it.
type Sgroup struct {
	Chain      string   `json:"chain"`
	Instance   string   `json:"instance"`
	NFs        []string `json:"nfs"` // the server-placed NFs it runs, in order
	State      string   `json:"state"`
	Core       int32    `json:"core"`
	VLAN       uint32   `json:"vlan"`
	Flows      uint32   `json:"flows"`
	RateGbps   float64  `json:"rate_gbps"`
	RatePps    float64  `json:"rate_pps"`
	Load       float64  `json:"load"`
	Threshold  float64  `json:"threshold"`
	VFDropped  uint64   `json:"vf_dropped"`            // refused by its VF, its receive side full (keel's count)
	NFQueueLen uint32   `json:"nf_reported_queue_len"` // its receive queue, as position 0 reports (the NF's own figure)
	Batch      uint32   `json:"batch"`
	P99us      float64  `json:"p99_us"`           // measured server sojourn p99 over the agent's last window (0: none)
	SLOP99us   float64  `json:"slo_p99_us"`       // 0: the chain has no latency bound
	BudgetUs   float64  `json:"server_budget_us"` // the SLO's server share
	Overloaded bool     `json:"overloaded"`
	Phase      string   `json:"phase"`
	Why        string   `json:"why,omitempty"`
	History    []Sample `json:"history"` // oldest first; cores is 1 while it was attached
}

// Chain is one deployed chain, summed over its instances, with its recent history.
type Chain struct {
	Name       string    `json:"name"`
	Spec       string    `json:"spec"`
	Filter     string    `json:"filter"`
	SLO        chain.SLO `json:"slo"`
	NFs        []string  `json:"nfs"`
	ServerNFs  []string  `json:"server_nfs"`
	SwitchNFs  []string  `json:"switch_nfs"`
	SwitchOnly bool      `json:"switch_only"` // no instance: its flows run on the ToR
	Attached   int       `json:"attached"`
	Pooled     int       `json:"pooled"`
	Cores      []string  `json:"cores"` // WORKER:CORE of its attached instances
	Flows      int       `json:"flows"`
	RateGbps   float64   `json:"rate_gbps"`
	RatePps    float64   `json:"rate_pps"`
	// Server sojourn as its attached instances measured it over their last windows (the
	// largest of theirs: store.SojournOf); 0: not measured. SLOMet: p99 within the server
	// budget, the SLO's share that the server has (the rest is the network's).
	P99us    float64  `json:"p99_us"`
	P50us    float64  `json:"p50_us"`
	P999us   float64  `json:"p999_us"`
	WindowS  float64  `json:"window_s"`
	BudgetUs float64  `json:"server_budget_us"`
	SLOMet   bool     `json:"slo_met"`
	History  []Sample `json:"history"` // oldest first
}

// Sample is one point of a chain's history.
type Sample struct {
	Time     time.Time `json:"t"`
	RateGbps float64   `json:"rate_gbps"`
	Cores    int       `json:"cores"`
	P99us    float64   `json:"p99_us"`
	Flows    int       `json:"flows"`
}

// Snapshot is what the topology is built from: the store's records at one moment.
type Snapshot struct {
	Time      time.Time
	Functions []*chain.Function            // every function; only chains are shown
	Instances map[string][]*store.Instance // by chain
	Workers   map[string]*store.Worker
	// Flows are the live flows of each chain (a switch-only chain's flows have no instance);
	// a chain absent here counts its instances' flows.
	Flows map[string]int
	// ServerBudget is the server's share of a p99 SLO (the controller's); nil: all of it.
	ServerBudget func(sloUs float64) float64
}

// Build assembles the topology from a snapshot, the controller's decisions (oldest first, as
// control.Server.Decisions returns them) and each chain's history.
func Build(s Snapshot, decisions []policy.Decision, history map[string][]Sample) Topology {
	t := Topology{Time: s.Time, Workers: []Worker{}, Chains: []Chain{}, Decisions: []policy.Decision{}}
	workers := map[string]*Worker{}
	cores := map[string]map[int32]*Core{}
	worker := func(name string) *Worker {
		if w := workers[name]; w != nil {
			return w
		}
		w := &Worker{Name: name, Cores: []Core{}, Pool: []Sgroup{}}
		workers[name] = w
		cores[name] = map[int32]*Core{}
		return w
	}
	core := func(w string, id int32) *Core {
		worker(w)
		if c := cores[w][id]; c != nil {
			return c
		}
		c := &Core{ID: id, Sgroups: []Sgroup{}}
		cores[w][id] = c
		return c
	}
	for name, sw := range s.Workers {
		worker(name).Seen = sw.Seen
		for _, id := range sw.CoreIDs {
			core(name, int32(id))
		}
		t.Totals.CoresManaged += len(sw.CoreIDs)
	}
	for _, f := range s.Functions {
		if f.Kind != chain.KindChain || f.Chain == nil {
			continue
		}
		c := f.Chain
		ch := Chain{Name: f.Deployment.Service, Spec: c.Spec, Filter: c.Filter, SLO: c.SLO, NFs: nonNil(c.NFs),
			ServerNFs: []string{}, SwitchNFs: []string{}, Cores: []string{}, History: history[f.Deployment.Service]}
		if ch.History == nil {
			ch.History = []Sample{}
		}
		for _, m := range c.Members {
			ch.ServerNFs = append(ch.ServerNFs, m.Name)
		}
		for _, n := range c.SwitchNFs {
			ch.SwitchNFs = append(ch.SwitchNFs, n.Name)
		}
		ch.SwitchOnly = len(c.Members) == 0
		ch.BudgetUs = c.SLO.P99us
		if s.ServerBudget != nil {
			ch.BudgetUs = s.ServerBudget(c.SLO.P99us)
		}
		so := store.SojournOf(s.Instances[ch.Name])
		ch.P99us, ch.P50us, ch.P999us, ch.WindowS = so.P99us, so.P50us, so.P999us, so.WindowS
		for _, in := range s.Instances[ch.Name] {
			sg := Sgroup{Chain: ch.Name, Instance: in.ID, NFs: ch.ServerNFs, State: in.State, Core: in.Core, VLAN: in.VLAN,
				Flows: in.Flows, RateGbps: in.RateGbps, RatePps: in.RatePps, Load: in.Load, Threshold: in.Threshold,
				VFDropped: in.VFDropped, NFQueueLen: in.NFQueueLen, Batch: in.Batch, P99us: in.P99us, SLOP99us: c.SLO.P99us,
				BudgetUs: ch.BudgetUs, Overloaded: in.Overloaded, Phase: in.Phase, Why: in.Why, History: history[in.ID]}
			if sg.History == nil {
				sg.History = []Sample{}
			}
			ch.Flows += int(in.Flows)
			if in.State == store.Attached && in.Core >= 0 {
				ch.Attached++
				ch.RateGbps += in.RateGbps
				ch.RatePps += in.RatePps
				ch.Cores = append(ch.Cores, coreName(in.Worker, in.Core))
				k := core(in.Worker, in.Core)
				k.Load += in.Load
				k.Sgroups = append(k.Sgroups, sg)
			} else {
				ch.Pooled++
				w := worker(in.Worker)
				w.Pool = append(w.Pool, sg)
			}
		}
		if n, ok := s.Flows[ch.Name]; ok {
			ch.Flows = n
		}
		ch.Cores = uniq(ch.Cores)
		ch.SLOMet = c.SLO.P99us == 0 || ch.P99us <= ch.BudgetUs
		t.Chains = append(t.Chains, ch)
		t.Totals.Chains++
		t.Totals.Attached += ch.Attached
		t.Totals.Pooled += ch.Pooled
		t.Totals.Flows += ch.Flows
		t.Totals.RateGbps += ch.RateGbps
		if !ch.SLOMet {
			t.Totals.ChainsOverSLO++
		}
	}
	sort.Slice(t.Chains, func(i, j int) bool { return t.Chains[i].Name < t.Chains[j].Name })
	names := make([]string, 0, len(workers))
	for n := range workers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w := workers[n]
		ids := make([]int32, 0, len(cores[n]))
		for id := range cores[n] {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			c := cores[n][id]
			sort.Slice(c.Sgroups, func(i, j int) bool { return c.Sgroups[i].Instance < c.Sgroups[j].Instance })
			if len(c.Sgroups) > 0 {
				t.Totals.CoresUsed++
			}
			w.Cores = append(w.Cores, *c)
		}
		sort.Slice(w.Pool, func(i, j int) bool { return w.Pool[i].Instance < w.Pool[j].Instance })
		t.Workers = append(t.Workers, *w)
	}
	t.Totals.DecisionsInRing = len(decisions)
	for i := len(decisions) - 1; i >= 0 && len(t.Decisions) < DecisionsShown; i-- {
		t.Decisions = append(t.Decisions, decisions[i])
	}
	return t
}

// Point is a chain's sample taken from its entry in a topology.
func (c Chain) Point(at time.Time) Sample {
	return Sample{Time: at, RateGbps: c.RateGbps, Cores: len(c.Cores), P99us: c.P99us, Flows: c.Flows}
}

// Point is an instance's sample taken from its entry in a topology.
func (sg Sgroup) Point(at time.Time) Sample {
	cores := 0
	if sg.State == store.Attached {
		cores = 1
	}
	return Sample{Time: at, RateGbps: sg.RateGbps, Cores: cores, P99us: sg.P99us, Flows: int(sg.Flows)}
}

func coreName(worker string, core int32) string {
	return worker + ":" + strconv.Itoa(int(core))
}

func uniq(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
