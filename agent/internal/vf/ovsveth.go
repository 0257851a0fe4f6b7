// SPDX-License-Identifier: Apache-2.0

package vf

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// OVSVeth is the embedded NIC: an OVS bridge (userspace datapath, this kernel has no OVS
// module) plays the NIC's L2 switch, with one trunk uplink veth toward the ToR; a VF is a
// veth pair whose bridge side is an access port tagged with the instance's VLAN.
type OVSVeth struct {
	DB     string // ovs-vsctl --db (e.g. unix:/run/keel/ovs/db.sock); "" for OVS's default
	Bridge string // keel-nic-<worker>
	Uplink string // bridge side of the trunk veth, keel-up-<worker>
	ToR    string // its peer, left in the root netns for the ToR, keel-tor-<worker>
	Sys    string // sysfs mount point, /sys ("" too; a fake tree in tests)
	Run    Runner
}

// NewOVSVeth returns the embedded provider of worker with its default names.
func NewOVSVeth(db, bridge, worker string) *OVSVeth {
	id := WorkerPortID(worker)
	if bridge == "" {
		bridge = "keel-nic-" + id
	}
	return &OVSVeth{DB: db, Bridge: bridge, Uplink: "keel-up-" + id, ToR: "keel-tor-" + id, Run: Exec}
}

// WorkerPortID is what a worker's netdev names end in (keel-nic-ID, keel-up-ID, keel-tor-ID):
// the worker's name when that fits a 15-byte interface name (6 bytes at most), else "h" and
// the first 5 hex digits of its SHA-256, as Kubernetes node names are longer. keel-torctl
// names the ToR's trunk toward a worker by the same rule (keel_torctl.controller.worker_port_id;
// both test the vector keel-k8s -> hdc3bf).
func WorkerPortID(worker string) string {
	if len(worker) <= 6 {
		return worker
	}
	return fmt.Sprintf("h%x", sha256.Sum256([]byte(worker)))[:6]
}

// VethName is the bridge-side netdev (and OVS port) of the VF with this VLAN.
func VethName(vlan uint32) string { return "keelvf" + strconv.FormatUint(uint64(vlan), 10) }

// peerName is the container side before it is renamed InNetns in the container's netns.
func peerName(vlan uint32) string { return "keelvp" + strconv.FormatUint(uint64(vlan), 10) }

// VLANOfVeth returns the VLAN a keelvf<VLAN> name stands for.
func VLANOfVeth(name string) (uint32, bool) {
	s, ok := strings.CutPrefix(name, "keelvf")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || CheckVLAN(uint32(v)) != nil || strconv.FormatUint(v, 10) != s {
		return 0, false
	}
	return uint32(v), true
}

// CheckIfName reports whether name fits a Linux netdev name (15 bytes).
func CheckIfName(name string) error {
	if name == "" || len(name) > 15 || strings.ContainsAny(name, "/ \t:") {
		return fmt.Errorf("%q is not a network interface name (1-15 bytes, no '/', ':' or space): use a shorter worker name or --bridge", name)
	}
	return nil
}

// Setup creates the bridge and its trunk uplink if missing.
func (o *OVSVeth) Setup(ctx context.Context) error {
	for _, n := range []string{o.Bridge, o.Uplink, o.ToR} {
		if err := CheckIfName(n); err != nil {
			return err
		}
	}
	if _, err := run(ctx, o.Run, ovs(o.DB, "--may-exist", "add-br", o.Bridge, "--", "set", "bridge", o.Bridge,
		"datapath_type=netdev", "fail_mode=standalone")); err != nil {
		return fmt.Errorf("bridge %s: %w", o.Bridge, err)
	}
	links, err := o.links(ctx)
	if err != nil {
		return err
	}
	if !links[o.Uplink] {
		if links[o.ToR] {
			_, _ = run(ctx, o.Run, ipLinkDel(o.ToR))
		}
		if _, err := run(ctx, o.Run, ipVethAdd(o.Uplink, o.ToR)); err != nil {
			return fmt.Errorf("uplink %s: %w", o.Uplink, err)
		}
	}
	for _, n := range []string{o.Uplink, o.ToR} {
		if _, err := run(ctx, o.Run, ipLinkUp(n)); err != nil {
			return fmt.Errorf("uplink %s: %w", n, err)
		}
		if _, err := run(ctx, o.Run, ethtoolTxOff(n)); err != nil {
			return fmt.Errorf("uplink %s: %w", n, err)
		}
	}
	if _, err := run(ctx, o.Run, ovs(o.DB, "--may-exist", "add-port", o.Bridge, o.Uplink)); err != nil {
		return fmt.Errorf("uplink %s: %w", o.Uplink, err)
	}
	return nil
}

// Capacity is unbounded: VLANs bound the veths.
func (o *OVSVeth) Capacity() uint32 { return 0 }

// Plug creates the veth pair of vlan (replacing a leftover one), makes its bridge side an
// access port, and moves the other side into pid's netns as vf0. Neither side runs IPv6: a
// kernel's router solicitations and MLD reports would otherwise enter the chain on vf0 and
// the ToR through the bridge, packets of no tenant.
func (o *OVSVeth) Plug(ctx context.Context, instance string, vlan uint32, pid int) error {
	if err := CheckVLAN(vlan); err != nil {
		return err
	}
	host, peer := VethName(vlan), peerName(vlan)
	if err := o.Unplug(ctx, instance, vlan); err != nil {
		return err
	}
	_, _ = run(ctx, o.Run, ipLinkDel(peer))
	steps := [][]string{
		ipVethAdd(host, peer),
		ethtoolTxOff(host),
		ethtoolTxOff(peer),
		noIPv6(host),
		ipLinkToNetns(peer, pid),
		inNetns(pid, noIPv6(peer)),
		inNetns(pid, ipLinkRenameUp(peer, InNetns)),
		ipLinkUp(host),
		// dot1q-tunnel, not access: an NF that tags its packets itself (Tunnel on a server)
		// keeps its tag inside the instance VLAN, where an access port would drop them; the
		// outer tag is 802.1Q like the trunk's. Untagged packets are handled as on an access port.
		ovs(o.DB, "--may-exist", "add-port", o.Bridge, host, "tag="+strconv.FormatUint(uint64(vlan), 10),
			"vlan_mode=dot1q-tunnel", "other_config:qinq-ethtype=802.1q",
			"--", "set", "port", host, "external_ids:keel-instance="+instance),
	}
	for _, argv := range steps {
		if _, err := run(ctx, o.Run, argv); err != nil {
			_ = o.Unplug(ctx, instance, vlan)
			return fmt.Errorf("VF %s of %s: %w", host, instance, err)
		}
	}
	return nil
}

// Unplug removes the OVS port and the veth pair of vlan.
func (o *OVSVeth) Unplug(ctx context.Context, instance string, vlan uint32) error {
	host := VethName(vlan)
	if _, err := run(ctx, o.Run, ovs(o.DB, "--if-exists", "del-port", o.Bridge, host)); err != nil {
		return fmt.Errorf("VF %s of %s: %w", host, instance, err)
	}
	links, err := o.links(ctx)
	if err != nil {
		return err
	}
	if links[host] {
		if _, err := run(ctx, o.Run, ipLinkDel(host)); err != nil {
			return fmt.Errorf("VF %s of %s: %w", host, instance, err)
		}
	}
	return nil
}

// List returns the VF ports on the bridge and the keelvf veths without a port. A VF is
// wired when both its port and its netdev exist (a veth vanishes with its container's netns).
func (o *OVSVeth) List(ctx context.Context) ([]VF, error) {
	// The two commands run at once (each is a fork and exec, 10-30 ms on a busy core).
	var links map[string]bool
	var errL error
	done := make(chan struct{})
	go func() { defer close(done); links, errL = o.links(ctx) }()
	out, err := run(ctx, o.Run, ovs(o.DB, "--format=json", "--columns=name,tag,external_ids", "list", "Port"))
	<-done
	if err != nil {
		return nil, err
	}
	ports, err := ParsePorts(out)
	if err != nil {
		return nil, err
	}
	if errL != nil {
		return nil, errL
	}
	var vfs []VF
	seen := map[string]bool{}
	for _, p := range ports {
		vlan, ok := VLANOfVeth(p.Name)
		if !ok {
			continue
		}
		seen[p.Name] = true
		vfs = append(vfs, VF{Instance: p.ExternalIDs["keel-instance"], VLAN: vlan, Name: p.Name,
			Wired: links[p.Name] && p.Tag == vlan})
	}
	for name := range links {
		if vlan, ok := VLANOfVeth(name); ok && !seen[name] {
			vfs = append(vfs, VF{VLAN: vlan, Name: name})
		}
	}
	return vfs, nil
}

func (o *OVSVeth) links(ctx context.Context) (map[string]bool, error) {
	out, err := run(ctx, o.Run, ipLinkList())
	if err != nil {
		return nil, err
	}
	var list []struct {
		Name string `json:"ifname"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("ip -j link: %w", err)
	}
	names := map[string]bool{}
	for _, l := range list {
		names[l.Name] = true
	}
	return names, nil
}

// Port is one row of OVS's Port table.
type Port struct {
	Name        string
	Tag         uint32 // 0: none (trunk)
	ExternalIDs map[string]string
}

// ParsePorts decodes `ovs-vsctl --format=json --columns=name,tag,external_ids list Port`
// (OVSDB's JSON: an empty set is ["set",[]], a map ["map",[[k,v],...]]).
func ParsePorts(out []byte) ([]Port, error) {
	var table struct {
		Data [][]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(out, &table); err != nil {
		return nil, fmt.Errorf("ovs-vsctl list Port: %w", err)
	}
	var ports []Port
	for _, row := range table.Data {
		if len(row) != 3 {
			return nil, fmt.Errorf("ovs-vsctl list Port: row of %d columns", len(row))
		}
		p := Port{ExternalIDs: map[string]string{}}
		if err := json.Unmarshal(row[0], &p.Name); err != nil {
			return nil, fmt.Errorf("ovs-vsctl list Port: name: %w", err)
		}
		var tag uint32
		if json.Unmarshal(row[1], &tag) == nil {
			p.Tag = tag
		}
		var m []json.RawMessage
		if json.Unmarshal(row[2], &m) == nil && len(m) == 2 {
			var pairs [][2]string
			if json.Unmarshal(m[1], &pairs) == nil {
				for _, kv := range pairs {
					p.ExternalIDs[kv[0]] = kv[1]
				}
			}
		}
		ports = append(ports, p)
	}
	return ports, nil
}
