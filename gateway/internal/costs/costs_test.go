// SPDX-License-Identifier: Apache-2.0

package costs

import (
	"math"
	"strings"
	"testing"
)

func Test_load_committedFilesGiveIOAndHandoff(t *testing.T) {
	tbl, err := Load("../../../bench/results/nf_profile.json", "../../../bench/results/chain_length.json")
	if err != nil {
		t.Fatal(err)
	}
	// chain_length.json: handoff_cycles 1559; length 1: 1091 − 879 cycles of I/O.
	if tbl.HandoffCycles != 1559 || math.Abs(tbl.IOCycles-212) > 1e-9 {
		t.Fatalf("handoff %.0f, I/O %.1f; want 1559 and 212", tbl.HandoffCycles, tbl.IOCycles)
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
