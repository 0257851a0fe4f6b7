// SPDX-License-Identifier: Apache-2.0

package provider

// What faas-cli list and describe show, and the chain gauges.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/openfaas/faas-provider/types"
)

// UpdateChainMetrics recomputes a chain's keel_* gauges from its instances in the store.
func (p *Provider) UpdateChainMetrics(ctx context.Context, name string) {
	f, err := store.Get[chain.Function](ctx, p.Store, name)
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
func (p *Provider) SetChainMetrics(f *chain.Function, insts []*store.Instance) {
	if f == nil || f.Chain == nil {
		return
	}
	name := f.Deployment.Service
	var pooled, attached, flows float64
	var packets, nfDrops, vfDropped, rate float64
	for _, in := range insts {
		if in.State == store.Attached {
			attached++
		} else {
			pooled++
		}
		flows += float64(in.Flows)
		packets += float64(in.Packets)
		nfDrops += float64(in.NFDrops)
		vfDropped += float64(in.VFDropped)
		rate += in.RateGbps
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
	m.ChainNFDrops.Set(nfDrops, name)
	m.ChainVFDropped.Set(vfDropped, name)
	m.ChainRate.WithLabelValues(name).Set(rate * 1e9)
	m.ChainP99.WithLabelValues(name).Set(store.SojournOf(insts).P99us / 1e6)
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
	all, err := store.List[chain.Function](ctx, p.Store)
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

func (p *Provider) status(ctx context.Context, f *chain.Function) (*types.FunctionStatus, error) {
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
	labels["faas_function"] = fd.Service // as faas-netes labels what it deploys
	st := &types.FunctionStatus{Name: fd.Service, Image: fd.Image, Namespace: p.NamespaceName(), EnvProcess: fd.EnvProcess,
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
		describeChain(f.Chain, insts, ann, p.serverBudget(f.Chain.SLO.P99us))
		st.Image = f.Chain.Summary()
		// What an OpenFaaS user expects: replicas are the instances serving flows (attached),
		// available ones are those their agent reports running, lately; the idle pool is
		// described apart.
		st.Replicas = 0
		idle, idleReady, draining := 0, 0, 0
		for _, in := range insts {
			running := p.running(in)
			switch {
			case in.State == store.Attached:
				st.Replicas++
				if running {
					st.AvailableReplicas++
				}
				if in.Draining {
					draining++
				}
			case running:
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
			if draining > 0 {
				ann["com.keel.runs"] += fmt.Sprintf("; %d of the attached run the previous version until their flows end (rolling update)", draining)
			}
		}
	}
	return st, nil
}

// running tells whether an instance's agent reports it running: phase ready in a report no
// older than ReportStale (an agent that stopped reporting does not keep it available).
func (p *Provider) running(in *store.Instance) bool {
	stale := p.ReportStale
	if stale <= 0 {
		stale = DefaultReportStale
	}
	return in.Phase == "ready" && time.Since(in.ReportedAt) <= stale
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none yet"
	}
	return strings.Join(names, ", ")
}

// serverBudget is the server's share of a p99 SLO of sloUs (ServerBudget; without it, all).
func (p *Provider) serverBudget(sloUs float64) float64 {
	if p.ServerBudget == nil {
		return sloUs
	}
	return p.ServerBudget(sloUs)
}

// describeChain writes the chain's NFs, placement (and its refinement, if any), instances, rate
// and p99 (measured, against the server budget budgetUs, beside the placer's prediction) into
// annotations.
func describeChain(c *chain.Chain, insts []*store.Instance, ann map[string]string, budgetUs float64) {
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
	// On a rack with SmartNICs or several NUMA nodes: the placer's refinement (issue 17)
	if r := c.RefinedSummary(); r != "" {
		ann["com.keel.refined"] = r
		ann["com.keel.refined-gains"] = c.RefineGains()
	}
	var parts []string
	var rate float64
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
		if !in.ReportedAt.IsZero() && time.Since(in.ReportedAt) > DefaultReportStale {
			phase += fmt.Sprintf(" (no report for %s)", time.Since(in.ReportedAt).Round(time.Second))
		}
		line := fmt.Sprintf("%s %s worker=%s vlan=%d core=%s flows=%d phase=%s", in.ID, in.State, in.Worker, in.VLAN, core, in.Flows, phase)
		if in.Draining {
			line += " draining"
		}
		if in.State == store.Attached {
			line += fmt.Sprintf(" load=%.2f/%.2f batch=%d", in.Load, in.Threshold, in.Batch)
			if in.Overloaded {
				line += " overloaded"
			}
		}
		if in.Why != "" {
			line += " (" + in.Why + ")"
		}
		if in.P99us > 0 {
			line += fmt.Sprintf(" server_p99=%.1fus", in.P99us)
		}
		parts = append(parts, line)
		rate += in.RateGbps
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	sort.Strings(parts)
	ann["com.keel.instances"] = strings.Join(parts, "; ")
	ann["com.keel.rate"] = fmt.Sprintf("%.3f Gbps (placed %.3f Gbps)", rate, c.Placement.RateGbps)
	predicted := fmt.Sprintf("predicted %.1f us (the placer's model)", c.Placement.LatencyUs)
	budget := "no SLO"
	if c.SLO.P99us > 0 {
		budget = fmt.Sprintf("server budget %.1f us of the %g us SLO", budgetUs, c.SLO.P99us)
	}
	if so := store.SojournOf(insts); so.Measured > 0 {
		ann["com.keel.p99"] = fmt.Sprintf("measured %.1f us server sojourn (p50 %.1f, p99.9 %.1f) over the last %.1f s window of %d instance(s); %s; %s",
			so.P99us, so.P50us, so.P999us, so.WindowS, so.Measured, budget, predicted)
	} else {
		ann["com.keel.p99"] = fmt.Sprintf("not measured yet (no attached instance reported a window); %s; %s", budget, predicted)
	}
}
