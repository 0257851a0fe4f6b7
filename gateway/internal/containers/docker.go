// SPDX-License-Identifier: Apache-2.0

// Package containers runs normal HTTP functions as Docker containers, one per replica,
// and resolves a function name to one of its replicas for the proxy.
package containers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/keel-nfv/keel/internal/dockerlog"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/openfaas/faas-provider/types"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Container labels that mark a replica as the gateway's.
const (
	LabelFunction = "com.keel.function"
	LabelReplica  = "com.keel.replica"
	LabelSpec     = "com.keel.spec"    // the deployment's image + env, to tell an update from a restart
	LabelOneShot  = "com.keel.oneshot" // a container RunOnce starts and removes
	watchdogPort  = 8080
)

// ErrImageMissing is returned when the image is not in the local Docker image store.
var ErrImageMissing = errors.New("image not found in the local Docker image store")

// Engine is the part of the Docker engine API the gateway uses: Docker's client implements
// it, and unit tests put a fake behind it.
type Engine interface {
	ImageInspect(ctx context.Context, image string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ContainerList(ctx context.Context, o container.ListOptions) ([]container.Summary, error)
	ContainerCreate(ctx context.Context, cfg *container.Config, host *container.HostConfig, net *network.NetworkingConfig,
		platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, id string, o container.StartOptions) error
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerRemove(ctx context.Context, id string, o container.RemoveOptions) error
	ContainerWait(ctx context.Context, id string, cond container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerLogs(ctx context.Context, id string, o container.LogsOptions) (io.ReadCloser, error)
}

// Docker manages function replicas on one Docker engine.
type Docker struct {
	// Cpuset confines every replica to these CPUs (Docker's --cpuset-cpus syntax, "" = any):
	// the CPUs that coopsched does not manage, so a normal function never takes a chain's core.
	Cpuset string
	// SecretPath is the host file of a secret, mounted read-only at
	// /var/openfaas/secrets/NAME in the replicas of functions that name it; nil: none.
	SecretPath func(name string) (string, error)
	// Probe tells whether the replica at a base URL is ready for calls (nil: its answer to
	// GET ReadyPath, see ready).
	Probe func(ctx context.Context, base url.URL) bool

	cli  Engine
	mu   sync.Mutex
	urls map[string][]url.URL // running replicas by function
	next atomic.Uint64
}

// NewDocker connects to the engine at host (e.g. unix:///var/run/docker.sock).
func NewDocker(ctx context.Context, host string) (*Docker, error) {
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker %s: %w", host, err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		return nil, fmt.Errorf("docker %s: %w", host, err)
	}
	return &Docker{cli: cli, urls: map[string][]url.URL{}}, nil
}

// CheckImage reports ErrImageMissing if image is not present locally.
func (d *Docker) CheckImage(ctx context.Context, image string) error {
	if _, err := d.cli.ImageInspect(ctx, image); err != nil {
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("%s: %w (no registry is reachable: build it with faas-cli build)", image, ErrImageMissing)
		}
		return fmt.Errorf("inspect image %s: %w", image, err)
	}
	return nil
}

// Apply makes the function run exactly `replicas` containers of the deployment: replicas of
// an older deployment are replaced, matching ones (e.g. from before a gateway restart) kept.
func (d *Docker) Apply(ctx context.Context, fd *types.FunctionDeployment, replicas int) error {
	spec := specOf(fd, d.Cpuset)
	list, err := d.replicas(ctx, fd.Service)
	if err != nil {
		return err
	}
	have := map[int]container.Summary{}
	for _, c := range list {
		i, err := strconv.Atoi(c.Labels[LabelReplica])
		if err != nil || i >= replicas || c.Labels[LabelSpec] != spec {
			if err := d.remove(ctx, c.ID); err != nil {
				return err
			}
			continue
		}
		have[i] = c
	}
	for i := 0; i < replicas; i++ {
		if c, ok := have[i]; ok {
			if c.State != "running" {
				if err := d.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
					return fmt.Errorf("start %s replica %d: %w", fd.Service, i, err)
				}
			}
			continue
		}
		if err := d.create(ctx, fd, spec, i); err != nil {
			return err
		}
	}
	return d.Refresh(ctx, fd.Service)
}

// Remove deletes every replica of a function.
func (d *Docker) Remove(ctx context.Context, name string) error {
	list, err := d.replicas(ctx, name)
	if err != nil {
		return err
	}
	for _, c := range list {
		if err := d.remove(ctx, c.ID); err != nil {
			return err
		}
	}
	d.mu.Lock()
	delete(d.urls, name)
	d.mu.Unlock()
	return nil
}

// Running returns how many replicas of the function are running.
func (d *Docker) Running(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.urls[name])
}

// Refresh re-reads the addresses of a function's ready replicas: running, and answering
// the watchdog's health check (see ready).
func (d *Docker) Refresh(ctx context.Context, name string) error {
	list, err := d.replicas(ctx, name)
	if err != nil {
		return err
	}
	d.setReady(ctx, map[string][]container.Summary{name: list})
	return nil
}

// RefreshAll re-reads the ready replicas of every function with containers (one list of the
// engine's containers, then one health check per running replica).
func (d *Docker) RefreshAll(ctx context.Context) error {
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelFunction))})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	byFn := map[string][]container.Summary{}
	d.mu.Lock()
	for name := range d.urls {
		byFn[name] = nil // a function whose containers are gone has no replica
	}
	d.mu.Unlock()
	for _, c := range list {
		byFn[c.Labels[LabelFunction]] = append(byFn[c.Labels[LabelFunction]], c)
	}
	d.setReady(ctx, byFn)
	return nil
}

// Follow refreshes every function's ready replicas each period until ctx ends, so that
// faas-cli describe's available replicas and the invoke path follow replicas that start,
// become ready or die. Idle it costs one container list and a health check per replica a period.
func (d *Docker) Follow(ctx context.Context, period time.Duration, logf func(string, ...any)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := d.RefreshAll(ctx); err != nil && ctx.Err() == nil {
			logf("docker: %v", err)
		}
	}
}

func (d *Docker) setReady(ctx context.Context, byFn map[string][]container.Summary) {
	ready := map[string][]url.URL{}
	for name, list := range byFn {
		ready[name] = nil
		for _, c := range list {
			if c.State != "running" {
				continue
			}
			ip := ""
			if c.NetworkSettings != nil {
				for _, n := range c.NetworkSettings.Networks {
					if ip == "" && n != nil {
						ip = n.IPAddress
					}
				}
			}
			if ip == "" {
				continue
			}
			u := url.URL{Scheme: "http", Host: net.JoinHostPort(ip, strconv.Itoa(watchdogPort))}
			probe := d.Probe
			if probe == nil {
				probe = d.ready
			}
			if probe(ctx, u) {
				ready[name] = append(ready[name], u)
			}
		}
	}
	d.mu.Lock()
	for name, urls := range ready {
		if len(urls) == 0 && len(byFn[name]) == 0 {
			delete(d.urls, name)
		} else {
			d.urls[name] = urls
		}
	}
	d.mu.Unlock()
}

// ReadyPath is the health check a replica must pass to receive calls: the OpenFaaS
// watchdog's (classic and of-watchdog alike), which faas-netes' probes use too.
const ReadyPath = "/_/health"

// ready tells whether the replica at u answers its health check: any answer but a server
// error (the watchdogs answer 503 until their function is up; a function server of its own
// without the path answers 404 and is taken as ready, as it listens).
func (d *Docker) ready(ctx context.Context, u url.URL) bool {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String()+ReadyPath, nil)
	if err != nil {
		return false
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return resp.StatusCode < 500
}

var probeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// Await returns once the function has a ready replica, checking every 100 ms, or ctx's
// error when it ends first.
func (d *Docker) Await(ctx context.Context, name string) error {
	for {
		if err := d.Refresh(ctx, name); err != nil {
			return err
		}
		if d.Running(name) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Resolve returns the base URL of one running replica, round robin (faas-provider's BaseURLResolver).
func (d *Docker) Resolve(name string) (url.URL, error) {
	d.mu.Lock()
	urls := d.urls[name]
	d.mu.Unlock()
	if len(urls) == 0 {
		return url.URL{}, fmt.Errorf("function %s has no running replica", name)
	}
	return urls[d.next.Add(1)%uint64(len(urls))], nil
}

// Orphans returns the names of functions that have containers but are not in known.
func (d *Docker) Orphans(ctx context.Context, known map[string]bool) ([]string, error) {
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelFunction))})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range list {
		n := c.Labels[LabelFunction]
		if !known[n] && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (d *Docker) replicas(ctx context.Context, name string) ([]container.Summary, error) {
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelFunction+"="+name))})
	if err != nil {
		return nil, fmt.Errorf("list containers of %s: %w", name, err)
	}
	return list, nil
}

func (d *Docker) create(ctx context.Context, fd *types.FunctionDeployment, spec string, i int) error {
	env := make([]string, 0, len(fd.EnvVars)+1)
	keys := make([]string, 0, len(fd.EnvVars))
	for k := range fd.EnvVars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+fd.EnvVars[k])
	}
	if fd.EnvProcess != "" {
		env = append(env, "fprocess="+fd.EnvProcess)
	}
	labels := map[string]string{LabelFunction: fd.Service, LabelReplica: strconv.Itoa(i), LabelSpec: spec}
	cfg := &container.Config{Image: fd.Image, Env: env, Labels: labels}
	res, err := ResourcesOf(fd)
	if err != nil {
		return err
	}
	res.CpusetCpus = d.Cpuset
	host := &container.HostConfig{ReadonlyRootfs: fd.ReadOnlyRootFilesystem,
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
		Resources:     res}
	for _, secret := range fd.Secrets {
		if d.SecretPath == nil {
			return fmt.Errorf("secret %s: this gateway keeps no secrets", secret)
		}
		src, err := d.SecretPath(secret)
		if err != nil {
			return err
		}
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: src,
			Target: "/var/openfaas/secrets/" + secret, ReadOnly: true})
	}
	name := fmt.Sprintf("keel-fn-%s-%d", fd.Service, i)
	resp, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, name)
	if err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	if err := d.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		_ = d.remove(ctx, resp.ID)
		return fmt.Errorf("start %s: %w", name, err)
	}
	return nil
}

// MinMemory is the smallest memory limit Docker sets (it refuses less, "Minimum memory limit
// allowed is 6MB"): a lower limit is raised to it.
const MinMemory = 6 << 20

// ResourcesOf maps a function's limits and requests (faas-cli's limits: and requests:, in
// Kubernetes' quantities: 128Mi, 500m) to Docker's: limits.memory to the memory limit (and
// the same memory+swap, so the function cannot swap past it), limits.cpu to a CPU quota
// (NanoCPUs), requests.memory to a soft reservation and requests.cpu to CPU shares (1024 a
// core), as kubelet maps requests. A quantity that does not parse is an error naming it.
func ResourcesOf(fd *types.FunctionDeployment) (container.Resources, error) {
	var res container.Resources
	parse := func(field, v string) (int64, float64, error) {
		if v == "" {
			return 0, 0, nil
		}
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() <= 0 {
			return 0, 0, fmt.Errorf("%s %q: expected a positive quantity such as 128Mi or 500m", field, v)
		}
		return q.Value(), q.AsApproximateFloat64(), nil
	}
	if l := fd.Limits; l != nil {
		mem, _, err := parse("limits.memory", l.Memory)
		if err != nil {
			return res, err
		}
		if mem > 0 {
			res.Memory, res.MemorySwap = max(mem, MinMemory), max(mem, MinMemory)
		}
		_, cpu, err := parse("limits.cpu", l.CPU)
		if err != nil {
			return res, err
		}
		res.NanoCPUs = int64(cpu * 1e9)
	}
	if r := fd.Requests; r != nil {
		mem, _, err := parse("requests.memory", r.Memory)
		if err != nil {
			return res, err
		}
		res.MemoryReservation = mem
		_, cpu, err := parse("requests.cpu", r.CPU)
		if err != nil {
			return res, err
		}
		if cpu > 0 {
			res.CPUShares = max(2, int64(cpu*1024))
		}
	}
	if res.Memory > 0 && res.MemoryReservation > res.Memory {
		return res, fmt.Errorf("requests.memory %q is above limits.memory %q", fd.Requests.Memory, fd.Limits.Memory)
	}
	return res, nil
}

// RunOnce runs image with args (after its entrypoint) without a network, waits for it to exit
// and removes it, like `docker run --rm --network none IMAGE ARGS...`; it returns what the
// container wrote and its exit status.
func (d *Docker) RunOnce(ctx context.Context, image string, args []string) (stdout, stderr []byte, code int, err error) {
	if err := d.CheckImage(ctx, image); err != nil {
		return nil, nil, 0, err
	}
	cfg := &container.Config{Image: image, Cmd: args, Labels: map[string]string{LabelOneShot: "true"}}
	host := &container.HostConfig{NetworkMode: "none"}
	resp, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, "")
	if err != nil {
		return nil, nil, 0, fmt.Errorf("run %s: %w", image, err)
	}
	defer func() { _ = d.remove(context.WithoutCancel(ctx), resp.ID) }()
	waitc, errc := d.cli.ContainerWait(ctx, resp.ID, container.WaitConditionNextExit)
	if err := d.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return nil, nil, 0, fmt.Errorf("run %s: %w", image, err)
	}
	select {
	case w := <-waitc:
		code = int(w.StatusCode)
	case err := <-errc:
		return nil, nil, 0, fmt.Errorf("run %s: %w", image, err)
	}
	logs, err := d.cli.ContainerLogs(ctx, resp.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("run %s: logs: %w", image, err)
	}
	defer logs.Close()
	var out, errb bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errb, logs); err != nil {
		return nil, nil, 0, fmt.Errorf("run %s: logs: %w", image, err)
	}
	return out.Bytes(), errb.Bytes(), code, nil
}

func (d *Docker) remove(ctx context.Context, id string) error {
	err := d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %.12s: %w", id, err)
	}
	return nil
}

// specOf identifies what a replica runs, so an update replaces replicas and a restart keeps them.
func specOf(fd *types.FunctionDeployment, cpuset string) string {
	keys := make([]string, 0, len(fd.EnvVars))
	for k := range fd.EnvVars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := fd.Image + "|" + fd.EnvProcess + "|cpuset=" + cpuset
	for _, r := range []*types.FunctionResources{fd.Limits, fd.Requests} {
		if r != nil {
			s += "|res=" + r.Memory + "," + r.CPU
		}
	}
	for _, k := range keys {
		s += "|" + k + "=" + fd.EnvVars[k]
	}
	secrets := append([]string(nil), fd.Secrets...)
	sort.Strings(secrets)
	for _, name := range secrets {
		s += "|secret=" + name
	}
	return strconv.FormatUint(fnv64(s), 16)
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Logs streams the lines of a function's replicas (faas-cli logs).
func (d *Docker) Logs(ctx context.Context, name string, o dockerlog.Options) (<-chan dockerlog.Line, error) {
	list, err := d.replicas(ctx, name)
	if err != nil {
		return nil, err
	}
	targets := make([]dockerlog.Target, 0, len(list))
	for _, c := range list {
		n := c.ID[:12]
		if len(c.Names) > 0 {
			n = strings.TrimPrefix(c.Names[0], "/")
		}
		targets = append(targets, dockerlog.Target{ID: c.ID, Name: n})
	}
	return dockerlog.Read(ctx, d.cli, targets, o), nil
}

// CPUSeconds is the CPU time the function's running replicas have used so far, in seconds,
// read from each replica's cgroup on this host (cgroup v1 cpuacct.usage, v2 cpu.stat): the
// load of com.openfaas.scale.type=cpu. The gateway must run on dockerd's host.
func (d *Docker) CPUSeconds(ctx context.Context, name string) (float64, error) {
	list, err := d.replicas(ctx, name)
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, c := range list {
		if c.State != "running" {
			continue
		}
		ins, err := d.cli.ContainerInspect(ctx, c.ID)
		if err != nil || ins.State == nil || ins.State.Pid <= 0 {
			continue // gone meanwhile
		}
		s, err := cgroupCPUSeconds(ins.State.Pid)
		if err != nil {
			return 0, fmt.Errorf("cpu of %s: %w", name, err)
		}
		total += s
	}
	return total, nil
}

// cgroupCPUSeconds reads the CPU time of the cgroup process pid is in: cgroup v1's
// cpuacct.usage when the cpuacct controller is mounted (also on hybrid hosts), else v2's
// cpu.stat.
func cgroupCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0, err
	}
	unified := ""
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), "cpuacct") {
			v, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", parts[1], parts[2], "cpuacct.usage"))
			if err != nil {
				return 0, err
			}
			ns, err := strconv.ParseFloat(strings.TrimSpace(string(v)), 64)
			return ns / 1e9, err
		}
	}
	if unified == "" {
		return 0, fmt.Errorf("no cpu cgroup in /proc/%d/cgroup", pid)
	}
	base := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(base, "cgroup.controllers")); err != nil {
		base = "/sys/fs/cgroup/unified" // a hybrid host's v2 tree
	}
	stat, err := os.ReadFile(filepath.Join(base, unified, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			us, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return us / 1e6, err
		}
	}
	return 0, fmt.Errorf("no usage_usec in %s", filepath.Join(base, unified, "cpu.stat"))
}
