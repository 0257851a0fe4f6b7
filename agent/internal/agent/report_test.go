// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keel-nfv/keel/agent/internal/measure"
	"github.com/keel-nfv/keel/agent/internal/nfstats"
	"github.com/keel-nfv/keel/agent/internal/runtime"
	"github.com/keel-nfv/keel/agent/internal/vf"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
)

func Test_agent_metrics_follow_prometheus_conventions(t *testing.T) {
	sojourn := new(nfstats.Hist)
	sojourn.Record(3000, 8)   // 3 µs at 1 GHz
	sojourn.Record(150000, 2) // 150 µs
	a := New(Config{}, Deps{})
	a.actions["attach ok"], a.connected = 2, true
	a.attachDelay.WithLabelValues("event").Observe(0.0015) // a scale-out attached 1.5 ms after the gateway's event
	a.status["chain3/1"] = &instStatus{chain: "chain3", members: []string{"NAT"}, phase: "ready", attached: true, core: 1, batch: 2,
		stats: sampleState{have: true, pps: 1000, gbps: 0.008, cur: nfstats.Sample{At: time.Now(), Packets: 10, Bytes: 10000, Drops: 3,
			DropsBy: map[string]uint64{"nf": 2, "tx": 1}, NFs: []nfstats.NF{{Name: "nat", PacketsIn: 10, PacketsOut: 8, Dropped: 2}},
			Sojourn: sojourn, TscHz: 1e9},
			haveKeel: true, keel: measure.Sample{VF: vf.Counters{RxPackets: 10, RxBytes: 10000, RxDropped: 1}},
			fig: measure.Figures{OfferedPPS: 1000, OfferedGbps: 0.008, CyclesPerPacket: 900}, mismatches: map[string]uint64{"rate": 4}}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewMetrics(a))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"instance": true, "chain": true, "position": true, "nf": true, "phase": true,
		"action": true, "result": true, "reason": true, "figure": true, "via": true}
	scaled := regexp.MustCompile(`_(gbps|mbps|gigabits|megabits|us|ms|microseconds|milliseconds)(_|$)`)
	values := map[string]float64{}
	for _, f := range fams {
		name := f.GetName()
		// keel_instance_sojourn_seconds is named by issue 32 (the dashboard and users query it).
		if !strings.HasPrefix(name, "keel_agent_") && name != "keel_instance_sojourn_seconds" || scaled.MatchString(name) {
			t.Errorf("%s: want keel_agent_* in base units", name)
		}
		if f.GetType() == dto.MetricType_HISTOGRAM {
			h := f.GetMetric()[0].GetHistogram()
			values[name+"_count"] = float64(h.GetSampleCount())
			for _, b := range h.GetBucket() {
				values[fmt.Sprintf("%s{le=%g}", name, b.GetUpperBound())] = float64(b.GetCumulativeCount())
			}
			continue
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
				if l.GetName() == "reason" || l.GetName() == "figure" {
					key += "{" + l.GetValue() + "}"
				}
			}
			values[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for k, want := range map[string]float64{
		"keel_agent_instance_rx_bits_per_second":                           8e6,
		"keel_agent_instance_rx_bytes_total":                               10000,
		"keel_agent_instance_rx_packets_total":                             11,
		"keel_agent_instance_vf_dropped_packets_total":                     1,
		"keel_agent_instance_cycles_per_packet":                            900,
		"keel_agent_instance_nf_reported_rx_packets_per_second":            1000,
		"keel_agent_instance_nf_reported_dropped_packets_total{nf}":        2,
		"keel_agent_instance_nf_reported_dropped_packets_total{tx}":        1,
		"keel_agent_instance_nf_reported_dropped_packets_total{copy}":      0,
		"keel_agent_instance_nf_reported_dropped_packets_total{malformed}": 0,
		"keel_agent_instance_nf_reported_queue_length_packets":             0,
		"keel_agent_nf_dropped_packets_total":                              2,
		"keel_agent_nf_stats_mismatch_total{rate}":                         4,
		"keel_agent_nf_stats_mismatch_total{queue}":                        0,
		"keel_instance_sojourn_seconds_count":                              10,
		"keel_instance_sojourn_seconds{le=2e-06}":                          0,
		"keel_instance_sojourn_seconds{le=5e-06}":                          8,
		"keel_instance_sojourn_seconds{le=0.0002}":                         10,
		"keel_agent_attach_delay_seconds_count":                            1,
		"keel_agent_attach_delay_seconds{le=0.001}":                        0,
		"keel_agent_attach_delay_seconds{le=0.002}":                        1,
	} {
		if got, ok := values[k]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
}

// podRuntime is a Kubernetes runtime as far as the stats reader asks it: position 0 of
// every instance is a running container whose host pid is pid.
type podRuntime struct {
	runtime.Runtime
	pid   int
	lists int
}

func (r *podRuntime) List(_ context.Context, match map[string]string) ([]runtime.Container, error) {
	r.lists++
	return []runtime.Container{{ID: "pod/" + match[LabelInstance] + "/" + match[LabelPosition], Running: true, Labels: match}}, nil
}

func (r *podRuntime) Inspect(_ context.Context, id string) (runtime.Container, error) {
	return runtime.Container{ID: id, Running: true, Pid: r.pid}, nil
}

// agentWithOneInstance is an agent (cfg, with a fresh pktbuf directory) that has one ready
// instance of one NF, chain3/0, and that instance's directory, made.
func agentWithOneInstance(t *testing.T, cfg Config, rt runtime.Runtime) (a *Agent, id, dir string) {
	t.Helper()
	cfg.PktbufDir = t.TempDir()
	a = New(cfg, Deps{Runtime: rt, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	id = "chain3/0"
	a.instances[id] = &pb.ChainInstance{Id: id, Chain: "chain3"}
	a.status[id] = &instStatus{chain: "chain3", members: []string{"nat"}, phase: "ready"}
	dir = cfg.InstanceDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return a, id, dir
}

func Test_under_Kubernetes_the_agent_reads_NF_stats_inside_position_0s_root(t *testing.T) {
	// The "Pod" is this test process: its root is /proc/self's, and the stats directory
	// a path in it that the agent finds only through /proc/PID/root.
	rt := &podRuntime{pid: os.Getpid()}
	dir := t.TempDir()
	a, id, _ := agentWithOneInstance(t, Config{SpecConfig: SpecConfig{StatsDir: dir}, ProcRoot: "/proc"}, rt)
	stats := `{"position":0,"of":1,"nfs":[{"nf":"nat","packets_in":7,"packets_out":7}],"port":{"rx_packets":7,"rx_bytes":700}}`
	if err := os.WriteFile(filepath.Join(dir, StatsName(0)), []byte(stats), 0o600); err != nil {
		t.Fatal(err)
	}
	a.sample(context.Background(), time.Now())
	if got := a.status[id].stats; !got.have || got.cur.Packets != 7 || len(got.cur.NFs) != 1 {
		t.Fatalf("sample %+v: want position 0's file read through /proc/%d/root", got, rt.pid)
	}
	if p := a.pods[id]; p == nil || p.pid != rt.pid {
		t.Fatalf("position 0 remembered as %+v, want pid %d", p, rt.pid)
	}
	// The root is remembered while reads through it work ...
	a.sample(context.Background(), time.Now())
	if rt.lists != 1 {
		t.Fatalf("%d lookups of position 0 for two samples, want 1", rt.lists)
	}
	// ... and looked up again once they fail (the Pod was rebuilt, the pid is gone).
	if err := os.Remove(filepath.Join(dir, StatsName(0))); err != nil {
		t.Fatal(err)
	}
	a.sample(context.Background(), time.Now())
	a.sample(context.Background(), time.Now())
	if rt.lists != 2 {
		t.Fatalf("%d lookups after a failed read, want 2", rt.lists)
	}
}

func Test_under_Docker_an_NF_cannot_point_its_stats_file_at_a_host_file(t *testing.T) {
	a, id, dir := agentWithOneInstance(t, Config{}, nil)
	host := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(host, []byte(`{"position":0,"of":1,"nfs":[],"port":{"rx_packets":99}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(dir, StatsName(0))); err != nil {
		t.Fatal(err)
	}
	a.sample(context.Background(), time.Now())
	if a.status[id].stats.have {
		t.Fatalf("read %+v through a symlink the NF made", a.status[id].stats.cur)
	}
}

func Test_with_PodCores_the_agent_attaches_on_the_core_the_kubelet_gave_the_Pod(t *testing.T) {
	// The kubelet's static CPU manager gave the Pod core 3; the controller asked for core 2.
	proc := t.TempDir()
	pid := 4242
	status := filepath.Join(proc, strconv.Itoa(pid), "status")
	if err := os.MkdirAll(filepath.Dir(status), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(list string) {
		if err := os.WriteFile(status, []byte("Name:\tkeel-nf\nCpus_allowed:\t8\nCpus_allowed_list:\t"+list+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("3")
	rt := &podRuntime{pid: pid}
	a, id, _ := agentWithOneInstance(t, Config{Cores: []int32{2, 3}, PodCores: true, ProcRoot: proc}, rt)
	ctx := context.Background()
	if c := a.podCore(ctx, id, 2); c != 3 {
		t.Fatalf("attach on core %d, want the Pod's core 3", c)
	}
	if c := a.podCore(ctx, id, 3); c != 3 {
		t.Fatalf("the controller's core 3, which the Pod has: %d", c)
	}
	if rt.lists != 1 {
		t.Errorf("%d lookups of position 0, want 1 (remembered)", rt.lists)
	}
	// A Pod in the shared pool (cores 0-3) may run on the controller's core: kept.
	a.forgetPod(id)
	write("0-1,2-3")
	if c := a.podCore(ctx, id, 2); c != 2 {
		t.Fatalf("shared pool: core %d, want the controller's 2", c)
	}
	// A Pod on no core coopsched manages, or one whose status cannot be read: the
	// controller's core, and coopsched's attach says why it fails.
	a.forgetPod(id)
	write("0")
	if c := a.podCore(ctx, id, 2); c != 2 {
		t.Fatalf("unmanaged core: %d", c)
	}
	a.forgetPod(id)
	write("x-y")
	if c := a.podCore(ctx, id, 2); c != 2 || a.pods[id] != nil {
		t.Fatalf("unreadable list: core %d, remembered %+v", c, a.pods[id])
	}
}

func Test_allowedCores_reads_ranges_and_lists(t *testing.T) {
	dir := t.TempDir()
	for list, want := range map[string]string{"1": "[1]", "0-1,4": "[0 1 4]", "2-3,6-7": "[2 3 6 7]"} {
		f := filepath.Join(dir, "status")
		if err := os.WriteFile(f, []byte("Cpus_allowed_list:\t"+list+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := allowedCores(f)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("%q: %v %v, want %s", list, got, err, want)
		}
	}
}

// coopschedStatus plays keel-coopsched's Status: the sgroups' CPU time as the kernel
// accounts it.
type coopschedStatus struct {
	pb.CoopschedClient
	st *pb.StatusResponse
}

func (c *coopschedStatus) Status(context.Context, *pb.StatusRequest, ...grpc.CallOption) (*pb.StatusResponse, error) {
	return c.st, nil
}

// writeVethCounters writes the statistics of keelvf<vlan> into a fake sysfs at sys: tx is
// what the bridge's end handed to the instance.
func writeVethCounters(t *testing.T, sys string, vlan uint32, txPackets, txBytes, txDropped uint64) {
	t.Helper()
	dir := filepath.Join(sys, "class", "net", fmt.Sprintf("keelvf%d", vlan), "statistics")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]uint64{"tx_packets": txPackets, "tx_bytes": txBytes, "tx_dropped": txDropped,
		"rx_packets": txPackets, "rx_bytes": txBytes} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strconv.FormatUint(v, 10)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// writeNFStats writes position 0's statistics file, as written at `at`.
func writeNFStats(t *testing.T, dir string, at time.Time, rx, queue uint64, cyclesPerPacket float64) {
	t.Helper()
	body := fmt.Sprintf(`{"position":0,"of":1,"nfs":[{"nf":"nat","packets_in":%d,"packets_out":%d,"cycles_per_packet":%g}],`+
		`"port":{"rx_packets":%d,"rx_bytes":%d,"rx_queue_len":%d},"cycles_per_batch":%g}`,
		rx, rx, cyclesPerPacket, rx, rx*100, queue, cyclesPerPacket*32)
	p := filepath.Join(dir, StatsName(0))
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, at, at); err != nil {
		t.Fatal(err)
	}
}

// sampleTwice runs an attached instance of one NF for a second of 10,000 packets/s on its
// VF, in which its thread ran 0.5 s (at a 2 GHz TSC: 100,000 cycles per packet, most of it
// idle polls), while its NF's file says what nfRx, nfQueue and nfCycles say at the second
// sample. It returns the report and the instance's state.
func sampleTwice(t *testing.T, nfRx, nfQueue uint64, nfCycles float64) (*pb.InstanceStats, *sampleState) {
	t.Helper()
	sys := t.TempDir()
	veth := vf.NewOVSVeth("", "", "w1")
	veth.Sys = sys
	cs := &coopschedStatus{st: &pb.StatusResponse{TscHz: 2e9}}
	a, id, dir := agentWithOneInstance(t, Config{StatsInterval: time.Second, Heartbeat: time.Minute}, nil)
	a.VF, a.Coopsched = veth, cs
	a.instances[id].Vlan = 100
	a.status[id].attached = true
	group := func(cpu uint64) []*pb.GroupStatus { return []*pb.GroupStatus{{GroupId: GroupID(id), CpuNs: cpu}} }

	t0 := time.Now().Truncate(time.Second)
	writeVethCounters(t, sys, 100, 1000, 100_000, 0)
	cs.st.Groups = group(1e6)
	writeNFStats(t, dir, t0, 1000, 0, 200)
	a.sample(context.Background(), t0)

	t1 := t0.Add(time.Second)
	writeVethCounters(t, sys, 100, 11_000, 1_100_000, 0)
	cs.st.Groups = group(1e6 + 5e8)
	writeNFStats(t, dir, t1, nfRx, nfQueue, nfCycles)
	due := a.sample(context.Background(), t1)
	if len(due) != 1 {
		t.Fatalf("%d reports due, want 1", len(due))
	}
	return due[0], &a.status[id].stats
}

func Test_a_forged_stats_file_does_not_change_the_figures_the_controller_decides_by(t *testing.T) {
	honest, hs := sampleTwice(t, 11_000, 0, 200)
	// The NF claims ten times the rate, a full receive queue and a cost per packet that would
	// take a core by itself.
	forged, fs := sampleTwice(t, 110_000, 4096, 5e6)
	decide := func(m *pb.InstanceStats) [5]float64 {
		return [5]float64{m.RatePps, m.RateGbps, float64(m.Packets), float64(m.VfDropped), m.CyclesPerPacket}
	}
	if decide(honest) != decide(forged) {
		t.Fatalf("keel's figures moved with the NF's file: honest %v, forged %v", decide(honest), decide(forged))
	}
	if honest.RatePps != 10_000 || honest.Packets != 11_000 || honest.CyclesPerPacket != 100_000 {
		t.Fatalf("keel's figures %v: want 10000 pps and 11000 packets on the VF, 100000 cycles per packet", decide(honest))
	}
	// The NF's own figures are reported as the NF's, not dropped.
	if forged.NfReportedRatePps != 109_000 || forged.NfReportedQueueLen != 4096 || forged.NfReportedNfs[0].CyclesPerPacket != 5e6 {
		t.Fatalf("NF's own figures: rate %v, queue %v, nfs %v", forged.NfReportedRatePps, forged.NfReportedQueueLen, forged.NfReportedNfs)
	}
	// Each contradicted figure is counted once for the one checked sample; the honest file none.
	for _, f := range measure.CheckedFigures {
		if fs.mismatches[f] != 1 || hs.mismatches[f] != 0 {
			t.Errorf("%s: forged file counted %d times, honest %d; want 1 and 0", f, fs.mismatches[f], hs.mismatches[f])
		}
	}
}

func Test_an_instances_report_carries_the_last_sojourn_window(t *testing.T) {
	ss := &sampleState{}
	t0 := time.Unix(1000, 0)
	cum := new(nfstats.Hist)
	step := func(at time.Time) {
		c := *cum
		ss.cur = nfstats.Sample{At: at, Sojourn: &c, RxWaitBound: &c, TscHz: 2e9}
		ss.observeSojourn(5*time.Second, true)
	}
	step(t0)
	cum.Record(2e10, 5) // the instance's first window (while it started): not reported
	t0 = t0.Add(5 * time.Second)
	step(t0)
	var m pb.InstanceStats
	ss.sojournFigures(&m)
	if m.P99Us != 0 || m.SojournWindowS != 0 {
		t.Fatalf("figures before a window closed: %+v", &m)
	}
	cum.Record(20000, 990) // 10 µs at 2 GHz
	cum.Record(400000, 10) // 200 µs: the slowest 1 %
	step(t0.Add(5 * time.Second))
	ss.sojournFigures(&m)
	if m.SojournPackets != 1000 || m.SojournWindowS != 5 || m.SojournP50Us < 10 || m.SojournP50Us > 10.2 ||
		m.P99Us < 10 || m.P99Us > 10.2 || m.SojournP999Us < 200 || m.SojournP999Us > 204 {
		t.Fatalf("window 1: %+v", &m)
	}
	cum.Record(400000, 100) // the next window: only slow packets
	step(t0.Add(10 * time.Second))
	m = pb.InstanceStats{}
	ss.sojournFigures(&m)
	if m.SojournPackets != 100 || m.P99Us < 200 || m.P99Us > 204 {
		t.Fatalf("window 2 (its own packets only): %+v", &m)
	}
	ss.observeSojourn(5*time.Second, false) // detached: its last window is not its figure any more
	m = pb.InstanceStats{}
	ss.sojournFigures(&m)
	if m.P99Us != 0 || m.SojournWindowS != 0 {
		t.Fatalf("figures of a detached instance: %+v", &m)
	}
}
