// SPDX-License-Identifier: Apache-2.0

package vf

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// SRIOV hands out the virtual functions of a real NIC's physical function (PF): the NIC's
// own L2 switch delivers a VLAN to the VF configured with it (ip link set PF vf N vlan V),
// and the VF's kernel netdev moves into position 0's netns as vf0. A VF's VLAN is what ties
// it to its instance (VLANs are unique per worker), so a restarted agent finds it again.
type SRIOV struct {
	PF    string // the physical function's netdev
	Sys   string // sysfs mount point, /sys (a fake tree in tests)
	NumVF int    // VFs to enable if none are (0: sriov_totalvfs)
	Run   Runner
}

// SysVF is one VF of the PF as sysfs shows it.
type SysVF struct {
	Index  int
	PCI    string // its PCI address (the virtfnN link's target)
	Netdev string // its netdev in this netns, "" while it is in a container's netns
}

// ReadSysfs returns the PF's enabled and possible VF counts and its VFs in index order.
func ReadSysfs(sys, pf string) (num, total int, vfs []SysVF, err error) {
	dev := filepath.Join(sys, "class", "net", pf, "device")
	if num, err = readInt(filepath.Join(dev, "sriov_numvfs")); err != nil {
		return 0, 0, nil, fmt.Errorf("PF %s has no SR-IOV: %w", pf, err)
	}
	if total, err = readInt(filepath.Join(dev, "sriov_totalvfs")); err != nil {
		return 0, 0, nil, fmt.Errorf("PF %s: %w", pf, err)
	}
	links, err := filepath.Glob(filepath.Join(dev, "virtfn*"))
	if err != nil {
		return 0, 0, nil, err
	}
	for _, l := range links {
		i, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(l), "virtfn"))
		if err != nil {
			continue
		}
		target, err := os.Readlink(l)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("PF %s: %w", pf, err)
		}
		v := SysVF{Index: i, PCI: filepath.Base(target)}
		if ents, err := os.ReadDir(filepath.Join(l, "net")); err == nil && len(ents) > 0 {
			v.Netdev = ents[0].Name()
		}
		vfs = append(vfs, v)
	}
	sort.Slice(vfs, func(a, b int) bool { return vfs[a].Index < vfs[b].Index })
	return num, total, vfs, nil
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// vfInfo is one VF of `ip -j [-s] link show PF` (vfinfo_list; Stats only with -s; iproute2
// names the tx counters tx_bytes and tx_packets).
type vfInfo struct {
	VF    int `json:"vf"`
	VLANs []struct {
		VLAN uint32 `json:"vlan"`
	} `json:"vlan_list"`
	VLAN  uint32 `json:"vlan"`
	Stats struct {
		Rx struct {
			Bytes   uint64 `json:"bytes"`
			Packets uint64 `json:"packets"`
			Dropped uint64 `json:"dropped"`
		} `json:"rx"`
		Tx struct {
			Bytes     uint64 `json:"bytes"`
			Packets   uint64 `json:"packets"`
			TxBytes   uint64 `json:"tx_bytes"`
			TxPackets uint64 `json:"tx_packets"`
		} `json:"tx"`
	} `json:"stats"`
}

// vlan is the VF's VLAN: the first of vlan_list, or vlan.
func (v *vfInfo) vlan() uint32 {
	if len(v.VLANs) > 0 {
		return v.VLANs[0].VLAN
	}
	return v.VLAN
}

// parseVFInfo decodes every VF of every link in `ip -j [-s] link` output.
func parseVFInfo(out []byte) ([]vfInfo, error) {
	var links []struct {
		VFs []vfInfo `json:"vfinfo_list"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return nil, fmt.Errorf("ip -j link: %w", err)
	}
	var vfs []vfInfo
	for _, l := range links {
		vfs = append(vfs, l.VFs...)
	}
	return vfs, nil
}

// ParseVFVLANs decodes the VLAN of each VF from `ip -j link show PF` (vfinfo_list).
func ParseVFVLANs(out []byte) (map[int]uint32, error) {
	vfs, err := parseVFInfo(out)
	if err != nil {
		return nil, err
	}
	m := map[int]uint32{}
	for i := range vfs {
		m[vfs[i].VF] = vfs[i].vlan()
	}
	return m, nil
}

// FreeVF picks the lowest-numbered VF that has no VLAN and whose netdev is in this netns.
func FreeVF(vfs []SysVF, vlans map[int]uint32) (SysVF, bool) {
	for _, v := range vfs {
		if vlans[v.Index] == 0 && v.Netdev != "" {
			return v, true
		}
	}
	return SysVF{}, false
}

func (s *SRIOV) state(ctx context.Context) (num, total int, vfs []SysVF, vlans map[int]uint32, err error) {
	if num, total, vfs, err = ReadSysfs(s.Sys, s.PF); err != nil {
		return
	}
	out, err := run(ctx, s.Run, []string{"ip", "-j", "link", "show", s.PF})
	if err != nil {
		return
	}
	vlans, err = ParseVFVLANs(out)
	return
}

// Setup enables the PF's VFs if none are.
func (s *SRIOV) Setup(ctx context.Context) error {
	num, total, _, err := ReadSysfs(s.Sys, s.PF)
	if err != nil || num > 0 {
		return err
	}
	want := s.NumVF
	if want <= 0 || want > total {
		want = total
	}
	p := filepath.Join(s.Sys, "class", "net", s.PF, "device", "sriov_numvfs")
	if err := os.WriteFile(p, []byte(strconv.Itoa(want)), 0o644); err != nil {
		return fmt.Errorf("PF %s: enable %d VFs: %w", s.PF, want, err)
	}
	return nil
}

// Capacity is the VFs without a VLAN.
func (s *SRIOV) Capacity() uint32 {
	_, _, vfs, vlans, err := s.state(context.Background())
	if err != nil {
		return 0
	}
	var n uint32
	for _, v := range vfs {
		if vlans[v.Index] == 0 {
			n++
		}
	}
	return n
}

// Plug tags a free VF with vlan and moves its netdev into pid's netns as vf0.
func (s *SRIOV) Plug(ctx context.Context, instance string, vlan uint32, pid int) error {
	if err := CheckVLAN(vlan); err != nil {
		return err
	}
	_, _, vfs, vlans, err := s.state(ctx)
	if err != nil {
		return err
	}
	v, ok := FreeVF(vfs, vlans)
	if !ok {
		return fmt.Errorf("VF of %s: PF %s has no free VF", instance, s.PF)
	}
	return s.plug(ctx, instance, v, vlan, pid)
}

// plug tags VF v with vlan on the PF and moves its netdev, if it has one in this netns,
// into pid's netns as vf0; a failed step takes the tag off again.
func (s *SRIOV) plug(ctx context.Context, instance string, v SysVF, vlan uint32, pid int) error {
	steps := [][]string{ipVFVLAN(s.PF, v.Index, vlan)}
	if v.Netdev != "" {
		steps = append(steps, ipLinkToNetns(v.Netdev, pid), inNetns(pid, ipLinkRenameUp(v.Netdev, InNetns)))
	}
	for _, argv := range steps {
		if _, err := run(ctx, s.Run, argv); err != nil {
			_, _ = run(ctx, s.Run, ipVFVLAN(s.PF, v.Index, 0))
			return fmt.Errorf("VF %d of %s: %w", v.Index, instance, err)
		}
	}
	return nil
}

// Unplug clears the VLAN of the VF that has vlan (its netdev comes back to the root netns
// when the container's netns goes).
func (s *SRIOV) Unplug(ctx context.Context, instance string, vlan uint32) error {
	_, _, vfs, vlans, err := s.state(ctx)
	if err != nil {
		return err
	}
	for _, v := range vfs {
		if vlans[v.Index] == vlan {
			if _, err := run(ctx, s.Run, ipVFVLAN(s.PF, v.Index, 0)); err != nil {
				return fmt.Errorf("VF %d of %s: %w", v.Index, instance, err)
			}
		}
	}
	return nil
}

// List returns the VFs that carry a VLAN; the instance is known by its VLAN only.
func (s *SRIOV) List(ctx context.Context) ([]VF, error) {
	_, _, vfs, vlans, err := s.state(ctx)
	if err != nil {
		return nil, err
	}
	var out []VF
	for _, v := range vfs {
		if vlan := vlans[v.Index]; vlan != 0 {
			out = append(out, VF{VLAN: vlan, Name: s.PF + "/vf" + strconv.Itoa(v.Index), Wired: true})
		}
	}
	return out, nil
}
