// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/openfaas/faas-provider/types"
)

// fakeEngine is an in-memory Docker engine: images by name, containers by id, each running
// container at 172.17.0.<n>.
type fakeEngine struct {
	images     map[string]bool
	containers map[string]*fakeContainer
	seq        int
	creates    int
}

type fakeContainer struct {
	sum  container.Summary
	cfg  *container.Config
	host *container.HostConfig
	ip   string
}

func newFakeEngine(images ...string) *fakeEngine {
	e := &fakeEngine{images: map[string]bool{}, containers: map[string]*fakeContainer{}}
	for _, i := range images {
		e.images[i] = true
	}
	return e
}

func (e *fakeEngine) ImageInspect(_ context.Context, name string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	if !e.images[name] {
		return image.InspectResponse{}, errdefs.NotFound(fmt.Errorf("No such image: %s", name))
	}
	return image.InspectResponse{ID: "sha256:" + name}, nil
}

// ContainerList applies the label filters the gateway uses: "KEY" (has the label) and
// "KEY=VALUE".
func (e *fakeEngine) ContainerList(_ context.Context, o container.ListOptions) ([]container.Summary, error) {
	var out []container.Summary
	for _, c := range e.containers {
		ok := true
		for _, f := range o.Filters.Get("label") {
			k, v, exact := strings.Cut(f, "=")
			got, has := c.sum.Labels[k]
			ok = ok && has && (!exact || got == v)
		}
		if ok && (o.All || c.sum.State == "running") {
			out = append(out, c.sum)
		}
	}
	slices.SortFunc(out, func(a, b container.Summary) int { return strings.Compare(a.Names[0], b.Names[0]) })
	return out, nil
}

func (e *fakeEngine) ContainerCreate(_ context.Context, cfg *container.Config, host *container.HostConfig, _ *network.NetworkingConfig,
	_ *ocispec.Platform, name string) (container.CreateResponse, error) {
	if !e.images[cfg.Image] {
		return container.CreateResponse{}, errdefs.NotFound(fmt.Errorf("No such image: %s", cfg.Image))
	}
	e.seq++
	e.creates++
	id := fmt.Sprintf("%064d", e.seq)
	ip := fmt.Sprintf("172.17.0.%d", e.seq+1)
	e.containers[id] = &fakeContainer{cfg: cfg, host: host, ip: ip,
		sum: container.Summary{ID: id, Names: []string{"/" + name}, Image: cfg.Image, Labels: cfg.Labels, State: "created",
			NetworkSettings: &container.NetworkSettingsSummary{Networks: map[string]*network.EndpointSettings{"bridge": {IPAddress: ip}}}}}
	return container.CreateResponse{ID: id}, nil
}

func (e *fakeEngine) ContainerStart(_ context.Context, id string, _ container.StartOptions) error {
	c := e.containers[id]
	if c == nil {
		return errdefs.NotFound(errors.New("no such container"))
	}
	c.sum.State = "running"
	return nil
}

func (e *fakeEngine) ContainerInspect(_ context.Context, id string) (container.InspectResponse, error) {
	c := e.containers[id]
	if c == nil {
		return container.InspectResponse{}, errdefs.NotFound(errors.New("no such container"))
	}
	return container.InspectResponse{NetworkSettings: &container.NetworkSettings{
		Networks: map[string]*network.EndpointSettings{"bridge": {IPAddress: c.ip}}}}, nil
}

func (e *fakeEngine) ContainerRemove(_ context.Context, id string, _ container.RemoveOptions) error {
	if e.containers[id] == nil {
		return errdefs.NotFound(errors.New("no such container"))
	}
	delete(e.containers, id)
	return nil
}

func (e *fakeEngine) ContainerWait(context.Context, string, container.WaitCondition) (<-chan container.WaitResponse, <-chan error) {
	errc := make(chan error, 1)
	errc <- errors.New("the fake engine runs nothing to completion")
	return nil, errc
}

func (e *fakeEngine) ContainerLogs(context.Context, string, container.LogsOptions) (io.ReadCloser, error) {
	return nil, errors.New("the fake engine keeps no logs")
}

func (e *fakeEngine) of(fn string) []*fakeContainer {
	var out []*fakeContainer
	for _, c := range e.containers {
		if c.sum.Labels[LabelFunction] == fn {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *fakeContainer) int { return strings.Compare(a.sum.Names[0], b.sum.Names[0]) })
	return out
}

func newTestDocker(e *fakeEngine) *Docker {
	return &Docker{cli: e, urls: map[string][]url.URL{}, Cpuset: "0", Probe: func(context.Context, url.URL) bool { return true },
		SecretPath: func(name string) (string, error) { return "/run/keel/secrets/functions/" + name, nil }}
}

func Test_Apply_runs_the_replicas_confined_labelled_with_secrets_read_only_and_resolves_them_in_turn(t *testing.T) {
	e := newFakeEngine("keel/hello:latest")
	d := newTestDocker(e)
	ctx := context.Background()
	fd := &types.FunctionDeployment{Service: "hello", Image: "keel/hello:latest", EnvProcess: "./hello",
		EnvVars: map[string]string{"B": "2", "A": "1"}, Secrets: []string{"api-key"}}
	if err := d.Apply(ctx, fd, 2); err != nil {
		t.Fatal(err)
	}
	got := e.of("hello")
	if len(got) != 2 || d.Running("hello") != 2 {
		t.Fatalf("%d containers, %d running; want 2", len(got), d.Running("hello"))
	}
	for i, c := range got {
		if c.sum.Names[0] != fmt.Sprintf("/keel-fn-hello-%d", i) || c.sum.Labels[LabelReplica] != fmt.Sprint(i) || c.sum.State != "running" {
			t.Errorf("replica %d: %v %v %s", i, c.sum.Names, c.sum.Labels, c.sum.State)
		}
		if c.host.Resources.CpusetCpus != "0" {
			t.Errorf("replica %d may run on cpus %q, want 0 (not a chain's core)", i, c.host.Resources.CpusetCpus)
		}
		if !slices.Equal(c.cfg.Env, []string{"A=1", "B=2", "fprocess=./hello"}) {
			t.Errorf("replica %d env %v", i, c.cfg.Env)
		}
		m := c.host.Mounts
		if len(m) != 1 || m[0].Target != "/var/openfaas/secrets/api-key" || !m[0].ReadOnly || m[0].Source != "/run/keel/secrets/functions/api-key" {
			t.Errorf("replica %d mounts %+v, want the secret read-only at /var/openfaas/secrets/api-key", i, m)
		}
	}
	seen := map[string]bool{}
	for range 4 {
		u, err := d.Resolve("hello")
		if err != nil {
			t.Fatal(err)
		}
		seen[u.Host] = true
	}
	if len(seen) != 2 || !seen["172.17.0.2:8080"] || !seen["172.17.0.3:8080"] {
		t.Fatalf("resolved %v, want both replicas' watchdogs", seen)
	}
	if _, err := d.Resolve("nobody"); err == nil {
		t.Fatalf("a function without replicas resolved")
	}
}

func Test_Apply_keeps_matching_replicas_replaces_changed_ones_and_removes_extras(t *testing.T) {
	e := newFakeEngine("keel/hello:latest", "keel/hello:v2")
	d := newTestDocker(e)
	ctx := context.Background()
	fd := &types.FunctionDeployment{Service: "hello", Image: "keel/hello:latest"}
	if err := d.Apply(ctx, fd, 3); err != nil {
		t.Fatal(err)
	}
	ids := func() []string {
		var out []string
		for _, c := range e.of("hello") {
			out = append(out, c.sum.ID)
		}
		return out
	}
	first := ids()
	// A gateway restart applies the same deployment: nothing is recreated.
	if err := d.Apply(ctx, fd, 3); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(), first) || e.creates != 3 {
		t.Fatalf("the same deployment recreated replicas: %v -> %v (%d creates)", first, ids(), e.creates)
	}
	// Scaling down removes the highest replicas.
	if err := d.Apply(ctx, fd, 1); err != nil {
		t.Fatal(err)
	}
	if got := ids(); !slices.Equal(got, first[:1]) || d.Running("hello") != 1 {
		t.Fatalf("after scale to 1: %v, want %v", got, first[:1])
	}
	// An update (new image) replaces the replica.
	fd.Image = "keel/hello:v2"
	if err := d.Apply(ctx, fd, 1); err != nil {
		t.Fatal(err)
	}
	got := e.of("hello")
	if len(got) != 1 || got[0].sum.ID == first[0] || got[0].cfg.Image != "keel/hello:v2" {
		t.Fatalf("after the update: %+v, want one new replica of v2", got)
	}
	if err := d.Remove(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	if len(e.of("hello")) != 0 || d.Running("hello") != 0 {
		t.Fatalf("Remove left replicas")
	}
}

func Test_CheckImage_names_a_missing_image_and_says_no_registry_is_reachable(t *testing.T) {
	d := newTestDocker(newFakeEngine("keel/hello:latest"))
	if err := d.CheckImage(context.Background(), "keel/hello:latest"); err != nil {
		t.Fatalf("present image: %v", err)
	}
	err := d.CheckImage(context.Background(), "keel/none:latest")
	if !errors.Is(err, ErrImageMissing) || !strings.HasPrefix(err.Error(), "keel/none:latest: image not found") ||
		!strings.Contains(err.Error(), "build it with faas-cli build") {
		t.Fatalf("missing image: %v", err)
	}
	if _, _, _, err := d.RunOnce(context.Background(), "keel/none:latest", nil); !errors.Is(err, ErrImageMissing) {
		t.Fatalf("RunOnce of a missing image: %v", err)
	}
}

func Test_Orphans_names_each_unknown_function_once(t *testing.T) {
	e := newFakeEngine("img")
	d := newTestDocker(e)
	ctx := context.Background()
	for _, fn := range []struct {
		name string
		n    int
	}{{"kept", 1}, {"old", 2}, {"gone", 1}} {
		if err := d.Apply(ctx, &types.FunctionDeployment{Service: fn.name, Image: "img"}, fn.n); err != nil {
			t.Fatal(err)
		}
	}
	got, err := d.Orphans(ctx, map[string]bool{"kept": true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"gone", "old"}) {
		t.Fatalf("orphans %v, want [gone old]", got)
	}
}
