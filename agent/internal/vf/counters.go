// SPDX-License-Identifier: Apache-2.0

package vf

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Counters are a VF's packet counters as the host counts them (its kernel or its NIC), seen
// from the instance: what was offered to it and what it sent back. Nothing in the
// instance's processes writes them, so the controller may decide by them.
type Counters struct {
	RxPackets uint64 // handed to the instance
	RxBytes   uint64
	RxDropped uint64 // offered to the instance but not handed over: its receive side was full
	TxPackets uint64 // sent by the instance
	TxBytes   uint64
}

// Offered is the packets offered to the instance: handed over or refused.
func (c Counters) Offered() uint64 { return c.RxPackets + c.RxDropped }

// Counters reads the kernel's counters of the bridge-side veth of vlan: what that end
// transmits is what the instance receives, and what it could not hand to the instance's
// end (the receive backlog full) it counts as tx_dropped.
func (o *OVSVeth) Counters(_ context.Context, vlan uint32) (Counters, error) {
	if err := CheckVLAN(vlan); err != nil {
		return Counters{}, err
	}
	sys := o.Sys
	if sys == "" {
		sys = "/sys"
	}
	dir := filepath.Join(sys, "class", "net", VethName(vlan), "statistics")
	var c Counters
	for _, f := range []struct {
		name string
		v    *uint64
	}{
		{"tx_packets", &c.RxPackets}, {"tx_bytes", &c.RxBytes}, {"tx_dropped", &c.RxDropped},
		{"rx_packets", &c.TxPackets}, {"rx_bytes", &c.TxBytes},
	} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			return Counters{}, fmt.Errorf("VF %s: %w", VethName(vlan), err)
		}
		if *f.v, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return Counters{}, fmt.Errorf("VF %s: %s: %w", VethName(vlan), f.name, err)
		}
	}
	return c, nil
}

// Counters reads the NIC's counters of the VF that carries vlan, as the PF's driver reports
// them (ip -s link show PF: a VF's rx is what the NIC delivered to it, its rx dropped what
// the NIC dropped because the VF's receive ring was full, where the driver counts that).
func (s *SRIOV) Counters(ctx context.Context, vlan uint32) (Counters, error) {
	if err := CheckVLAN(vlan); err != nil {
		return Counters{}, err
	}
	out, err := run(ctx, s.Run, []string{"ip", "-j", "-s", "link", "show", s.PF})
	if err != nil {
		return Counters{}, err
	}
	all, err := ParseVFCounters(out)
	if err != nil {
		return Counters{}, err
	}
	c, ok := all[vlan]
	if !ok {
		return Counters{}, fmt.Errorf("PF %s has no VF with VLAN %d", s.PF, vlan)
	}
	return c, nil
}

// ParseVFCounters decodes each tagged VF's counters, by VLAN, from `ip -j -s link show PF`
// (vfinfo_list[].stats; iproute2 names the tx counters tx_bytes and tx_packets).
func ParseVFCounters(out []byte) (map[uint32]Counters, error) {
	vfs, err := parseVFInfo(out)
	if err != nil {
		return nil, err
	}
	m := map[uint32]Counters{}
	for i := range vfs {
		vlan := vfs[i].vlan()
		if vlan == 0 {
			continue
		}
		st := vfs[i].Stats
		m[vlan] = Counters{RxPackets: st.Rx.Packets, RxBytes: st.Rx.Bytes, RxDropped: st.Rx.Dropped,
			TxPackets: max(st.Tx.Packets, st.Tx.TxPackets), TxBytes: max(st.Tx.Bytes, st.Tx.TxBytes)}
	}
	return m, nil
}
