// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/keel-nfv/keel/agent/internal/nfstats"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/prometheus/client_golang/prometheus"
)

// sampleState is an instance's last statistics sample, rates and report.
type sampleState struct {
	cur      nfstats.Sample
	have     bool
	pps      float64
	gbps     float64
	last     nfstats.Report
	lastSent time.Time
}

// statsOpener is how instance id's statistics files are read: beneath the instance's
// directory on the host under Docker; under Kubernetes, where they are on an emptyDir of
// the instance's Pod (StatsDir), inside the root of position 0's process (/proc/PID/root on the
// node, hostPID), as the Pod's containers see it. Either way the NFs, which can write
// there, cannot make the agent read anything else (nfstats.ReadBeneath, ReadInRoot).
func (a *Agent) statsOpener(ctx context.Context, id string) nfstats.Opener {
	if a.cfg.StatsDir == "" {
		dir := a.cfg.InstanceDir(id)
		return func(k int) ([]byte, time.Time, error) { return nfstats.ReadBeneath(dir, StatsName(k)) }
	}
	root, err := a.podRoot(ctx, id)
	if err != nil {
		return func(int) ([]byte, time.Time, error) { return nil, time.Time{}, err }
	}
	return func(k int) ([]byte, time.Time, error) { return nfstats.ReadInRoot(root, a.cfg.StatsFile(id, k)) }
}

// reportStats reads the instances' keel-nf statistics files every --stats-interval and
// sends an instance's stats to the gateway when they changed significantly, its phase
// changed, or --heartbeat passed since its last report.
func (a *Agent) reportStats(ctx context.Context) {
	t := time.NewTicker(a.cfg.StatsInterval)
	defer t.Stop()
	var out statsStream
	defer out.close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.report:
		}
		due := a.sample(ctx, time.Now())
		if len(due) == 0 {
			continue
		}
		if out.stream == nil && !out.open(ctx, a.Control) {
			continue
		}
		for _, m := range due {
			if err := out.stream.Send(m); err != nil {
				a.Log.Warn("gateway: stats stream broke; reopening and resending", "err", err)
				out.close()
				a.mu.Lock()
				for _, st := range a.status {
					st.stats.lastSent = time.Time{}
				}
				a.mu.Unlock()
				break
			}
			a.mu.Lock()
			if st := a.status[m.Instance]; st != nil {
				st.stats.lastSent = time.Now()
				st.stats.last = reportOf(m)
			}
			a.mu.Unlock()
		}
	}
}

// statsStream is the open StreamStats call, if any.
type statsStream struct {
	stream pb.Control_StreamStatsClient
	cancel context.CancelFunc
}

func (s *statsStream) open(ctx context.Context, c pb.ControlClient) bool {
	sctx, cancel := context.WithCancel(ctx)
	st, err := c.StreamStats(sctx)
	if err != nil {
		cancel()
		return false
	}
	s.stream, s.cancel = st, cancel
	return true
}

func (s *statsStream) close() {
	if s.cancel != nil {
		s.cancel()
	}
	s.stream, s.cancel = nil, nil
}

func reportOf(m *pb.InstanceStats) nfstats.Report {
	return nfstats.Report{Phase: m.Phase, Reason: m.Reason, Attached: m.Attached, Core: m.Core, Batch: m.Batch,
		RatePPS: m.RatePps, Drops: m.Drops, QueueLen: m.QueueLen, Restarts: m.Restarts}
}

// sample reads every desired instance's files, updates its rates and returns the reports due.
func (a *Agent) sample(ctx context.Context, now time.Time) []*pb.InstanceStats {
	a.mu.Lock()
	ids := make([]string, 0, len(a.status))
	positions := map[string]int{}
	for id, st := range a.status {
		if st.phase == "" || a.instances[id] == nil {
			continue
		}
		ids = append(ids, id)
		positions[id] = len(st.members)
	}
	a.mu.Unlock()
	sort.Strings(ids)
	samples := map[string]nfstats.Sample{}
	for _, id := range ids {
		if s, ok := nfstats.Read(a.statsOpener(ctx, id), positions[id]); ok {
			samples[id] = s
		} else {
			a.forgetPod(id)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var due []*pb.InstanceStats
	for _, id := range ids {
		st := a.status[id]
		if st == nil {
			continue
		}
		ss := &st.stats
		if s, ok := samples[id]; ok && st.phase != "failed" {
			switch {
			case !ss.have:
				ss.cur, ss.have = s, true
			case s.At.After(ss.cur.At):
				ss.pps, ss.gbps = nfstats.Rate(ss.cur, s)
				ss.cur = s
			}
			// A detached chain is stopped and writes no file: it carries no traffic.
			if !st.attached || now.Sub(ss.cur.At) > 3*a.cfg.StatsInterval {
				ss.pps, ss.gbps = 0, 0
			}
		} else {
			ss.have, ss.pps, ss.gbps, ss.cur = false, 0, 0, nfstats.Sample{}
		}
		m := a.statsMessage(id, st)
		if ss.lastSent.IsZero() || nfstats.Significant(ss.last, reportOf(m)) || now.Sub(ss.lastSent) >= a.cfg.Heartbeat {
			due = append(due, m)
		}
	}
	return due
}

// statsMessage is an instance's InstanceStats (a.mu held).
func (a *Agent) statsMessage(id string, st *instStatus) *pb.InstanceStats {
	ss := &st.stats
	m := &pb.InstanceStats{Worker: a.cfg.Worker, Instance: id, Phase: st.phase, Reason: st.reason,
		Attached: st.attached, Core: st.core, Batch: st.batch, Restarts: st.restarts,
		RatePps: ss.pps, RateGbps: ss.gbps, Packets: ss.cur.Packets, Drops: ss.cur.Drops,
		QueueLen: ss.cur.QueueLen, CyclesPerBatch: ss.cur.CyclesPerBatch}
	for _, nf := range ss.cur.NFs {
		name := nf.Name
		if nf.Position < len(st.members) {
			name = st.members[nf.Position]
		}
		m.Nfs = append(m.Nfs, &pb.NfStats{Name: name, Position: uint32(nf.Position), PacketsIn: nf.PacketsIn,
			PacketsOut: nf.PacketsOut, Dropped: nf.Dropped, CyclesPerPacket: nf.CyclesPerPacket})
	}
	return m
}

// Metrics exposes the agent's instances and actions to Prometheus (keel_agent_*). Label
// values are bounded: instances of this worker, their NF positions, action kinds.
type Metrics struct{ a *Agent }

// NewMetrics returns the agent's collector.
func NewMetrics(a *Agent) *Metrics { return &Metrics{a: a} }

var (
	inst    = []string{"instance", "chain"}
	nfLbl   = []string{"instance", "chain", "position", "nf"}
	descs   = map[string]*prometheus.Desc{}
	descDef = []struct {
		name, help string
		labels     []string
	}{
		{"keel_agent_gateway_connected", "1 while the agent follows the gateway's Watch stream", nil},
		{"keel_agent_gateway_synced", "1 once the current Watch stream's snapshot is complete", nil},
		{"keel_agent_instances", "Chain instances of this worker by phase", []string{"phase"}},
		{"keel_agent_actions_total", "Reconcile actions by kind and result", []string{"action", "result"}},
		{"keel_agent_instance_attached", "1 while the instance's sgroup runs on a core", inst},
		{"keel_agent_instance_core", "Core the instance runs on, -1 when detached", inst},
		{"keel_agent_instance_batch_bursts", "Bursts per turn coopsched runs the instance at", inst},
		{"keel_agent_instance_restarts_total", "Times the agent rebuilt the instance after a failure", inst},
		{"keel_agent_instance_rx_packets_per_second", "Packet rate received on the instance's VF", inst},
		{"keel_agent_instance_rx_bits_per_second", "Bit rate received on the instance's VF", inst},
		{"keel_agent_instance_rx_packets_total", "Packets received on the instance's VF", inst},
		{"keel_agent_instance_rx_bytes_total", "Bytes received on the instance's VF", inst},
		{"keel_agent_instance_dropped_packets_total", "Packets the instance dropped, by reason: nf (its NFs' verdicts), tx, copy, malformed",
			[]string{"instance", "chain", "reason"}},
		{"keel_agent_instance_queue_length_packets", "Packets waiting in the VF's receive queue", inst},
		{"keel_agent_instance_cycles_per_batch", "TSC cycles of the first NF's turns that received packets, each on average", inst},
		{"keel_agent_nf_packets_in_total", "Packets into an NF", nfLbl},
		{"keel_agent_nf_packets_out_total", "Packets out of an NF", nfLbl},
		{"keel_agent_nf_dropped_packets_total", "Packets an NF dropped", nfLbl},
		{"keel_agent_nf_cycles_per_packet", "TSC cycles an NF spends per packet", nfLbl},
	}
)

func init() {
	for _, d := range descDef {
		descs[d.name] = prometheus.NewDesc(d.name, d.help, d.labels, nil)
	}
}

// Describe sends every metric's description.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

// Collect sends the current values.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	a := m.a
	a.mu.Lock()
	defer a.mu.Unlock()
	g := func(name string, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(descs[name], prometheus.GaugeValue, v, l...)
	}
	c := func(name string, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(descs[name], prometheus.CounterValue, v, l...)
	}
	g("keel_agent_gateway_connected", b2f(a.connected))
	g("keel_agent_gateway_synced", b2f(a.synced))
	phases := map[string]float64{"starting": 0, "ready": 0, "failed": 0}
	for id, st := range a.status {
		if st.phase == "" {
			continue
		}
		phases[st.phase]++
		g("keel_agent_instance_attached", b2f(st.attached), id, st.chain)
		g("keel_agent_instance_core", float64(st.core), id, st.chain)
		g("keel_agent_instance_batch_bursts", float64(st.batch), id, st.chain)
		c("keel_agent_instance_restarts_total", float64(st.restarts), id, st.chain)
		ss := &st.stats
		if !ss.have {
			continue
		}
		g("keel_agent_instance_rx_packets_per_second", ss.pps, id, st.chain)
		g("keel_agent_instance_rx_bits_per_second", ss.gbps*1e9, id, st.chain)
		c("keel_agent_instance_rx_packets_total", float64(ss.cur.Packets), id, st.chain)
		c("keel_agent_instance_rx_bytes_total", float64(ss.cur.Bytes), id, st.chain)
		for _, r := range nfstats.DropReasons {
			c("keel_agent_instance_dropped_packets_total", float64(ss.cur.DropsBy[r]), id, st.chain, r)
		}
		g("keel_agent_instance_queue_length_packets", float64(ss.cur.QueueLen), id, st.chain)
		g("keel_agent_instance_cycles_per_batch", ss.cur.CyclesPerBatch, id, st.chain)
		for _, nf := range ss.cur.NFs {
			l := []string{id, st.chain, strconv.Itoa(nf.Position), nf.Name}
			c("keel_agent_nf_packets_in_total", float64(nf.PacketsIn), l...)
			c("keel_agent_nf_packets_out_total", float64(nf.PacketsOut), l...)
			c("keel_agent_nf_dropped_packets_total", float64(nf.Dropped), l...)
			g("keel_agent_nf_cycles_per_packet", nf.CyclesPerPacket, l...)
		}
	}
	for p, n := range phases {
		g("keel_agent_instances", n, p)
	}
	for k, n := range a.actions {
		kind, result, _ := strings.Cut(k, " ")
		c("keel_agent_actions_total", float64(n), kind, result)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Healthy reports whether the agent can reach what it needs (for /healthz).
func (a *Agent) Healthy(ctx context.Context) error {
	_, err := a.Coopsched.Status(ctx, &pb.StatusRequest{})
	return err
}
