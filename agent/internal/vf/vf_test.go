// SPDX-License-Identifier: Apache-2.0

package vf

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func Test_VethName_round_trips_through_VLANOfVeth(t *testing.T) {
	for _, vlan := range []uint32{1, 100, 4094} {
		name := VethName(vlan)
		if err := CheckIfName(name); err != nil {
			t.Fatal(err)
		}
		if got, ok := VLANOfVeth(name); !ok || got != vlan {
			t.Fatalf("%s -> %d %v", name, got, ok)
		}
	}
	for _, bad := range []string{"keelvf0", "keelvf4095", "keelvf012", "keelvfx", "keel-up-local", "eth0"} {
		if _, ok := VLANOfVeth(bad); ok {
			t.Errorf("%s parsed as a VF", bad)
		}
	}
}

func Test_CheckIfName_refuses_names_Linux_refuses(t *testing.T) {
	if CheckIfName("keel-tor-worker1") == nil {
		t.Error("16 bytes accepted")
	}
	if CheckIfName("keel-tor-local") != nil {
		t.Error("keel-tor-local refused")
	}
}

func Test_ParsePorts_reads_tags_and_external_ids(t *testing.T) {
	out := `{"data":[["keel-up-local",["set",[]],["map",[]]],` +
		`["keelvf100",100,["map",[["keel-instance","c1/0"]]]]],"headings":["name","tag","external_ids"]}`
	ports, err := ParsePorts([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []Port{{Name: "keel-up-local", ExternalIDs: map[string]string{}},
		{Name: "keelvf100", Tag: 100, ExternalIDs: map[string]string{"keel-instance": "c1/0"}}}
	if !reflect.DeepEqual(ports, want) {
		t.Fatalf("got %+v", ports)
	}
}

// fakeRunner answers `ip -j link show` and `ovs-vsctl list Port` and records the rest.
type fakeRunner struct {
	links, ports string
	calls        []string
}

func (f *fakeRunner) run(_ context.Context, name string, args ...string) ([]byte, error) {
	line := name + " " + strings.Join(args, " ")
	switch {
	case strings.HasPrefix(line, "ip -j link show"):
		return []byte(f.links), nil
	case strings.Contains(line, "list Port"):
		return []byte(f.ports), nil
	}
	f.calls = append(f.calls, line)
	return nil, nil
}

func Test_OVSVeth_List_marks_a_VF_without_its_veth_unwired(t *testing.T) {
	f := &fakeRunner{
		links: `[{"ifname":"lo"},{"ifname":"keelvf100"},{"ifname":"keelvf7"}]`,
		ports: `{"data":[["keelvf100",100,["map",[["keel-instance","c/0"]]]],["keelvf200",200,["map",[["keel-instance","c/1"]]]]]}`,
	}
	o := NewOVSVeth("unix:/tmp/db.sock", "", "local")
	o.Run = f.run
	vfs, err := o.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []VF{{Instance: "c/0", VLAN: 100, Name: "keelvf100", Wired: true}, {Instance: "c/1", VLAN: 200, Name: "keelvf200"},
		{VLAN: 7, Name: "keelvf7"}}
	if !reflect.DeepEqual(vfs, want) {
		t.Fatalf("got %+v", vfs)
	}
}

func Test_OVSVeth_Plug_tags_the_port_and_moves_the_peer_in_as_vf0(t *testing.T) {
	f := &fakeRunner{links: `[]`, ports: `{"data":[]}`}
	o := NewOVSVeth("", "", "local")
	o.Run = f.run
	if err := o.Plug(context.Background(), "c/0", 100, 4242); err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(f.calls, "\n")
	for _, want := range []string{
		"ip link add keelvf100 type veth peer name keelvp100",
		"ethtool -K keelvf100 tx off",
		"ethtool -K keelvp100 tx off",
		"sysctl -q -w net.ipv6.conf.keelvf100.disable_ipv6=1\nip link set keelvp100 netns 4242",
		"nsenter -t 4242 -n -- sysctl -q -w net.ipv6.conf.keelvp100.disable_ipv6=1\nnsenter -t 4242 -n -- ip link set keelvp100 name vf0 up",
		"ovs-vsctl --timeout=10 --may-exist add-port keel-nic-local keelvf100 tag=100 vlan_mode=dot1q-tunnel other_config:qinq-ethtype=802.1q -- set port keelvf100 external_ids:keel-instance=c/0",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("missing %q in\n%s", want, joined)
		}
	}
	if o.Plug(context.Background(), "c/0", 0, 1) == nil {
		t.Error("VLAN 0 accepted")
	}
}

// fakeSysfs builds /sys/class/net/PF/device with n VFs, the first `inNetns` of them
// without a netdev (moved into a container).
func fakeSysfs(t *testing.T, pf string, n, moved int) string {
	t.Helper()
	sys := t.TempDir()
	dev := filepath.Join(sys, "devices", "pci0000:00", "0000:00:01.0")
	must(t, os.MkdirAll(dev, 0o755))
	must(t, os.MkdirAll(filepath.Join(sys, "class", "net", pf), 0o755))
	must(t, os.Symlink(dev, filepath.Join(sys, "class", "net", pf, "device")))
	must(t, os.WriteFile(filepath.Join(dev, "sriov_numvfs"), []byte(strings.TrimSpace(string(rune('0'+n)))+"\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dev, "sriov_totalvfs"), []byte("8\n"), 0o644))
	for i := 0; i < n; i++ {
		pci := "0000:00:01." + string(rune('1'+i))
		vdir := filepath.Join(sys, "devices", "pci0000:00", pci)
		must(t, os.MkdirAll(filepath.Join(vdir, "net"), 0o755))
		if i >= moved {
			must(t, os.MkdirAll(filepath.Join(vdir, "net", "enp0s1f"+string(rune('1'+i))), 0o755))
		}
		must(t, os.Symlink("../"+pci, filepath.Join(dev, "virtfn"+string(rune('0'+i)))))
	}
	return sys
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func Test_ReadSysfs_lists_VFs_with_their_netdevs(t *testing.T) {
	sys := fakeSysfs(t, "ens1f0", 3, 1)
	num, total, vfs, err := ReadSysfs(sys, "ens1f0")
	if err != nil {
		t.Fatal(err)
	}
	want := []SysVF{{0, "0000:00:01.1", ""}, {1, "0000:00:01.2", "enp0s1f2"}, {2, "0000:00:01.3", "enp0s1f3"}}
	if num != 3 || total != 8 || !reflect.DeepEqual(vfs, want) {
		t.Fatalf("num %d total %d vfs %+v", num, total, vfs)
	}
}

func Test_ReadSysfs_reports_a_PF_without_SRIOV(t *testing.T) {
	sys := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(sys, "class", "net", "eth0", "device"), 0o755))
	if _, _, _, err := ReadSysfs(sys, "eth0"); err == nil || !strings.Contains(err.Error(), "no SR-IOV") {
		t.Fatalf("err %v", err)
	}
}

func Test_SRIOV_Setup_enables_all_VFs_when_none_are(t *testing.T) {
	sys := fakeSysfs(t, "ens1f0", 0, 0)
	s := &SRIOV{PF: "ens1f0", Sys: sys, Run: (&fakeRunner{}).run}
	must(t, s.Setup(context.Background()))
	b, _ := os.ReadFile(filepath.Join(sys, "class", "net", "ens1f0", "device", "sriov_numvfs"))
	if string(b) != "8" {
		t.Fatalf("sriov_numvfs %q", b)
	}
}

func Test_FreeVF_skips_tagged_VFs_and_VFs_in_a_container(t *testing.T) {
	vfs := []SysVF{{0, "a", ""}, {1, "b", "enp1"}, {2, "c", "enp2"}}
	got, ok := FreeVF(vfs, map[int]uint32{1: 100})
	if !ok || got.Index != 2 {
		t.Fatalf("got %+v %v", got, ok)
	}
	if _, ok := FreeVF(vfs, map[int]uint32{1: 100, 2: 200}); ok {
		t.Fatal("found a VF where none is free")
	}
}

func Test_SRIOV_Plug_tags_a_free_VF_and_List_finds_it_by_VLAN(t *testing.T) {
	sys := fakeSysfs(t, "ens1f0", 2, 0)
	f := &fakeRunner{links: `[{"ifname":"ens1f0","vfinfo_list":[{"vf":0,"vlan_list":[{"vlan":100}]},{"vf":1}]}]`}
	s := &SRIOV{PF: "ens1f0", Sys: sys, Run: f.run}
	must(t, s.Plug(context.Background(), "c/1", 200, 77))
	joined := strings.Join(f.calls, "\n")
	for _, want := range []string{"ip link set ens1f0 vf 1 vlan 200", "ip link set enp0s1f2 netns 77",
		"nsenter -t 77 -n -- ip link set enp0s1f2 name vf0 up"} {
		if !strings.Contains(joined, want) {
			t.Errorf("missing %q in\n%s", want, joined)
		}
	}
	vfs, err := s.List(context.Background())
	if err != nil || len(vfs) != 1 || vfs[0].VLAN != 100 || !vfs[0].Wired {
		t.Fatalf("List %+v %v", vfs, err)
	}
	if s.Capacity() != 1 {
		t.Fatalf("capacity %d", s.Capacity())
	}
}

func Test_a_long_worker_name_gives_interface_names_that_fit(t *testing.T) {
	if got := WorkerPortID("local"); got != "local" {
		t.Errorf("WorkerPortID(local) = %q: a short name stays", got)
	}
	// The vector keel-torctl's tests check too (keel_torctl.controller.worker_port_id).
	if got := WorkerPortID("keel-k8s"); got != "hdc3bf" {
		t.Errorf("WorkerPortID(keel-k8s) = %q, want hdc3bf", got)
	}
	o := NewOVSVeth("", "", "ip-10-0-1-23.ec2.internal")
	for _, n := range []string{o.Bridge, o.Uplink, o.ToR} {
		if len(n) > 15 {
			t.Errorf("%s: %d bytes, an interface name has at most 15", n, len(n))
		}
	}
	if o.ToR != "keel-tor-h50fb9" {
		t.Errorf("ToR side %q", o.ToR)
	}
}
