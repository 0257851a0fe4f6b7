// SPDX-License-Identifier: Apache-2.0

// Package metrics exports OpenFaaS's gateway metrics for normal functions, keel_chain_* per
// chain and keel_gateway_* for the controller on /metrics. Names follow Prometheus'
// conventions: base units, _total on counters, labels from bounded sets (chains, instance
// states, decision kinds and reasons; never a flow).
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/httputil"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
)

// Metrics holds the gateway's collectors in their own registry.
type Metrics struct {
	Registry    *prometheus.Registry
	Invocations *prometheus.CounterVec
	Started     *prometheus.CounterVec // calls begun: Started - Invocations is in flight
	Seconds     *prometheus.HistogramVec
	Services    *prometheus.GaugeVec

	ChainPackets   *SettableCounterVec
	ChainNFDrops   *SettableCounterVec
	ChainVFDropped *SettableCounterVec
	ChainP99       *prometheus.GaugeVec
	ChainInstances *prometheus.GaugeVec
	ChainCores     *prometheus.GaugeVec
	ChainFlows     *prometheus.GaugeVec
	ChainRate      *prometheus.GaugeVec

	Chains        prometheus.Gauge
	Instances     *prometheus.GaugeVec
	Flows         prometheus.Gauge
	FlowsAssigned *prometheus.CounterVec
	Decisions     *prometheus.CounterVec
	AssignSeconds *prometheus.HistogramVec
	FlowMoves     *prometheus.CounterVec
	FlowMovePause prometheus.Histogram
	// FlowMoveFailures: flows a move left on their source, by chain and the reason.
	FlowMoveFailures *prometheus.CounterVec
}

// AssignFlowMethod is the gRPC method whose latency keel_gateway_assign_flow_duration_seconds measures.
const AssignFlowMethod = "/keel.v1.Control/AssignFlow"

// AssignFlowsMethod is the batched AssignFlow (keel-ingress' new flows of a window): each of
// its flows assigned counts in keel_gateway_flows_assigned_total as AssignFlow's do.
const AssignFlowsMethod = "/keel.v1.Control/AssignFlows"

// New creates and registers every collector.
func New() *Metrics {
	fn := []string{"function_name"}
	ch := []string{"chain"}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Invocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_function_invocation_total", Help: "Function invocations by function and status code",
		}, []string{"function_name", "code"}),
		Started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_function_invocation_started", Help: "Function invocations begun, by function (minus gateway_function_invocation_total: in flight)",
		}, fn),
		Seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gateway_functions_seconds", Help: "Function invocation time taken",
		}, []string{"function_name", "code"}),
		Services: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_service_count", Help: "Replicas of a function as deployed or scaled, ready or not (instances of a chain)",
		}, fn),
		ChainPackets:   NewSettableCounterVec("keel_chain_packets_total", "Packets offered to a chain's instances on their VFs (measured by the agents)", ch),
		ChainNFDrops:   NewSettableCounterVec("keel_chain_nf_reported_drops_total", "Packets a chain's instances dropped, as their NFs report (the NFs' own figures)", ch),
		ChainVFDropped: NewSettableCounterVec("keel_chain_vf_dropped_packets_total", "Packets a chain's instances' VFs could not hand over, their receive side full (measured by the agents)", ch),
		ChainP99:       gauge("keel_chain_p99_latency_seconds", "Server sojourn p99 of a chain: the largest of its attached instances over their last windows (an upper bound of the chain's)", ch),
		ChainInstances: gauge("keel_chain_instances", "Chain instances by state (pooled, attached)", []string{"chain", "state"}),
		ChainCores:     gauge("keel_chain_cores", "Server cores a chain's placement uses", ch),
		ChainFlows:     gauge("keel_chain_flows", "Flows assigned to a chain's instances", ch),
		ChainRate:      gauge("keel_chain_rate_bits_per_second", "Bit rate into a chain's instances (reported by agents)", ch),

		Chains: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "keel_gateway_chains", Help: "Chains deployed",
		}),
		Instances: gauge("keel_gateway_instances", "Chain instances by state (pooled, attached)", []string{"state"}),
		Flows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "keel_gateway_flows", Help: "Flows currently assigned to chains",
		}),
		FlowsAssigned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keel_gateway_flows_assigned_total", Help: "Flows AssignFlow assigned, by chain",
		}, ch),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keel_gateway_scale_decisions_total", Help: "Controller decisions by kind and reason",
		}, []string{"kind", "reason"}),
		AssignSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "keel_gateway_assign_flow_duration_seconds", Help: "AssignFlow calls: request to answer, by result (assigned, refused, error)",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"result"}),
		FlowMoves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keel_gateway_flow_moves_total", Help: "Flows the controller moved to another instance with their state, by chain and reason (scale_in, relieve, operator)",
		}, []string{"chain", "reason"}),
		FlowMovePause: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "keel_gateway_flow_move_pause_seconds", Help: "A moved flow's pause as the ingress measured it: its first packet held to its rule to the new instance confirmed, one observation per flow",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
		FlowMoveFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keel_gateway_flow_move_failures_total", Help: "Flows a move left on their instance, by chain and the reason they did not move (timeout, refused, no_room, global, rule, no_report, ...)",
		}, []string{"chain", "reason"}),
	}
	m.Registry.MustRegister(m.Invocations, m.Started, m.Seconds, m.Services, m.ChainPackets, m.ChainNFDrops, m.ChainVFDropped,
		m.ChainP99, m.ChainInstances, m.ChainCores, m.ChainFlows, m.ChainRate,
		m.Chains, m.Instances, m.Flows, m.FlowsAssigned, m.Decisions, m.AssignSeconds, m.FlowMoves, m.FlowMovePause, m.FlowMoveFailures,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// SetRack sets the rack-wide gauges from the operator view's latest sample.
func (m *Metrics) SetRack(chains, attached, pooled, flows int) {
	m.Chains.Set(float64(chains))
	m.Instances.WithLabelValues("attached").Set(float64(attached))
	m.Instances.WithLabelValues("pooled").Set(float64(pooled))
	m.Flows.Set(float64(flows))
}

// Decision counts one controller decision (control.Server.OnDecision).
func (m *Metrics) Decision(kind, reason string) {
	m.Decisions.WithLabelValues(kind, reason).Inc()
}

// FlowMove counts one flow of a move (controller.Controller.OnFlowMove): moved, with its
// pause, or left where it was for why.
func (m *Metrics) FlowMove(chain, reason string, moved bool, why string, pause time.Duration) {
	if !moved {
		m.FlowMoveFailures.WithLabelValues(chain, why).Inc()
		return
	}
	m.FlowMoves.WithLabelValues(chain, reason).Inc()
	m.FlowMovePause.Observe(pause.Seconds())
}

// AssignFlowInterceptor times AssignFlow and AssignFlows calls and counts the flows they assign; other
// methods pass through untouched.
func (m *Metrics) AssignFlowInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod != AssignFlowMethod && info.FullMethod != AssignFlowsMethod {
		return handler(ctx, req)
	}
	start := time.Now()
	resp, err := handler(ctx, req)
	result := "error"
	if err == nil {
		result = "refused"
		for _, chain := range assignedChains(resp) {
			result = "assigned"
			m.FlowsAssigned.WithLabelValues(chain).Inc()
		}
	}
	m.AssignSeconds.WithLabelValues(result).Observe(time.Since(start).Seconds())
	return resp, err
}

// assignedChains is the chain of each flow a call assigned: AssignFlow's one, or those of an
// AssignFlows batch.
func assignedChains(resp any) []string {
	var out []string
	switch r := resp.(type) {
	case assignBatch:
		for _, f := range r.GetResults() {
			if a := f.GetResponse(); f.GetError() == "" && a.GetAssigned() {
				out = append(out, a.GetChain())
			}
		}
	case assignResponse:
		if r.GetAssigned() {
			out = append(out, r.GetChain())
		}
	}
	return out
}

// assignBatch is what the interceptor reads of a keel.v1 AssignFlowsResponse.
type assignBatch interface {
	GetResults() []*pb.AssignFlowResult
}

// assignResponse is what the interceptor reads of a keel.v1 AssignFlowResponse.
type assignResponse interface {
	GetAssigned() bool
	GetChain() string
}

func gauge(name, help string, labels []string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// InstrumentInvocation counts and times calls to a function through next.
func (m *Metrics) InstrumentInvocation(name func(*http.Request) string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		fn := name(r)
		m.Started.WithLabelValues(fn).Inc()
		iw := httputil.NewHttpWriteInterceptor(w)
		next(iw, r)
		code := strconv.Itoa(iw.Status())
		m.Invocations.WithLabelValues(fn, code).Inc()
		m.Seconds.WithLabelValues(fn, code).Observe(time.Since(start).Seconds())
	}
}

// Calls are a function's invocations as the gateway's counters hold them.
type Calls struct {
	Started, Completed float64
}

// InFlight is the calls begun and not yet answered.
func (c Calls) InFlight() float64 { return max(0, c.Started-c.Completed) }

// Calls reads every function's call counters (gateway_function_invocation_started and
// gateway_function_invocation_total over all codes): what the controller scales normal
// functions on. It collects the two counters alone, not the whole registry.
func (m *Metrics) Calls() map[string]Calls {
	out := map[string]Calls{}
	read := func(c prometheus.Collector, add func(*Calls, float64)) {
		ch := make(chan prometheus.Metric, 64)
		go func() { c.Collect(ch); close(ch) }()
		for pm := range ch {
			var d dto.Metric
			if pm.Write(&d) != nil || d.Counter == nil {
				continue
			}
			for _, l := range d.Label {
				if l.GetName() == "function_name" {
					c := out[l.GetValue()]
					add(&c, d.Counter.GetValue())
					out[l.GetValue()] = c
				}
			}
		}
	}
	read(m.Started, func(c *Calls, v float64) { c.Started += v })
	read(m.Invocations, func(c *Calls, v float64) { c.Completed += v })
	return out
}

// ForgetFunction drops the series of a removed normal function.
func (m *Metrics) ForgetFunction(name string) {
	m.Services.DeleteLabelValues(name)
	m.Started.DeleteLabelValues(name)
	m.Invocations.DeletePartialMatch(prometheus.Labels{"function_name": name})
	m.Seconds.DeletePartialMatch(prometheus.Labels{"function_name": name})
}

// ForgetChain drops every keel_* series of a removed chain.
func (m *Metrics) ForgetChain(name string) {
	for _, g := range []*prometheus.GaugeVec{m.ChainP99, m.ChainCores, m.ChainFlows, m.ChainRate} {
		g.DeleteLabelValues(name)
	}
	m.ChainPackets.Delete(name)
	m.ChainNFDrops.Delete(name)
	m.ChainVFDropped.Delete(name)
	m.FlowsAssigned.DeleteLabelValues(name)
	m.ChainInstances.DeletePartialMatch(prometheus.Labels{"chain": name})
	m.Services.DeleteLabelValues(name)
}

// SettableCounterVec is a counter whose value is set from counts kept elsewhere (the agents'
// packet counters summed over a chain's instances); it is exposed with the counter type, so
// rate() works on it and a removed instance reads as a counter reset.
type SettableCounterVec struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	values map[string]settable
}

type settable struct {
	labels []string
	v      float64
}

// NewSettableCounterVec describes a counter with the given labels.
func NewSettableCounterVec(name, help string, labels []string) *SettableCounterVec {
	return &SettableCounterVec{desc: prometheus.NewDesc(name, help, labels, nil), values: map[string]settable{}}
}

// Set sets the counter of one label set.
func (c *SettableCounterVec) Set(v float64, labels ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.values[key(labels)] = settable{labels: labels, v: v}
}

// Delete forgets one label set.
func (c *SettableCounterVec) Delete(labels ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.values, key(labels))
}

func key(labels []string) string {
	k := ""
	for _, l := range labels {
		k += l + "\x00"
	}
	return k
}

// Describe sends the counter's description.
func (c *SettableCounterVec) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect sends every label set's value.
func (c *SettableCounterVec) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.values {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, s.v, s.labels...)
	}
}
