// SPDX-License-Identifier: Apache-2.0

package xdp

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testNetns makes a network namespace with the inner end of a veth pair in it, and a process
// living there; it returns the process' pid and the inner end's name.
func testNetns(t *testing.T) (int, string) {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip")
	}
	id := os.Getpid() % 100000
	ns, outer, inner := fmt.Sprintf("keelxdp%d", id), fmt.Sprintf("keelxo%d", id), fmt.Sprintf("keelxi%d", id)
	run := func(args ...string) {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	run("ip", "netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", outer).Run()
		_ = exec.Command("ip", "netns", "del", ns).Run()
	})
	run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
	run("ip", "link", "set", inner, "netns", ns)
	run("ip", "-n", ns, "link", "set", inner, "up")
	run("ip", "link", "set", outer, "up")
	sleep := exec.Command("ip", "netns", "exec", ns, "sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	// ip netns exec has entered the namespace once /proc/PID/ns/net is the namespace's.
	want, _ := os.Readlink("/run/netns/" + ns)
	nsStat, err := os.Stat("/run/netns/" + ns)
	if err != nil {
		t.Fatalf("netns %s: %v (%s)", ns, err, want)
	}
	for i := 0; i < 100; i++ {
		if st, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", sleep.Process.Pid)); err == nil && os.SameFile(st, nsStat) {
			return sleep.Process.Pid, inner
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("process %d did not enter netns %s", sleep.Process.Pid, ns)
	return 0, ""
}

func Test_Attach_in_a_netns_survives_the_loader_and_is_updated_then_removed(t *testing.T) {
	dir := objects(t)
	pins := t.TempDir()
	if err := unix.Mount("bpf", pins, "bpf", 0, ""); err != nil {
		t.Skipf("cannot mount a bpffs: %v", err)
	}
	defer unix.Unmount(pins, 0)
	pid, ifname := testNetns(t)
	pin := filepath.Join(pins, "ingress", "link")
	show := func() string {
		out, _ := exec.Command("nsenter", "-t", fmt.Sprint(pid), "-n", "ip", "-d", "link", "show", ifname).CombinedOutput()
		return string(out)
	}

	first, err := Load([]Spec{{NF: "macswap"}}, Options{Objects: dir, Exit: ExitPass, PinDir: filepath.Join(pins, "ingress")})
	if err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := InNetns(pid, func() (err error) { mode, err = Attach(first.Entry(), ifname, pin); return }); err != nil {
		t.Fatal(err)
	}
	if mode != "native" {
		t.Errorf("veth runs XDP natively; attached %s", mode)
	}
	first.Close() // the loader exits: the pinned link keeps the program attached
	if !strings.Contains(show(), "prog/xdp id") {
		t.Fatalf("no XDP program on %s after the loader closed: %s", ifname, show())
	}

	second, err := Load([]Spec{{NF: "macswap"}, {NF: "detunnel"}}, Options{Objects: dir, Exit: ExitPass, PinDir: filepath.Join(pins, "ingress")})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if mode, err = Attach(second.Entry(), ifname, pin); err != nil || mode != "updated" {
		t.Fatalf("second attach: %s, %v; want the pinned link updated", mode, err)
	}
	info, err := second.Entry().Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	if !strings.Contains(show(), fmt.Sprintf("prog/xdp id %d", id)) {
		t.Errorf("%s does not run the new program %d: %s", ifname, id, show())
	}

	if err := os.RemoveAll(filepath.Join(pins, "ingress")); err != nil {
		t.Fatal(err)
	}
	second.Close()
	// The kernel releases the link when its last reference goes, which may take a moment.
	for i := 0; i < 100 && strings.Contains(show(), "prog/xdp"); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(show(), "prog/xdp") {
		t.Errorf("unpinning left the program attached: %s", show())
	}
}
