// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// podProc is what the agent knows of an instance's position 0 through the node's /proc
// (--runtime kubernetes, hostPID): its host pid and the cores its cgroup allows.
type podProc struct {
	pid   int
	cores []int32 // nil until asked (podCore)
}

// podPid is the host pid of position 0 of instance id, remembered until forgetPod (a read
// through it failed, or the instance went): the lookup asks the API server and /proc.
func (a *Agent) podPid(ctx context.Context, id string) (*podProc, error) {
	a.mu.Lock()
	p, ok := a.pods[id]
	a.mu.Unlock()
	if ok {
		return p, nil
	}
	cs, err := a.Runtime.List(ctx, map[string]string{LabelInstance: id, LabelPosition: "0"})
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if !c.Running {
			continue
		}
		c, err := a.Runtime.Inspect(ctx, c.ID)
		if err != nil {
			return nil, err
		}
		if c.Pid <= 0 {
			continue
		}
		p = &podProc{pid: c.Pid}
		a.mu.Lock()
		if a.pods == nil {
			a.pods = map[string]*podProc{}
		}
		a.pods[id] = p
		a.mu.Unlock()
		return p, nil
	}
	return nil, fmt.Errorf("instance %s: position 0 does not run", id)
}

// podRoot is /proc/PID/root (under --proc) of position 0 of instance id: the Pod's
// files as its containers see them.
func (a *Agent) podRoot(ctx context.Context, id string) (string, error) {
	p, err := a.podPid(ctx, id)
	if err != nil {
		return "", err
	}
	return filepath.Join(a.cfg.ProcRoot, strconv.Itoa(p.pid), "root"), nil
}

func (a *Agent) forgetPod(id string) {
	a.mu.Lock()
	delete(a.pods, id)
	a.mu.Unlock()
}

// podCore is the core instance id attaches on when the controller asks for core: that core
// when position 0 may run there, else the lowest core coopsched manages that the kubelet
// gave the Pod (its Cpus_allowed_list): with the static CPU manager the kubelet, not the
// controller, picks an exclusive Pod's cores, and coopsched can only pin a thread inside
// its cgroup's cpuset. Unchanged when the Pod's cores cannot be read (coopsched's attach
// then says why it failed).
func (a *Agent) podCore(ctx context.Context, id string, core int32) int32 {
	p, err := a.podPid(ctx, id)
	if err != nil {
		return core
	}
	a.mu.Lock()
	cores := p.cores
	a.mu.Unlock()
	if cores == nil {
		if cores, err = allowedCores(filepath.Join(a.cfg.ProcRoot, strconv.Itoa(p.pid), "status")); err != nil {
			a.forgetPod(id)
			return core
		}
		a.mu.Lock()
		p.cores = cores
		a.mu.Unlock()
	}
	for _, c := range cores {
		if c == core {
			return core
		}
	}
	for _, c := range cores {
		for _, m := range a.cfg.Cores {
			if c == m {
				return c
			}
		}
	}
	return core
}

// allowedCores reads Cpus_allowed_list (e.g. "1" or "0-1,4") from a /proc/PID/status file.
func allowedCores(status string) ([]int32, error) {
	f, err := os.Open(status)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		list, ok := strings.CutPrefix(sc.Text(), "Cpus_allowed_list:")
		if !ok {
			continue
		}
		cores := []int32{}
		for _, r := range strings.Split(strings.TrimSpace(list), ",") {
			lo, hi, _ := strings.Cut(r, "-")
			if hi == "" {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || l > h {
				return nil, fmt.Errorf("%s: Cpus_allowed_list %q", status, list)
			}
			for c := l; c <= h; c++ {
				cores = append(cores, int32(c))
			}
		}
		return cores, nil
	}
	return nil, fmt.Errorf("%s: no Cpus_allowed_list", status)
}
