// SPDX-License-Identifier: Apache-2.0

package nfstats

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What the runtime's statistics files (nf-runtime's Engine::StatsJson, keel-nf --help) hold
// for position 0 and for a later position.
const pos0 = `{
  "position": 0, "of": 2, "tsc_hz": 2600000000, "seconds": 1.5, "chain_buffer": "/run/keel/pktbuf/c.0/pktbuf",
  "turns": 10, "order_violations": 0,
  "cycles": {"rx": 1, "rx_idle": 0, "nf": 2, "copy_in": 3, "view": 4, "copy_out": 5, "tx": 6, "busy": 30000,
             "handoff": 7, "turns": 10},
  "nfs": [{"nf": "acl", "packets_in": 1000, "packets_out": 990, "dropped": 10, "bursts": 32, "cycles_per_packet": 120.5,
           "stats": {"rules": 1}}],
  "port": {"rx_packets": 1000, "rx_malformed": 1, "tx_packets": 980, "tx_dropped": 2, "copy_dropped": 0,
           "rx_bytes": 64000, "rx_queue_len": 12, "rx_port": "net_memif0", "tx_port": "net_memif0"},
  "egress": {"zero_copy": true, "zero_copy_packets": 980, "fallbacks": 0},
  "bursts_per_turn": 8, "batches": 4, "cycles_per_batch": 3000.0
}`

const pos1 = `{"position": 1, "of": 2, "turns": 10, "order_violations": 0,
  "bad_descriptors": {"written_by": 0, "count": 3},
  "nfs": [{"nf": "nat", "packets_in": 990, "packets_out": 980, "dropped": 10, "bursts": 32, "cycles_per_packet": 300,
           "flows": {"count": 5, "capacity": 65536, "evictions": 7, "refusals": 2}}]}`

func Test_Read_sums_an_instance_over_its_files(t *testing.T) {
	dir := t.TempDir()
	p0, p1 := filepath.Join(dir, "stats-0.json"), filepath.Join(dir, "stats-1.json")
	if err := os.WriteFile(p0, []byte(pos0), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p1, []byte(pos1), 0o644); err != nil {
		t.Fatal(err)
	}
	s, ok := Read(beneath(dir), 2)
	if !ok {
		t.Fatal("no sample")
	}
	if s.Packets != 1000 || s.Bytes != 64000 || s.Drops != 10+10+2+1+3 || s.QueueLen != 12 || s.CyclesPerBatch != 3000 {
		t.Fatalf("sample %+v", s)
	}
	if s.DropsBy["nf"] != 10+10 || s.DropsBy["tx"]+s.DropsBy["copy"]+s.DropsBy["malformed"] != 2+1 || s.DropsBy["descriptor"] != 3 {
		t.Fatalf("drops by reason %v", s.DropsBy)
	}
	if len(s.NFs) != 2 || s.NFs[1] != (NF{Name: "nat", Position: 1, PacketsIn: 990, PacketsOut: 980, Dropped: 10, CyclesPerPacket: 300,
		FlowEvictions: 7, FlowRefusals: 2}) {
		t.Fatalf("NFs %+v", s.NFs)
	}
}

func Test_Read_without_position_0_has_no_sample(t *testing.T) {
	dir := t.TempDir()
	p1 := filepath.Join(dir, "stats-1.json")
	if err := os.WriteFile(p1, []byte(pos1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := Read(beneath(dir), 2); ok {
		t.Fatal("a sample without position 0")
	}
}

func Test_Parse_accepts_a_queue_length_the_driver_does_not_report(t *testing.T) {
	f, err := Parse([]byte(`{"position":0,"of":1,"nfs":[],"port":{"rx_packets":5,"rx_queue_len":null}}`))
	if err != nil || f.Port.RxQueueLen != nil || f.Port.RxPackets != 5 {
		t.Fatalf("%+v %v", f, err)
	}
	if _, err := Parse([]byte(`{"position":`)); err == nil {
		t.Fatal("truncated file accepted")
	}
}

func Test_Rate_is_the_counter_difference_over_time(t *testing.T) {
	t0 := time.Unix(100, 0)
	pps, gbps := Rate(Sample{At: t0, Packets: 1000, Bytes: 1e6}, Sample{At: t0.Add(2 * time.Second), Packets: 3000, Bytes: 1e6 + 250e6})
	if pps != 1000 || gbps != 1 {
		t.Fatalf("pps %v gbps %v", pps, gbps)
	}
	if pps, _ := Rate(Sample{At: t0, Packets: 1000}, Sample{At: t0.Add(time.Second), Packets: 10}); pps != 0 {
		t.Fatalf("rebuilt instance: pps %v", pps)
	}
	if pps, _ := Rate(Sample{At: t0, Packets: 1}, Sample{At: t0, Packets: 5}); pps != 0 {
		t.Fatalf("same file: pps %v", pps)
	}
}

func Test_Significant_ignores_small_rate_changes(t *testing.T) {
	last := Report{Phase: "ready", RatePPS: 1e6, Drops: 5}
	cases := []struct {
		cur  Report
		want bool
	}{
		{Report{Phase: "ready", RatePPS: 1.05e6, Drops: 5}, false},
		{Report{Phase: "ready", RatePPS: 1.2e6, Drops: 5}, true},
		{Report{Phase: "ready", RatePPS: 0.85e6, Drops: 5}, true},
		{Report{Phase: "ready", RatePPS: 1e6, Drops: 6}, true},
		{Report{Phase: "failed", RatePPS: 1e6, Drops: 5}, true},
		{Report{Phase: "ready", RatePPS: 1e6, Drops: 5, Attached: true, Core: 1}, true},
		{Report{Phase: "ready", RatePPS: 1e6, Drops: 5, QueueLen: 40}, true},
		{Report{Phase: "ready", RatePPS: 1e6, Drops: 5, Batch: 8}, true},
	}
	for i, c := range cases {
		if got := Significant(last, c.cur); got != c.want {
			t.Errorf("case %d: %v, want %v", i, got, c.want)
		}
	}
	if !Significant(Report{Phase: "ready"}, Report{Phase: "ready", RatePPS: 10}) {
		t.Error("traffic starting is not significant")
	}
}

// beneath opens an instance's files in dir as keel-agent does under Docker.
func beneath(dir string) Opener {
	return func(k int) ([]byte, time.Time, error) { return ReadBeneath(dir, fmt.Sprintf("stats-%d.json", k)) }
}

func Test_ReadBeneath_never_follows_what_an_NF_put_in_its_directory(t *testing.T) {
	dir, host := t.TempDir(), t.TempDir()
	secret := filepath.Join(host, "secret")
	if err := os.WriteFile(secret, []byte(pos0), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "stats-0.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../"+filepath.Base(host)+"/secret", filepath.Join(dir, "stats-1.json")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "stats-2.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	huge := make([]byte, MaxFileBytes+1)
	if err := os.WriteFile(filepath.Join(dir, "stats-3.json"), huge, 0o600); err != nil {
		t.Fatal(err)
	}
	for k, want := range []string{"symbolic link", "symbolic link", "not a regular file", "larger than"} {
		done := make(chan error, 1)
		go func() { _, _, err := ReadBeneath(dir, fmt.Sprintf("stats-%d.json", k)); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) && !(want == "symbolic link" && errors.Is(err, syscall.ELOOP)) {
				t.Errorf("stats-%d.json: error %v, want one saying %q", k, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("stats-%d.json: the read blocked", k)
		}
	}
	if _, _, err := ReadBeneath(dir, "../"+filepath.Base(host)+"/secret"); err == nil {
		t.Error("a name with .. left the directory")
	}
}

// What an NF puts in its directory is looked at before it is opened: a node that is not a
// regular file (here a FIFO, whose opening a writer waits for; a device's opening may act
// by itself) is never opened.
func Test_ReadBeneath_opens_nothing_but_a_regular_file(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "stats-0.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	opened := make(chan struct{})
	go func() {
		// Returns once a reader opens the FIFO.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		close(opened)
	}()
	time.Sleep(100 * time.Millisecond) // the writer waits in open(2)
	if _, _, err := ReadBeneath(dir, "stats-0.json"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("error %v, want one saying not a regular file", err)
	}
	select {
	case <-opened:
		t.Error("ReadBeneath opened the FIFO")
	case <-time.After(200 * time.Millisecond):
	}
	if r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
		<-opened
		r.Close()
	}
}

func Test_ReadInRoot_resolves_absolute_symlinks_inside_the_root(t *testing.T) {
	root := t.TempDir()
	// The container's view: /run/keel/i/stats-0.json -> /etc/stats (an absolute link, as
	// an NF could make), which must be root/etc/stats and not the host's /etc/stats.
	inst := filepath.Join(root, "run", "keel", "i")
	if err := os.MkdirAll(inst, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "stats"), []byte(pos0), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/stats", filepath.Join(inst, "stats-0.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/../../../../../../etc/hostname", filepath.Join(inst, "stats-1.json")); err != nil {
		t.Fatal(err)
	}
	b, _, err := ReadInRoot(root, "/run/keel/i/stats-0.json")
	if err != nil || string(b) != pos0 {
		t.Fatalf("read %q, %v; want the root's /etc/stats", b, err)
	}
	if b, _, err := ReadInRoot(root, "/run/keel/i/stats-1.json"); err == nil {
		t.Fatalf("read %q through a link that climbs out of the root", b)
	}
	// And as keel-agent does it under Kubernetes: its own /proc/PID/root.
	self := t.TempDir()
	if err := os.WriteFile(filepath.Join(self, "stats-0.json"), []byte(pos0), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _, err := ReadInRoot(fmt.Sprintf("/proc/%d/root", os.Getpid()), filepath.Join(self, "stats-0.json")); err != nil || string(b) != pos0 {
		t.Fatalf("through /proc/PID/root: %q, %v", b, err)
	}
}
