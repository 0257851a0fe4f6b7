// SPDX-License-Identifier: Apache-2.0

package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-units"
	"github.com/keel-nfv/keel/internal/dockerlog"
)

// Docker runs containers on one Docker engine through its Go SDK.
type Docker struct {
	cli *client.Client
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
	return &Docker{cli: cli}, nil
}

func labelFilter(match map[string]string) filters.Args {
	keys := make([]string, 0, len(match))
	for k := range match {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	f := filters.NewArgs()
	for _, k := range keys {
		f.Add("label", k+"="+match[k])
	}
	return f
}

// List returns the containers carrying every label in match.
func (d *Docker) List(ctx context.Context, match map[string]string) ([]Container, error) {
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: labelFilter(match)})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	out := make([]Container, 0, len(list))
	for _, c := range list {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, Container{ID: c.ID, Name: name, Labels: c.Labels, Created: time.Unix(c.Created, 0),
			Running: c.State == "running", State: c.State})
	}
	return out, nil
}

// Create creates the container with --network none, no restart policy and never privileged.
func (d *Docker) Create(ctx context.Context, s Spec) (string, error) {
	host := &container.HostConfig{
		NetworkMode:   "none",
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		CapAdd:        s.CapAdd,
		Resources: container.Resources{
			CpusetCpus:         s.Cpuset,
			Memory:             s.MemoryBytes,
			NanoCPUs:           int64(s.CPUs * 1e9),
			CPURealtimeRuntime: s.RTRuntimeUs,
		},
	}
	if s.MemlockUnlimited {
		host.Ulimits = []*units.Ulimit{{Name: "memlock", Soft: -1, Hard: -1}}
	}
	for _, m := range s.Mounts {
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	cfg := &container.Config{Image: s.Image, Cmd: s.Args, Labels: s.Labels}
	resp, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, s.Name)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return "", fmt.Errorf("create %s: %s: %w (build it with faas-cli build or make images)", s.Name, s.Image, ErrImageMissing)
		}
		return "", fmt.Errorf("create %s: %w", s.Name, err)
	}
	return resp.ID, nil
}

// CreateInstance creates and starts the instance's containers one by one, position 0 first;
// first runs between position 0 and the others.
func (d *Docker) CreateInstance(ctx context.Context, specs []Spec, first func(Container) error) ([]string, error) {
	ids := make([]string, 0, len(specs))
	for k, s := range specs {
		id, err := d.Create(ctx, s)
		if errors.Is(err, ErrImageMissing) {
			return ids, fmt.Errorf("NF %d (%s): %w", k, s.Image, err)
		}
		if err != nil {
			return ids, err
		}
		ids = append(ids, id)
		if err := d.Start(ctx, id); err != nil {
			return ids, fmt.Errorf("NF %d: %w", k, err)
		}
		c, err := d.Inspect(ctx, id)
		if err != nil {
			return ids, err
		}
		if !c.Running || c.Pid <= 0 {
			return ids, fmt.Errorf("NF %d stopped at once: %s", k, Why(c))
		}
		if k == 0 && first != nil {
			if err := first(c); err != nil {
				return ids, err
			}
		}
	}
	return ids, nil
}

// Start starts a created container.
func (d *Docker) Start(ctx context.Context, id string) error {
	if err := d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		return fmt.Errorf("start %.12s: %w", id, err)
	}
	return nil
}

// Inspect returns the container's host pid or exit status.
func (d *Docker) Inspect(ctx context.Context, id string) (Container, error) {
	j, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return Container{}, fmt.Errorf("inspect %.12s: %w", id, err)
	}
	c := Container{ID: j.ID, Name: strings.TrimPrefix(j.Name, "/")}
	if j.Config != nil {
		c.Labels = j.Config.Labels
	}
	if t, err := time.Parse(time.RFC3339Nano, j.Created); err == nil {
		c.Created = t
	}
	if st := j.State; st != nil {
		c.Running, c.State, c.Pid = st.Running, st.Status, st.Pid
		c.ExitCode, c.OOMKilled, c.Error = st.ExitCode, st.OOMKilled, st.Error
	}
	if !c.Running {
		c.LastLine = d.lastLine(ctx, id)
	}
	return c, nil
}

// lastLine returns the last non-empty line a container wrote ("" if none or unreadable).
func (d *Docker) lastLine(ctx context.Context, id string) string {
	r, err := d.cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "3"})
	if err != nil {
		return ""
	}
	defer r.Close()
	var out, errb bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errb, io.LimitReader(r, 1<<16)); err != nil {
		return ""
	}
	last := ""
	for _, l := range strings.Split(out.String()+"\n"+errb.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			last = l
		}
	}
	return last
}

// Remove kills and deletes the container.
func (d *Docker) Remove(ctx context.Context, id string) error {
	err := d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
	if err != nil && !errdefs.IsNotFound(err) && !strings.Contains(err.Error(), "is already in progress") {
		return fmt.Errorf("remove container %.12s: %w", id, err)
	}
	return nil
}

// Events streams container events (die, oom, destroy, ...) of the matching containers.
func (d *Docker) Events(ctx context.Context, match map[string]string) (<-chan Event, <-chan error) {
	f := labelFilter(match)
	f.Add("type", string(events.ContainerEventType))
	msgs, errs := d.cli.Events(ctx, events.ListOptions{Filters: f})
	out := make(chan Event)
	errOut := make(chan error, 1)
	go func() {
		defer close(out)
		for {
			select {
			case m := <-msgs:
				select {
				case out <- Event{ID: m.Actor.ID, Action: string(m.Action), Labels: m.Actor.Attributes}:
				case <-ctx.Done():
					return
				}
			case err := <-errs:
				errOut <- err
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, errOut
}

// Why describes why a container is not running, for the operator.
func Why(c Container) string {
	s := why(c)
	if c.LastLine != "" {
		s += ": " + c.LastLine
	}
	return s
}

func why(c Container) string {
	switch {
	case c.OOMKilled:
		return fmt.Sprintf("OOM killed (exit code %d): raise the chain's memory limit", c.ExitCode)
	case c.Error != "":
		return c.State + ": " + c.Error
	case c.State == "created":
		return "created but never started"
	default:
		return fmt.Sprintf("%s with exit code %d", c.State, c.ExitCode)
	}
}

// Logs streams the lines of the containers that carry every label in match (faas-cli logs of
// a chain, through the agent of each worker that runs it).
func (d *Docker) Logs(ctx context.Context, match map[string]string, o dockerlog.Options) (<-chan dockerlog.Line, error) {
	list, err := d.List(ctx, match)
	if err != nil {
		return nil, err
	}
	targets := make([]dockerlog.Target, 0, len(list))
	for _, c := range list {
		targets = append(targets, dockerlog.Target{ID: c.ID, Name: c.Name})
	}
	return dockerlog.Read(ctx, d.cli, targets, o), nil
}
