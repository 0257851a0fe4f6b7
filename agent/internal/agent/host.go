// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DockerCgroupParent is the cgroup v1 directory under which Docker's cgroupfs driver puts
// containers (/sys/fs/cgroup/cpu/docker/<id>).
const DockerCgroupParent = "docker"

// defaultRTRuntimeUs is what the Docker parent gets when the kernel does not throttle
// SCHED_FIFO at all (kernel.sched_rt_runtime_us = -1, keel-coopsched --no-rt-throttle).
const defaultRTRuntimeUs = 950000

// EnsureRT prepares cgroup v1 RT group scheduling so that coopsched can make the threads
// of NF containers SCHED_FIFO. The kernel refuses SCHED_FIFO (EPERM) to a thread whose
// cgroup has cpu.rt_runtime_us = 0, which is what Docker gives a container unless it asks
// for --cpu-rt-runtime; and the container's value must fit under its parent's, which is 0
// unless dockerd was started with --cpu-rt-runtime. So the parent (cpuRoot/docker) is raised
// to the root group's runtime (950000 µs when the root is unthrottled), and each NF
// container asks for perContainer µs (HostConfig.CPURealtimeRuntime). The sum over the
// containers must stay below the parent's: 950000/perContainer NF containers at most.
// With keel-coopsched --no-rt-throttle the kernel enforces no RT budget at all, so the
// value only opens the door; with throttling on, it is each NF's SCHED_FIFO time per second.
// It returns false when the kernel has no RT group scheduling (nothing to set).
func EnsureRT(cpuRoot string, perContainer int64) (bool, error) {
	rootVal, err := readInt64(filepath.Join(cpuRoot, "cpu.rt_runtime_us"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if perContainer <= 0 {
		return true, fmt.Errorf("RT group scheduling is on (%s): NF containers need --rt-runtime-us > 0 or coopsched cannot make them SCHED_FIFO", cpuRoot)
	}
	target := rootVal
	if target < 0 {
		target = defaultRTRuntimeUs
	}
	if perContainer > target {
		return true, fmt.Errorf("--rt-runtime-us %d exceeds the root group's %d", perContainer, target)
	}
	dir := filepath.Join(cpuRoot, DockerCgroupParent)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return true, err
	}
	p := filepath.Join(dir, "cpu.rt_runtime_us")
	cur, err := readInt64(p)
	if err != nil {
		return true, err
	}
	if cur == -1 || cur >= target {
		return true, nil
	}
	if err := os.WriteFile(p, []byte(strconv.FormatInt(target, 10)), 0o644); err != nil {
		return true, fmt.Errorf("%s = %d: %w", p, target, err)
	}
	return true, nil
}

func readInt64(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// EnsurePktbufDir makes dir a tmpfs with transparent 2 MB pages (huge=always), mode 0700,
// unless something is mounted there already. It reports whether it mounted it.
func EnsurePktbufDir(dir string) (bool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 2 && fields[1] == abs {
			return false, nil
		}
	}
	if err := syscall.Mount("keel-pktbuf", abs, "tmpfs", 0, "huge=always,mode=0700"); err != nil {
		return false, fmt.Errorf("mount tmpfs (huge=always) on %s: %w", abs, err)
	}
	return true, nil
}
