// SPDX-License-Identifier: Apache-2.0

// Package metrics exports OpenFaaS's gateway metrics for normal functions and keel_* metrics
// for chains on /metrics.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/openfaas/faas-provider/httputil"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds the gateway's collectors in their own registry.
type Metrics struct {
	Registry    *prometheus.Registry
	Invocations *prometheus.CounterVec
	Seconds     *prometheus.HistogramVec
	Services    *prometheus.GaugeVec

	ChainPackets   *prometheus.GaugeVec
	ChainDrops     *prometheus.GaugeVec
	ChainP99       *prometheus.GaugeVec
	ChainInstances *prometheus.GaugeVec
	ChainCores     *prometheus.GaugeVec
	ChainFlows     *prometheus.GaugeVec
	ChainRate      *prometheus.GaugeVec
}

// New creates and registers every collector.
func New() *Metrics {
	fn := []string{"function_name"}
	ch := []string{"chain"}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Invocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_function_invocation_total", Help: "Function invocations by function and status code",
		}, []string{"function_name", "code"}),
		Seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gateway_functions_seconds", Help: "Function invocation time taken",
		}, []string{"function_name", "code"}),
		Services: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_service_count", Help: "Running replicas of a function (instances of a chain)",
		}, fn),
		ChainPackets:   gauge("keel_chain_packets_total", "Packets a chain's instances processed (reported by agents)", ch),
		ChainDrops:     gauge("keel_chain_drops_total", "Packets a chain's instances dropped (reported by agents)", ch),
		ChainP99:       gauge("keel_chain_p99_latency_seconds", "Worst p99 latency over a chain's instances", ch),
		ChainInstances: gauge("keel_chain_instances", "Chain instances by state (pooled, attached)", []string{"chain", "state"}),
		ChainCores:     gauge("keel_chain_cores", "Server cores a chain's placement uses", ch),
		ChainFlows:     gauge("keel_chain_flows", "Flows assigned to a chain's instances", ch),
		ChainRate:      gauge("keel_chain_rate_gbps", "Rate of a chain's instances (reported by agents)", ch),
	}
	m.Registry.MustRegister(m.Invocations, m.Seconds, m.Services, m.ChainPackets, m.ChainDrops,
		m.ChainP99, m.ChainInstances, m.ChainCores, m.ChainFlows, m.ChainRate,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
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
		iw := httputil.NewHttpWriteInterceptor(w)
		next(iw, r)
		code := strconv.Itoa(iw.Status())
		fn := name(r)
		m.Invocations.WithLabelValues(fn, code).Inc()
		m.Seconds.WithLabelValues(fn, code).Observe(time.Since(start).Seconds())
	}
}

// ForgetChain drops every keel_* series of a removed chain.
func (m *Metrics) ForgetChain(name string) {
	for _, g := range []*prometheus.GaugeVec{m.ChainPackets, m.ChainDrops, m.ChainP99, m.ChainCores, m.ChainFlows, m.ChainRate} {
		g.DeleteLabelValues(name)
	}
	m.ChainInstances.DeletePartialMatch(prometheus.Labels{"chain": name})
	m.Services.DeleteLabelValues(name)
}
