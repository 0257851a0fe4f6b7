// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keel-nfv/keel/agent/internal/nfstats"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func Test_agent_metrics_follow_prometheus_conventions(t *testing.T) {
	a := &Agent{status: map[string]*instStatus{}, actions: map[string]uint64{"attach ok": 2}, connected: true}
	a.status["chain3/1"] = &instStatus{chain: "chain3", members: []string{"NAT"}, phase: "ready", attached: true, core: 1, batch: 2,
		stats: sampleState{have: true, pps: 1000, gbps: 0.008, cur: nfstats.Sample{At: time.Now(), Packets: 10, Bytes: 10000, Drops: 3,
			DropsBy: map[string]uint64{"nf": 2, "tx": 1}, NFs: []nfstats.NF{{Name: "nat", PacketsIn: 10, PacketsOut: 8, Dropped: 2}}}}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewMetrics(a))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"instance": true, "chain": true, "position": true, "nf": true, "phase": true,
		"action": true, "result": true, "reason": true}
	scaled := regexp.MustCompile(`_(gbps|mbps|gigabits|megabits|us|ms|microseconds|milliseconds)(_|$)`)
	values := map[string]float64{}
	for _, f := range fams {
		name := f.GetName()
		if !strings.HasPrefix(name, "keel_agent_") || scaled.MatchString(name) {
			t.Errorf("%s: want keel_agent_* in base units", name)
		}
		if (f.GetType() == dto.MetricType_COUNTER) != strings.HasSuffix(name, "_total") {
			t.Errorf("%s: type %v; counters and only counters end in _total", name, f.GetType())
		}
		for _, m := range f.GetMetric() {
			key := name
			for _, l := range m.GetLabel() {
				if !allowed[l.GetName()] {
					t.Errorf("%s: label %q is not from a bounded set", name, l.GetName())
				}
				if l.GetName() == "reason" {
					key += "{" + l.GetValue() + "}"
				}
			}
			values[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for k, want := range map[string]float64{
		"keel_agent_instance_rx_bits_per_second":               8e6,
		"keel_agent_instance_rx_bytes_total":                   10000,
		"keel_agent_instance_dropped_packets_total{nf}":        2,
		"keel_agent_instance_dropped_packets_total{tx}":        1,
		"keel_agent_instance_dropped_packets_total{copy}":      0,
		"keel_agent_instance_dropped_packets_total{malformed}": 0,
		"keel_agent_instance_queue_length_packets":             0,
		"keel_agent_nf_dropped_packets_total":                  2,
	} {
		if got, ok := values[k]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
}
