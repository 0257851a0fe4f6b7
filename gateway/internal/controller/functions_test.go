// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	"github.com/keel-nfv/keel/internal/dockerlog"
	"github.com/openfaas/faas-provider/types"
)

// replicaRuntime runs every replica Apply asks for, ready at once.
type replicaRuntime struct {
	mu  sync.Mutex
	n   map[string]int
	cpu float64
}

func (r *replicaRuntime) CheckImage(context.Context, string) error { return nil }
func (r *replicaRuntime) Apply(_ context.Context, fd *types.FunctionDeployment, n int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[fd.Service] = n
	return nil
}
func (r *replicaRuntime) Remove(context.Context, string) error { return nil }
func (r *replicaRuntime) Running(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[name]
}
func (r *replicaRuntime) Resolve(string) (url.URL, error)                            { return url.URL{}, errors.New("none") }
func (r *replicaRuntime) Await(context.Context, string) error                        { return nil }
func (r *replicaRuntime) Orphans(context.Context, map[string]bool) ([]string, error) { return nil, nil }
func (r *replicaRuntime) Logs(context.Context, string, dockerlog.Options) (<-chan dockerlog.Line, error) {
	return nil, errors.New("none")
}
func (r *replicaRuntime) CPUSeconds(context.Context, string) (float64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cpu, nil
}

// scalerRig is a function scaler on a real store, a runtime that runs what it is told, a
// clock the test moves and call counters the test sets.
type scalerRig struct {
	p     *provider.Provider
	rt    *replicaRuntime
	fs    *FunctionScaler
	now   time.Time
	calls map[string]metrics.Calls
	seen  []policy.Decision
}

func newScalerRig(t *testing.T) *scalerRig {
	rig := &scalerRig{rt: &replicaRuntime{n: map[string]int{}}, now: time.Unix(1_000_000, 0), calls: map[string]metrics.Calls{}}
	rig.p = &provider.Provider{Store: testredis.Store(t), Metrics: metrics.New(), Hub: events.NewHub(), Runtime: rig.rt}
	rig.fs = &FunctionScaler{Provider: rig.p, Calls: func() map[string]metrics.Calls { return rig.calls },
		Now: func() time.Time { return rig.now }, OnDecision: func(d policy.Decision) { rig.seen = append(rig.seen, d) }}
	rig.p.OnReplicas = rig.fs.Heard
	return rig
}

func (r *scalerRig) deploy(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	if err := r.p.Deploy(context.Background(), &types.FunctionDeployment{Service: name, Image: "img", Labels: &labels}, false); err != nil {
		t.Fatal(err)
	}
}

// run advances the clock a second at a time for d, each second adding rps completed calls
// to name, and steps the scaler; it returns the replicas after.
func (r *scalerRig) run(t *testing.T, name string, d time.Duration, rps float64) uint64 {
	t.Helper()
	for end := r.now.Add(d); r.now.Before(end); {
		r.now = r.now.Add(time.Second)
		c := r.calls[name]
		c.Started += rps
		c.Completed += rps
		r.calls[name] = c
		if err := r.fs.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	f, err := r.p.NormalFunction(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if r.rt.Running(name) != int(f.Replicas) {
		t.Fatalf("store says %d replicas, the runtime runs %d", f.Replicas, r.rt.Running(name))
	}
	return f.Replicas
}

func Test_FunctionScaler_scales_on_rps_to_max_and_back_to_min_after_the_down_window(t *testing.T) {
	rig := newScalerRig(t)
	rig.deploy(t, "fn", map[string]string{"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "2"})
	if n := rig.run(t, "fn", 5*time.Second, 0); n != 1 {
		t.Fatalf("idle: %d replicas, want the min 1", n)
	}
	// 10 calls/s against 5 x 0.9 per replica: the max, once the 10 s window's average is
	// over 4.5 (6 s of load after 5 idle).
	if n := rig.run(t, "fn", 3*time.Second, 10); n != 1 {
		t.Fatalf("3 s of 10 rps after 5 idle (3.75 rps over the window): %d replicas, want 1", n)
	}
	if n := rig.run(t, "fn", 3*time.Second, 10); n != 2 {
		t.Fatalf("under 10 rps: %d replicas, want the max 2", n)
	}
	up := rig.seen[len(rig.seen)-1]
	if up.Kind != policy.KindFunction || up.Reason != "scale_up" || up.Chain != "fn" || !strings.Contains(up.Text, "rps") {
		t.Fatalf("decision %+v", up)
	}
	rig.run(t, "fn", 14*time.Second, 10)
	// Load stops: the rate falls over the 10 s window, then the 30 s down window holds 2.
	if n := rig.run(t, "fn", 25*time.Second, 0); n != 2 {
		t.Fatalf("25 s after the load: %d replicas, want 2 still (down window)", n)
	}
	if n := rig.run(t, "fn", 20*time.Second, 0); n != 1 {
		t.Fatalf("45 s after the load: %d replicas, want the min 1", n)
	}
	if d := rig.seen[len(rig.seen)-1]; d.Reason != "scale_down" {
		t.Fatalf("decision %+v", d)
	}
}

func Test_FunctionScaler_keeps_fixed_functions_and_a_scale_by_hand_for_the_down_window(t *testing.T) {
	rig := newScalerRig(t)
	rig.deploy(t, "fixed", map[string]string{"com.openfaas.scale.min": "2", "com.openfaas.scale.max": "2"})
	if n := rig.run(t, "fixed", 30*time.Second, 50); n != 2 {
		t.Fatalf("min = max = 2 under load: %d replicas", n)
	}
	rig.deploy(t, "byhand", nil)
	if err := rig.p.Scale(context.Background(), "byhand", 3); err != nil {
		t.Fatal(err)
	}
	if n := rig.run(t, "byhand", 25*time.Second, 0); n != 3 {
		t.Fatalf("a faas-cli scale to 3 must hold for the down window, got %d", n)
	}
	if n := rig.run(t, "byhand", 10*time.Second, 0); n != 1 {
		t.Fatalf("after the down window an idle function goes to its min, got %d", n)
	}
}

func Test_FunctionScaler_leaves_zero_to_calls_and_scales_idle_functions_to_zero(t *testing.T) {
	rig := newScalerRig(t)
	rig.deploy(t, "sleepy", map[string]string{"com.openfaas.scale.zero": "true", "com.openfaas.scale.zero-duration": "1m"})
	if n := rig.run(t, "sleepy", 50*time.Second, 1); n != 1 {
		t.Fatalf("busy: %d", n)
	}
	if n := rig.run(t, "sleepy", 50*time.Second, 0); n != 1 {
		t.Fatalf("idle 50 s of a 1 m zero-duration: %d replicas, want 1", n)
	}
	if n := rig.run(t, "sleepy", 15*time.Second, 0); n != 0 {
		t.Fatalf("idle over 1 m: %d replicas, want 0", n)
	}
	if d := rig.seen[len(rig.seen)-1]; d.Reason != "scale_to_zero" {
		t.Fatalf("decision %+v", d)
	}
	// At zero the load does not scale it (a call wakes it); the call does.
	rig.deploy(t, "manual", nil)
	if err := rig.p.Scale(context.Background(), "manual", 0); err != nil {
		t.Fatal(err)
	}
	if n := rig.run(t, "manual", 40*time.Second, 0); n != 0 {
		t.Fatalf("a function scaled to zero by hand was scaled to %d by the controller", n)
	}
	if err := rig.p.Wake(context.Background(), "manual"); err != nil {
		t.Fatal(err)
	}
	if n := rig.run(t, "manual", time.Second, 0); n != 1 {
		t.Fatalf("after a call from zero: %d replicas, want the min 1", n)
	}
}

func Test_FunctionScaler_scales_on_capacity_and_cpu(t *testing.T) {
	rig := newScalerRig(t)
	rig.deploy(t, "cap", map[string]string{"com.openfaas.scale.type": "capacity", "com.openfaas.scale.target": "2", "com.openfaas.scale.max": "10"})
	rig.calls["cap"] = metrics.Calls{Started: 8} // 8 calls in flight, none done
	if err := rig.fs.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f, _ := rig.p.NormalFunction(context.Background(), "cap"); f.Replicas != 5 {
		t.Fatalf("8 in flight over a target of 2 x 0.9: %d replicas, want ceil(8/1.8) = 5", f.Replicas)
	}
	rig.deploy(t, "cpu", map[string]string{"com.openfaas.scale.type": "cpu", "com.openfaas.scale.target": "400", "com.openfaas.scale.max": "10"})
	for i := 0; i < 5; i++ { // 1.5 cores busy: 1500 millicores over 400 x 0.9 per replica
		rig.now = rig.now.Add(time.Second)
		rig.rt.mu.Lock()
		rig.rt.cpu += 1.5
		rig.rt.mu.Unlock()
		if err := rig.fs.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if f, _ := rig.p.NormalFunction(context.Background(), "cpu"); f.Replicas != 5 {
		t.Fatalf("1500 millicores: %d replicas, want ceil(1500/360) = 5", f.Replicas)
	}
}

func Test_FunctionScaler_Alert_steps_up_and_resolves_to_min(t *testing.T) {
	rig := newScalerRig(t)
	rig.deploy(t, "alerted", map[string]string{"com.openfaas.scale.max": "10", "com.openfaas.scale.factor": "30"})
	from, to, err := rig.fs.Alert(context.Background(), "alerted", "firing")
	if err != nil || from != 1 || to != 4 {
		t.Fatalf("firing: %d -> %d, %v; want 1 -> 4 (30%% of 10)", from, to, err)
	}
	if _, to, _ = rig.fs.Alert(context.Background(), "alerted", "resolved"); to != 1 {
		t.Fatalf("resolved: -> %d, want 1", to)
	}
	if _, _, err := rig.fs.Alert(context.Background(), "ghost", "firing"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("unknown function: %v", err)
	}
}
