// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
)

// fakeAssign stands for a keel.v1 AssignFlowResponse.
type fakeAssign struct {
	assigned bool
	chain    string
}

func (f *fakeAssign) GetAssigned() bool { return f.assigned }
func (f *fakeAssign) GetChain() string  { return f.chain }

// exercised is a Metrics with one series of every family.
func exercised(t *testing.T) *Metrics {
	t.Helper()
	m := New()
	m.Invocations.WithLabelValues("hello", "200").Inc()
	m.Seconds.WithLabelValues("hello", "200").Observe(0.01)
	m.Services.WithLabelValues("hello").Set(1)
	m.ChainPackets.Set(10, "chain3")
	m.ChainNFDrops.Set(1, "chain3")
	m.ChainVFDropped.Set(1, "chain3")
	m.ChainP99.WithLabelValues("chain3").Set(20e-6)
	m.ChainInstances.WithLabelValues("chain3", "attached").Set(1)
	m.ChainCores.WithLabelValues("chain3").Set(1)
	m.ChainFlows.WithLabelValues("chain3").Set(2)
	m.ChainRate.WithLabelValues("chain3").Set(1e9)
	m.SetRack(3, 2, 2, 5)
	m.Decision("attach", "cold_start")
	for i := 0; i < 3; i++ {
		m.FlowMove("chain3", "scale_in", true, "", 2*time.Millisecond)
	}
	m.FlowMove("chain3", "scale_in", false, "timeout", 0)
	info := &grpc.UnaryServerInfo{FullMethod: AssignFlowMethod}
	for _, r := range []*fakeAssign{{true, "chain3"}, {false, "chain3"}} {
		if _, err := m.AssignFlowInterceptor(context.Background(), nil, info, func(context.Context, any) (any, error) { return r, nil }); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func Test_metrics_follow_prometheus_conventions(t *testing.T) {
	fams, err := exercised(t).Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Bounded label names only: nothing that could name a flow, an address or a port.
	allowed := map[string]bool{"function_name": true, "code": true, "chain": true, "state": true, "kind": true,
		"reason": true, "result": true, "le": true}
	scaled := regexp.MustCompile(`_(gbps|mbps|kbps|gigabits|megabits|us|ms|microseconds|milliseconds|kb|mb|gb)(_|$)`)
	seen := map[string]bool{}
	for _, f := range fams {
		name := f.GetName()
		seen[name] = true
		if !strings.HasPrefix(name, "keel_") && !strings.HasPrefix(name, "gateway_") &&
			!strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("%s: not a keel_, OpenFaaS gateway_, go_ or process_ metric", name)
		}
		if scaled.MatchString(name) {
			t.Errorf("%s: a scaled unit in the name (use base units: seconds, bits, bytes)", name)
		}
		isCounter := f.GetType() == dto.MetricType_COUNTER
		if isCounter != strings.HasSuffix(name, "_total") {
			t.Errorf("%s: type %v; counters and only counters end in _total", name, f.GetType())
		}
		if !strings.HasPrefix(name, "keel_") && !strings.HasPrefix(name, "gateway_") {
			continue // the Go and process collectors' own
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if !allowed[l.GetName()] {
					t.Errorf("%s: label %q is not from a bounded set", name, l.GetName())
				}
			}
		}
	}
	for _, want := range []string{"gateway_function_invocation_total", "gateway_functions_seconds", "gateway_service_count",
		"keel_gateway_chains", "keel_gateway_instances", "keel_gateway_flows", "keel_gateway_flows_assigned_total",
		"keel_gateway_scale_decisions_total", "keel_gateway_assign_flow_duration_seconds",
		"keel_chain_packets_total", "keel_chain_nf_reported_drops_total", "keel_chain_vf_dropped_packets_total",
		"keel_chain_rate_bits_per_second", "keel_gateway_flow_moves_total", "keel_gateway_flow_move_pause_seconds", "keel_gateway_flow_move_failures_total"} {
		if !seen[want] {
			t.Errorf("%s is not exported", want)
		}
	}
}

func Test_metrics_text_has_the_series_tests_and_dashboards_read(t *testing.T) {
	m := exercised(t)
	want := `
# HELP keel_gateway_flows_assigned_total Flows AssignFlow assigned, by chain
# TYPE keel_gateway_flows_assigned_total counter
keel_gateway_flows_assigned_total{chain="chain3"} 1
# HELP keel_gateway_instances Chain instances by state (pooled, attached)
# TYPE keel_gateway_instances gauge
keel_gateway_instances{state="attached"} 2
keel_gateway_instances{state="pooled"} 2
# HELP keel_gateway_scale_decisions_total Controller decisions by kind and reason
# TYPE keel_gateway_scale_decisions_total counter
keel_gateway_scale_decisions_total{kind="attach",reason="cold_start"} 1
# HELP keel_chain_packets_total Packets offered to a chain's instances on their VFs (measured by the agents)
# TYPE keel_chain_packets_total counter
keel_chain_packets_total{chain="chain3"} 10
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "keel_gateway_flows_assigned_total",
		"keel_gateway_instances", "keel_gateway_scale_decisions_total", "keel_chain_packets_total"); err != nil {
		t.Error(err)
	}
	moves := `
# HELP keel_gateway_flow_moves_total Flows the controller moved to another instance with their state, by chain and reason (scale_in, relieve, operator)
# TYPE keel_gateway_flow_moves_total counter
keel_gateway_flow_moves_total{chain="chain3",reason="scale_in"} 3
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(moves), "keel_gateway_flow_moves_total"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(m.FlowMoves.WithLabelValues("chain3", "scale_in")); got != 3 {
		t.Errorf("flow moves %v, want 3", got)
	}
	if n := testutil.CollectAndCount(m.FlowMovePause); n != 1 {
		t.Errorf("pause histogram series: %d, want 1", n)
	}
	if got := testutil.ToFloat64(m.FlowMoveFailures.WithLabelValues("chain3", "timeout")); got != 1 {
		t.Errorf("flow move failures %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.AssignSeconds); n != 2 {
		t.Errorf("assign latency series: got %d, want 2 (assigned, refused)", n)
	}
}

func Test_AssignFlowInterceptor_leaves_other_methods_alone(t *testing.T) {
	m := New()
	info := &grpc.UnaryServerInfo{FullMethod: "/keel.v1.Control/RegisterWorker"}
	if _, err := m.AssignFlowInterceptor(context.Background(), nil, info, func(context.Context, any) (any, error) {
		return &fakeAssign{true, "x"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.AssignSeconds) + testutil.CollectAndCount(m.FlowsAssigned); n != 0 {
		t.Errorf("got %d series from another method, want 0", n)
	}
}

func Test_ForgetChain_drops_its_series(t *testing.T) {
	m := exercised(t)
	m.ForgetChain("chain3")
	for _, c := range []interface {
		Describe(chan<- *prometheus.Desc)
		Collect(chan<- prometheus.Metric)
	}{m.ChainPackets, m.ChainNFDrops, m.ChainVFDropped, m.ChainRate, m.FlowsAssigned} {
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("%d series left after ForgetChain", n)
		}
	}
}

// keel-ingress asks in batches (AssignFlows): each flow of a batch that was assigned counts
// toward its chain, refused and failed ones do not.
func Test_AssignFlows_counts_each_assigned_flow_of_a_batch(t *testing.T) {
	m := New()
	batch := &pb.AssignFlowsResponse{Results: []*pb.AssignFlowResult{
		{Response: &pb.AssignFlowResponse{Assigned: true, Chain: "chain3"}},
		{Response: &pb.AssignFlowResponse{Assigned: true, Chain: "chain3"}},
		{Response: &pb.AssignFlowResponse{Assigned: true, Chain: "chain2"}},
		{Response: &pb.AssignFlowResponse{Assigned: false, Chain: "chain2"}},
		{Error: "no instance", Code: 14},
	}}
	info := &grpc.UnaryServerInfo{FullMethod: AssignFlowsMethod}
	if _, err := m.AssignFlowInterceptor(context.Background(), nil, info, func(context.Context, any) (any, error) { return batch, nil }); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP keel_gateway_flows_assigned_total Flows AssignFlow assigned, by chain
# TYPE keel_gateway_flows_assigned_total counter
keel_gateway_flows_assigned_total{chain="chain2"} 1
keel_gateway_flows_assigned_total{chain="chain3"} 2
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "keel_gateway_flows_assigned_total"); err != nil {
		t.Error(err)
	}
}
