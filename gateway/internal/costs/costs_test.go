// SPDX-License-Identifier: Apache-2.0

package costs

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

func Test_load_committedFilesGiveIOAndHandoff(t *testing.T) {
	const path = "../../../bench/results/chain_length.json"
	tbl, err := Load("../../../bench/results/nf_profile.json", path)
	if err != nil {
		t.Fatal(err)
	}
	// What the committed file says, read here on its own: coopsched's handoff, and the I/O
	// of a one-NF chain (its single-process cycles a packet less the NF's).
	var f struct {
		Handoff float64 `json:"handoff_cycles"`
		Rows    []map[string]any
	}
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &f) != nil || f.Handoff <= 0 {
		t.Fatalf("%s: %v", path, err)
	}
	io, bytes := -1.0, math.Inf(1)
	for _, r := range f.Rows {
		b, _ := r["packet_bytes"].(float64) // the smallest packets' row
		if r["length"] == 1.0 && b < bytes {
			io, bytes = r["single_cycles_per_pkt"].(float64)-r["nf_cycles_per_pkt"].(float64), b
		}
	}
	if io <= 0 {
		t.Fatalf("%s: no length-1 row with single > nf cycles", path)
	}
	if tbl.HandoffCycles != f.Handoff || math.Abs(tbl.IOCycles-io) > 1e-9 {
		t.Fatalf("handoff %.0f, I/O %.1f; want %.0f and %.1f", tbl.HandoffCycles, tbl.IOCycles, f.Handoff, io)
	}
}

func Test_chain_interpolatesInPacketSize(t *testing.T) {
	tbl := Default()
	c, err := tbl.Chain([]string{"tunnel", "ipv4fwd"}, 790, 2.4e9)
	if err != nil {
		t.Fatal(err)
	}
	// tunnel 20 → 24 cycles from 80 to 1500 bytes: 22 at 790; copy 22.4 → 140.6 from 100
	// to 1500: 80.69 at 790.
	if math.Abs(c.NFCycles[0]-22) > 1e-9 || math.Abs(c.CopyCycles-(22.4+118.2*690/1400)) > 1e-9 || c.FreqHz != 2.4e9 {
		t.Fatalf("cost %+v", c)
	}
	one, _ := tbl.Chain([]string{"nat"}, 1024, 2.4e9)
	if one.CopyCycles != 0 || one.Isolated() {
		t.Fatalf("a one-NF chain pays no copy: %+v", one)
	}
	if rtc := RunToCompletion(c); rtc.Isolated() || rtc.SingleCycles() != c.SingleCycles() {
		t.Fatalf("run to completion %+v of %+v", rtc, c)
	}
}

func Test_chain_unknownNFIsNamed(t *testing.T) {
	_, err := Default().Chain([]string{"acl", "bogus"}, 1024, 2.4e9)
	if err == nil || !strings.Contains(err.Error(), `unknown NF "bogus"`) {
		t.Fatalf("err %v", err)
	}
}

func Test_load_absentFilesKeepDefaults(t *testing.T) {
	tbl, err := Load("/nonexistent/nf.json", "/nonexistent/cl.json")
	if err != nil || tbl.HandoffCycles != DefaultHandoffCycles || tbl.IOCycles != DefaultIOCycles {
		t.Fatalf("%v %+v", err, tbl)
	}
}

func Test_load_takesIsolationFromTheCycleAccountPerPacketSize(t *testing.T) {
	// Receiving into the chain buffer (issue 33) left no copy_in: what isolation costs a
	// packet is then the descriptors and what egress does, measured per size; the median over
	// lengths 2+ (here 40, 50, 60 at 80 B; 70, 90 at 1024 B), beyond the one-process chain.
	row := func(length int, bytes, view, copyOut float64) map[string]any {
		return map[string]any{"length": length, "packet_bytes": bytes, "nf_cycles_per_pkt": 500.0,
			"single_cycles_per_pkt": 800.0, "breakdown": map[string]any{
				"single":  map[string]any{"copy_in": 0.0, "view": 0.0, "copy_out": 0.0},
				"keel":    map[string]any{"copy_in": 0.0, "view": view, "copy_out": copyOut},
				"nfvnice": nil}}
	}
	rows := []any{row(1, 80, 0, 0), row(2, 80, 40, 0), row(3, 80, 45, 5), row(4, 80, 60, 0),
		row(1, 1024, 0, 0), row(2, 1024, 70, 0), row(3, 1024, 90, 0)}
	b, _ := json.Marshal(map[string]any{"handoff_cycles": 1500.0, "rows": rows})
	path := t.TempDir() + "/chain_length.json"
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	tbl, err := Load("", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ bytes, want float64 }{{80, 50}, {1024, 80}, {552, 65}} {
		if got := tbl.CopyCycles(c.bytes); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("CopyCycles(%.0f) = %.2f, want %.2f", c.bytes, got, c.want)
		}
	}
	if tbl.IOCycles != 300 {
		t.Errorf("I/O %.1f: the 80-byte length-1 row gives 300", tbl.IOCycles)
	}
}
