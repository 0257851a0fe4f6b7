// SPDX-License-Identifier: Apache-2.0

// Package vf gives each chain instance its virtual function: the NIC port, tagged with the
// instance's VLAN, that position 0 of the chain owns inside its container as "vf0". One
// interface, Provider; the implementations beside it: OVSVeth (the embedded NIC: an OVS
// bridge and veth pairs) and SRIOV (a real NIC's VFs).
package vf

import (
	"context"
	"fmt"
)

// InNetns is the name a VF gets inside position 0's network namespace; keel-nf opens it
// with DPDK's net_af_packet or net_af_xdp.
const InNetns = "vf0"

// VF is a VF that exists on the worker.
type VF struct {
	Instance string // the chain instance it serves ("" if the provider cannot tell)
	VLAN     uint32
	Name     string // its host-side netdev (veth end or VF netdev) or OVS port
	Wired    bool   // usable: its host side exists and is on the NIC switch
}

// Provider creates, lists and releases VFs.
type Provider interface {
	// Setup prepares the NIC (bridge and uplink, or checks SR-IOV) idempotently.
	Setup(ctx context.Context) error
	// Capacity is how many VFs the worker can still hold in total (0 = unbounded).
	Capacity() uint32
	// Plug gives instance a VF tagged vlan and moves it into the network namespace of
	// the process pid (position 0's keel-nf) as InNetns, up, with TX offloads off.
	Plug(ctx context.Context, instance string, vlan uint32, pid int) error
	// Unplug releases the instance's VF; a VF that is already gone is no error.
	Unplug(ctx context.Context, instance string, vlan uint32) error
	// List returns the VFs that exist, by instance where known.
	List(ctx context.Context) ([]VF, error)
	// Counters reads the host's counters of the VF tagged vlan (see Counters).
	Counters(ctx context.Context, vlan uint32) (Counters, error)
}

// CheckVLAN reports whether vlan is a usable 802.1Q VLAN id.
func CheckVLAN(vlan uint32) error {
	if vlan < 1 || vlan > 4094 {
		return fmt.Errorf("VLAN %d is not in 1-4094", vlan)
	}
	return nil
}
