// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/keel-nfv/keel/agent/internal/measure"
	"github.com/keel-nfv/keel/agent/internal/nfstats"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/prometheus/client_golang/prometheus"
)

// sampleState is an instance's last samples, rates and report: keel's own measurement
// (the VF's counters, coopsched's account of CPU time), which the controller decides by,
// and what its NFs' statistics files say, which is shown as theirs and checked against it.
type sampleState struct {
	cur      nfstats.Sample // the NFs' files
	have     bool
	pps      float64 // the NFs' rate (position 0's file)
	gbps     float64
	keel     measure.Sample // keel's measurement
	haveKeel bool
	fig      measure.Figures // keel's figures over the last interval ...
	prevFig  measure.Figures // ... and the one before (an NF's file lags up to an interval)
	// Samples whose NF figures keel's contradicted, by figure, and when each was last logged.
	mismatches map[string]uint64
	loggedAt   map[string]time.Time
	last       nfstats.Report
	lastSent   time.Time
	// The server sojourn position 0 measures (cumulative in cur.Sojourn) in windows of
	// --sojourn-window, and its bound on the wait in the VF's queue beside it.
	sojourn, rxWait nfstats.Window
}

// mismatchLogEvery is how often at most a contradicted NF figure is logged, per instance
// and figure (each one is counted).
const mismatchLogEvery = time.Minute

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
		RatePPS: m.RatePps, VFDropped: m.VfDropped, Drops: m.NfReportedDrops, QueueLen: m.NfReportedQueueLen,
		Restarts: m.Restarts, SojournP99us: m.P99Us}
}

// observeSojourn gives the windows position 0's cumulative histograms as of its last file;
// an instance that is not running, attached and ready (detached: stopped, its file not
// rewritten; starting) has no window, and starts new ones when it is again.
func (ss *sampleState) observeSojourn(length time.Duration, running bool) {
	if !running {
		ss.sojourn, ss.rxWait = nfstats.Window{}, nfstats.Window{}
		return
	}
	ss.sojourn.Length, ss.rxWait.Length = length, length
	if ss.cur.Sojourn != nil {
		ss.sojourn.Observe(ss.cur.Sojourn, ss.cur.At)
	}
	if ss.cur.RxWaitBound != nil {
		ss.rxWait.Observe(ss.cur.RxWaitBound, ss.cur.At)
	}
}

// sojournFigures fills m's sojourn fields from the last complete window (none: zeros).
func (ss *sampleState) sojournFigures(m *pb.InstanceStats) {
	h, length, _, ok := ss.sojourn.Last()
	if !ok || ss.cur.TscHz <= 0 {
		return
	}
	us := func(h *nfstats.Hist, q float64) float64 { return float64(h.Quantile(q)) / ss.cur.TscHz * 1e6 }
	m.SojournWindowS, m.SojournPackets = length.Seconds(), h.Count()
	if h.Count() > 0 {
		m.P99Us, m.SojournP50Us, m.SojournP999Us = us(h, 0.99), us(h, 0.5), us(h, 0.999)
	}
	if w, _, _, ok := ss.rxWait.Last(); ok && w.Count() > 0 {
		m.RxWaitBoundP99Us = us(w, 0.99)
	}
}

// sample reads every desired instance's files and keel's own counters, updates its rates,
// checks the files against the counters and returns the reports due.
func (a *Agent) sample(ctx context.Context, now time.Time) []*pb.InstanceStats {
	a.mu.Lock()
	ids := make([]string, 0, len(a.status))
	positions := map[string]int{}
	vlans := map[string]uint32{}
	for id, st := range a.status {
		if st.phase == "" || a.instances[id] == nil {
			continue
		}
		ids = append(ids, id)
		positions[id] = len(st.members)
		vlans[id] = a.instances[id].Vlan
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
	keel, tscHz := a.measure(ctx, now, ids, vlans)
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
			ss.observeSojourn(a.cfg.SojournWindow, st.attached && st.phase == "ready")
			// A detached chain is stopped and writes no file: it carries no traffic.
			if !st.attached || now.Sub(ss.cur.At) > 3*a.cfg.StatsInterval {
				ss.pps, ss.gbps = 0, 0
			}
		} else {
			ss.have, ss.pps, ss.gbps, ss.cur = false, 0, 0, nfstats.Sample{}
		}
		if k, ok := keel[id]; ok {
			if ss.haveKeel {
				ss.prevFig, ss.fig = ss.fig, measure.Between(ss.keel, k, tscHz)
				if ss.have {
					a.check(id, ss, k)
				}
			}
			ss.keel, ss.haveKeel = k, true
		} else {
			ss.keel, ss.haveKeel, ss.fig, ss.prevFig = measure.Sample{}, false, measure.Figures{}, measure.Figures{}
		}
		m := a.statsMessage(id, st)
		if ss.lastSent.IsZero() || nfstats.Significant(ss.last, reportOf(m)) || now.Sub(ss.lastSent) >= a.cfg.Heartbeat {
			due = append(due, m)
		}
	}
	return due
}

// measure reads keel's own counters of the instances ids (their VFs by VLAN, their sgroups'
// CPU time from one coopsched Status) and the TSC rate coopsched measured. An instance
// whose VF cannot be read is absent; one that coopsched does not know has no CPU time.
func (a *Agent) measure(ctx context.Context, now time.Time, ids []string, vlans map[string]uint32) (map[string]measure.Sample, float64) {
	out := map[string]measure.Sample{}
	if a.VF == nil {
		return out, 0
	}
	cpu := map[string]uint64{}
	var tscHz float64
	if a.Coopsched != nil {
		if st, err := a.Coopsched.Status(ctx, &pb.StatusRequest{}); err == nil {
			tscHz = float64(st.TscHz)
			for _, g := range st.Groups {
				if id, ok := InstanceOfGroup(g.GroupId); ok {
					cpu[id] = g.CpuNs
				}
			}
		}
	}
	for _, id := range ids {
		c, err := a.VF.Counters(ctx, vlans[id])
		if err != nil {
			continue
		}
		ns, ok := cpu[id]
		out[id] = measure.Sample{At: now, VF: c, CPUns: ns, HasCPU: ok}
	}
	return out, tscHz
}

// check counts and logs (at most every mismatchLogEvery per figure) the figures of the
// instance's NF files that keel's measurement k contradicts (measure.Check); the rate is
// held to the larger of keel's last two intervals, as the file may lag by one (a.mu held).
func (a *Agent) check(id string, ss *sampleState, k measure.Sample) {
	fig := ss.fig
	fig.DeliveredPPS = max(ss.fig.DeliveredPPS, ss.prevFig.DeliveredPPS)
	for _, m := range measure.Check(ss.pps, ss.cur, k.VF, fig) {
		if ss.mismatches == nil {
			ss.mismatches, ss.loggedAt = map[string]uint64{}, map[string]time.Time{}
		}
		ss.mismatches[m.Figure]++
		if k.At.Sub(ss.loggedAt[m.Figure]) >= mismatchLogEvery {
			ss.loggedAt[m.Figure] = k.At
			a.Log.Warn("an NF's statistics file contradicts keel's measurement; the controller uses keel's",
				"instance", id, "figure", m.Figure, "nf_reported", m.NF, "keel_measured", m.Keel,
				"times", ss.mismatches[m.Figure])
		}
	}
}

// statsMessage is an instance's InstanceStats (a.mu held): keel's figures in the fields the
// controller decides by, the NFs' own in the nf_reported ones.
func (a *Agent) statsMessage(id string, st *instStatus) *pb.InstanceStats {
	ss := &st.stats
	m := &pb.InstanceStats{Worker: a.cfg.Worker, Instance: id, Phase: st.phase, Reason: st.reason,
		Attached: st.attached, Core: st.core, Batch: st.batch, Restarts: st.restarts,
		RatePps: ss.fig.OfferedPPS, RateGbps: ss.fig.OfferedGbps, Packets: ss.keel.VF.Offered(),
		VfDropped: ss.keel.VF.RxDropped, CyclesPerPacket: ss.fig.CyclesPerPacket,
		NfReportedRatePps: ss.pps, NfReportedDrops: ss.cur.Drops, NfReportedQueueLen: ss.cur.QueueLen,
		NfReportedCyclesPerBatch: ss.cur.CyclesPerBatch}
	ss.sojournFigures(m)
	for _, nf := range ss.cur.NFs {
		name := nf.Name
		if nf.Position < len(st.members) {
			name = st.members[nf.Position]
		}
		m.NfReportedNfs = append(m.NfReportedNfs, &pb.NfStats{Name: name, Position: uint32(nf.Position), PacketsIn: nf.PacketsIn,
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
	nicLbl  = []string{"instance", "chain", "where", "position", "nf"}
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
		{"keel_agent_instance_rx_packets_per_second", "Packets per second offered to the instance on its VF, as the host counts (handed over or refused)", inst},
		{"keel_agent_instance_rx_bits_per_second", "Bits per second handed to the instance on its VF, as the host counts", inst},
		{"keel_agent_instance_rx_packets_total", "Packets offered to the instance on its VF, as the host counts", inst},
		{"keel_agent_instance_rx_bytes_total", "Bytes handed to the instance on its VF, as the host counts", inst},
		{"keel_agent_instance_vf_dropped_packets_total", "Packets the instance's VF could not hand over (its receive side full), as the host counts", inst},
		{"keel_agent_instance_cycles_per_packet", "TSC cycles the instance's threads ran per packet handed over in the last interval (coopsched's schedstat account over the VF's count; includes idle polls)", inst},
		{"keel_agent_instance_nf_reported_rx_packets_per_second", "Packet rate position 0 reports it received (the NF's own figure)", inst},
		{"keel_agent_instance_nf_reported_dropped_packets_total", "Packets the instance's NFs report they dropped, by reason: nf (their verdicts), tx, copy, malformed, descriptor (the NFs' own figures)",
			[]string{"instance", "chain", "reason"}},
		{"keel_agent_instance_nf_reported_queue_length_packets", "Packets waiting in the VF's receive queue, as position 0 reports (the NF's own figure)", inst},
		{"keel_agent_instance_nf_reported_cycles_per_batch", "TSC cycles of the first NF's turns that received packets, each on average, as it reports (the NF's own figure)", inst},
		{"keel_instance_sojourn_seconds", "Server sojourn of the instance's packets, from position 0 receiving them from the VF to transmitting them (or finding them dropped), as position 0 stamps them (TSC; its process also runs the chain's first NF)", inst},
		{"keel_agent_nf_stats_mismatch_total", "Samples in which an instance's NF statistics contradicted keel's measurement, by figure: rate, queue, cycles",
			[]string{"instance", "figure"}},
		{"keel_agent_nf_packets_in_total", "Packets into an NF, as it reports (its own figure)", nfLbl},
		{"keel_agent_nf_packets_out_total", "Packets out of an NF, as it reports (its own figure)", nfLbl},
		{"keel_agent_nf_dropped_packets_total", "Packets an NF dropped, as it reports (its own figure)", nfLbl},
		{"keel_agent_nf_cycles_per_packet", "TSC cycles an NF spends per packet, as it reports (its own figure)", nfLbl},
		{"keel_agent_nic_nf_packets_in_total", "Packets into an NF the instance runs in XDP on its VF (position rx: keel_rx, which drops malformed frames), as keel's program counts", nicLbl},
		{"keel_agent_nic_nf_packets_out_total", "Packets an XDP NF of the instance passed on, as keel's program counts", nicLbl},
		{"keel_agent_nic_nf_dropped_packets_total", "Packets an XDP NF of the instance dropped, as keel's program counts", nicLbl},
		{"keel_agent_nic_nf_events_total", "An XDP NF's own counters (e.g. ipv4fwd no_route_drops, lb new_flows, rx bad_ipv4), as keel's program counts",
			append(append([]string{}, nicLbl...), "counter")},
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
	m.a.attachDelay.Describe(ch)
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
	a.attachDelay.Collect(ch)
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
		for _, f := range measure.CheckedFigures {
			c("keel_agent_nf_stats_mismatch_total", float64(ss.mismatches[f]), id, f)
		}
		if ss.haveKeel {
			g("keel_agent_instance_rx_packets_per_second", ss.fig.OfferedPPS, id, st.chain)
			g("keel_agent_instance_rx_bits_per_second", ss.fig.OfferedGbps*1e9, id, st.chain)
			c("keel_agent_instance_rx_packets_total", float64(ss.keel.VF.Offered()), id, st.chain)
			c("keel_agent_instance_rx_bytes_total", float64(ss.keel.VF.RxBytes), id, st.chain)
			c("keel_agent_instance_vf_dropped_packets_total", float64(ss.keel.VF.RxDropped), id, st.chain)
			g("keel_agent_instance_cycles_per_packet", ss.fig.CyclesPerPacket, id, st.chain)
		}
		if !ss.have {
			continue
		}
		g("keel_agent_instance_nf_reported_rx_packets_per_second", ss.pps, id, st.chain)
		for _, r := range nfstats.DropReasons {
			c("keel_agent_instance_nf_reported_dropped_packets_total", float64(ss.cur.DropsBy[r]), id, st.chain, r)
		}
		g("keel_agent_instance_nf_reported_queue_length_packets", float64(ss.cur.QueueLen), id, st.chain)
		g("keel_agent_instance_nf_reported_cycles_per_batch", ss.cur.CyclesPerBatch, id, st.chain)
		if h := ss.cur.Sojourn; h != nil && ss.cur.TscHz > 0 {
			ch <- sojournHistogram(h, ss.cur.TscHz, id, st.chain)
		}
		for _, nf := range ss.cur.NFs {
			l := []string{id, st.chain, strconv.Itoa(nf.Position), nf.Name}
			c("keel_agent_nf_packets_in_total", float64(nf.PacketsIn), l...)
			c("keel_agent_nf_packets_out_total", float64(nf.PacketsOut), l...)
			c("keel_agent_nf_dropped_packets_total", float64(nf.Dropped), l...)
			g("keel_agent_nf_cycles_per_packet", nf.CyclesPerPacket, l...)
		}
	}
	for id, cs := range a.nicCounters() {
		st := a.status[id]
		if st == nil {
			continue
		}
		for _, nc := range cs {
			pos := "rx"
			if nc.Position >= 0 {
				pos = strconv.Itoa(nc.Position)
			}
			l := []string{id, st.chain, nc.where, pos, nc.NF}
			c("keel_agent_nic_nf_packets_in_total", float64(nc.In), l...)
			c("keel_agent_nic_nf_packets_out_total", float64(nc.Out), l...)
			c("keel_agent_nic_nf_dropped_packets_total", float64(nc.Dropped), l...)
			for k, v := range nc.Own {
				c("keel_agent_nic_nf_events_total", float64(v), append(l, k)...)
			}
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

// sojournLe are the upper bounds (seconds) of keel_instance_sojourn_seconds' buckets.
var sojournLe = []float64{1e-6, 2e-6, 5e-6, 10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3,
	20e-3, 50e-3, 100e-3, 1}

// sojournHistogram is the cumulative histogram h (cycles at hz) as Prometheus buckets: each of
// h's buckets counts under the first bound at or above its upper edge (never too low).
func sojournHistogram(h *nfstats.Hist, hz float64, labels ...string) prometheus.Metric {
	cum := make(map[float64]uint64, len(sojournLe))
	h.Buckets(func(upper, n uint64) {
		sec := float64(upper) / hz
		for _, le := range sojournLe {
			if sec <= le {
				cum[le] += n
				break
			}
		}
	})
	var acc uint64
	for _, le := range sojournLe {
		acc += cum[le]
		cum[le] = acc
	}
	return prometheus.MustNewConstHistogram(descs["keel_instance_sojourn_seconds"], h.Count(), float64(h.Sum())/hz, cum, labels...)
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
