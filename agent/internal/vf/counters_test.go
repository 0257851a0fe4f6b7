// SPDX-License-Identifier: Apache-2.0

package vf

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func Test_OVSVeth_Counters_reads_the_bridge_side_veth_as_the_instance_sees_it(t *testing.T) {
	sys := t.TempDir()
	dir := filepath.Join(sys, "class", "net", "keelvf7", "statistics")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"tx_packets": "100\n", "tx_bytes": "6400\n", "tx_dropped": "3\n",
		"rx_packets": "90\n", "rx_bytes": "5760\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := NewOVSVeth("", "", "w1")
	o.Sys = sys
	c, err := o.Counters(context.Background(), 7)
	if err != nil {
		t.Fatal(err)
	}
	want := Counters{RxPackets: 100, RxBytes: 6400, RxDropped: 3, TxPackets: 90, TxBytes: 5760}
	if c != want || c.Offered() != 103 {
		t.Fatalf("counters %+v (offered %d), want %+v (offered 103)", c, c.Offered(), want)
	}
	if _, err := o.Counters(context.Background(), 8); err == nil {
		t.Fatal("a VF that does not exist has counters")
	}
}

func Test_ParseVFCounters_keys_the_VFs_stats_by_VLAN(t *testing.T) {
	out := `[{"ifname":"enp1s0f0","vfinfo_list":[
	  {"vf":0,"vlan_list":[{"vlan":100}],"stats":{"rx":{"bytes":640,"packets":10,"multicast":0,"broadcast":0,"dropped":2},
	    "tx":{"tx_bytes":320,"tx_packets":5,"dropped":0}}},
	  {"vf":1,"stats":{"rx":{"bytes":1,"packets":1},"tx":{"tx_bytes":1,"tx_packets":1}}}]}]`
	m, err := ParseVFCounters([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := Counters{RxPackets: 10, RxBytes: 640, RxDropped: 2, TxPackets: 5, TxBytes: 320}
	if len(m) != 1 || m[100] != want {
		t.Fatalf("%+v, want only VLAN 100: %+v", m, want)
	}
}
