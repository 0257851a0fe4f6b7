// SPDX-License-Identifier: Apache-2.0

package xdp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Attach makes prog the XDP program of the interface ifname, through a BPF link pinned at
// pin so that it stays attached when the process exits. If pin already holds a link (an
// agent restarted, a redeploy), the link's program is replaced atomically: no packet
// passes without an XDP program meanwhile. A new link is native XDP (veth and real NICs'
// drivers run it); only if the driver refuses is it generic XDP. It returns "native",
// "generic" or "updated".
func Attach(prog *ebpf.Program, ifname, pin string) (string, error) {
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		defer l.Close()
		if err := l.Update(prog); err != nil {
			return "", fmt.Errorf("XDP link %s: %w", pin, err)
		}
		return "updated", nil
	}
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return "", fmt.Errorf("XDP on %s: %w", ifname, err)
	}
	mode := "native"
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: iface.Index, Flags: link.XDPDriverMode})
	if err != nil {
		mode = "generic"
		var gerr error
		if l, gerr = link.AttachXDP(link.XDPOptions{Program: prog, Interface: iface.Index, Flags: link.XDPGenericMode}); gerr != nil {
			return "", fmt.Errorf("XDP on %s: native: %v; generic: %w", ifname, err, gerr)
		}
	}
	defer l.Close()
	if err := os.MkdirAll(filepath.Dir(pin), 0o700); err != nil {
		return "", err
	}
	if err := l.Pin(pin); err != nil {
		return "", fmt.Errorf("XDP link %s: %w", pin, err)
	}
	return mode, nil
}

// InNetns runs fn on an OS thread that has entered the network namespace of process pid.
func InNetns(pid int, fn func() error) error {
	runtime.LockOSThread()
	own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer own.Close()
	target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("network namespace of %d: %w", pid, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter the network namespace of %d: %w", pid, err)
	}
	ferr := fn()
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked and ends with the goroutine: it is never reused.
		return errors.Join(ferr, fmt.Errorf("return to the agent's network namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// EnsureBPFFS mounts a bpffs at dir unless one is there already.
func EnsureBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs at %s: %w", dir, err)
	}
	return nil
}
