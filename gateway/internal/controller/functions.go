// SPDX-License-Identifier: Apache-2.0

package controller

// The controller's second half: normal functions, scaled as OpenFaaS scales them
// (com.openfaas.scale.* labels, package fnscale) on the gateway's own request metrics —
// completed calls per second, calls in flight, or their replicas' CPU — over a sliding
// window. Chains scale on flows and measured load (scaler.go); both run in one loop (Run).

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/apierr"
	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/fnscale"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/openfaas/faas-provider/types"
)

// Defaults of the function scaler's windows.
const (
	// DefaultLoadWindow is the window a function's load is averaged over: OpenFaaS CE's
	// alert rule takes rate(gateway_function_invocation_total[10s]).
	DefaultLoadWindow = 10 * time.Second
	// DefaultDownWindow is how long a lower replica count must be asked for before the
	// function is scaled down to it (scale-up is immediate).
	DefaultDownWindow = 30 * time.Second
	// MinRateSpan is the least time a rate (rps, cpu) is taken over before it counts.
	MinRateSpan = 2 * time.Second
)

// Functions is what the function scaler reads and changes normal functions through: the
// provider.
type Functions interface {
	// NormalFunctions returns the deployed normal functions.
	NormalFunctions(ctx context.Context) ([]*chain.Function, error)
	// NormalFunction returns one, or an error wrapping apierr.ErrNotFound.
	NormalFunction(ctx context.Context, name string) (*chain.Function, error)
	// ScaleSpec reads a function's com.openfaas.scale.* labels; an error names the label.
	ScaleSpec(fd *types.FunctionDeployment) (fnscale.Spec, error)
	// CPUSeconds is the CPU time a function's replicas have used so far (0 when the
	// backend cannot tell).
	CPUSeconds(ctx context.Context, name string) (float64, error)
	// Autoscale sets a function's replicas from what the scaler saw (from); it reports false
	// when something else changed them meanwhile.
	Autoscale(ctx context.Context, name string, from, to uint64, why string) (bool, error)
}

// FunctionScaler scales normal functions.
type FunctionScaler struct {
	Provider Functions
	// Calls reads the gateway's per-function call counters (metrics.Metrics.Calls).
	Calls      func() map[string]metrics.Calls
	LoadWindow time.Duration // 0: DefaultLoadWindow
	DownWindow time.Duration // 0: DefaultDownWindow
	Now        func() time.Time
	// OnDecision hears every change the scaler makes (kind KindFunction); the controller
	// logs and keeps it with its chains' decisions.
	OnDecision func(policy.Decision)
	Logf       func(string, ...any)

	mu  sync.Mutex
	fns map[string]*fnState
}

// fnState is what the scaler remembers of one function between passes.
type fnState struct {
	samples    []sample // the load window, oldest first
	stab       fnscale.Stabilizer
	lastActive time.Time // last pass the function's call counters moved
	replicas   uint64    // what the scaler last saw or set
}

type sample struct {
	at       time.Time
	calls    metrics.Calls
	cpu      float64 // CPU seconds of its replicas (type cpu only)
	replicas uint64
}

func (fs *FunctionScaler) now() time.Time {
	if fs.Now != nil {
		return fs.Now()
	}
	return time.Now()
}

func (fs *FunctionScaler) window() time.Duration {
	if fs.LoadWindow > 0 {
		return fs.LoadWindow
	}
	return DefaultLoadWindow
}

func (fs *FunctionScaler) downWindow() time.Duration {
	if fs.DownWindow > 0 {
		return fs.DownWindow
	}
	return DefaultDownWindow
}

// Heard tells the scaler that a function's replicas were set outside it (deploy, faas-cli
// scale, a call from zero, an alert): it keeps that count for a down window before it may
// scale the function down again, and counts idle time from now.
func (fs *FunctionScaler) Heard(name string, replicas uint64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	st := fs.state(name)
	now := fs.now()
	st.stab.Reset()
	st.stab.Next(now, replicas)
	st.replicas, st.lastActive = replicas, now
}

func (fs *FunctionScaler) state(name string) *fnState {
	if fs.fns == nil {
		fs.fns = map[string]*fnState{}
	}
	st := fs.fns[name]
	if st == nil {
		st = &fnState{stab: fnscale.Stabilizer{Window: fs.downWindow()}}
		fs.fns[name] = st
	}
	return st
}

// Load is a function's load over the window, per fnscale type.
type Load struct {
	RPS        float64 // completed calls per second
	InFlight   float64 // calls in flight, averaged over the window's samples
	Millicores float64 // CPU of all replicas
	Span       time.Duration
}

// For returns the load in the unit of type t.
func (l Load) For(t fnscale.Type) float64 {
	switch t {
	case fnscale.Capacity:
		return l.InFlight
	case fnscale.CPU:
		return l.Millicores
	}
	return l.RPS
}

// loadOf computes the load from a window of samples (oldest first). Counters that went
// down (a function removed and deployed again) count from zero.
func loadOf(samples []sample) Load {
	var l Load
	if len(samples) == 0 {
		return l
	}
	for _, s := range samples {
		l.InFlight += s.calls.InFlight()
	}
	l.InFlight /= float64(len(samples))
	first, last := samples[0], samples[len(samples)-1]
	l.Span = last.at.Sub(first.at)
	if l.Span <= 0 {
		return l
	}
	sec := l.Span.Seconds()
	l.RPS = max(0, last.calls.Completed-first.calls.Completed) / sec
	l.Millicores = max(0, last.cpu-first.cpu) / sec * 1000
	return l
}

// Step runs one pass over the normal functions: sample each one's load, decide, scale.
func (fs *FunctionScaler) Step(ctx context.Context) error {
	fns, err := fs.Provider.NormalFunctions(ctx)
	if err != nil {
		return err
	}
	calls := fs.Calls()
	now := fs.now()
	seen := map[string]bool{}
	for _, f := range fns {
		name := f.Deployment.Service
		seen[name] = true
		spec, err := fs.Provider.ScaleSpec(&f.Deployment)
		if err != nil {
			continue // deployed before its labels were checked: left as it is
		}
		cpu := 0.0
		if spec.Type == fnscale.CPU {
			if cpu, err = fs.Provider.CPUSeconds(ctx, name); err != nil {
				fs.logf("function scaler: %v", err)
				continue
			}
		}
		d, why := fs.decide(name, spec, f.Replicas, sample{at: now, calls: calls[name], cpu: cpu, replicas: f.Replicas})
		if d == f.Replicas {
			continue
		}
		done, err := fs.Provider.Autoscale(ctx, name, f.Replicas, d, why)
		if err != nil {
			return fmt.Errorf("scale %s: %w", name, err)
		}
		if !done {
			continue
		}
		reason := policy.ReasonScaleUp
		switch {
		case d == 0:
			reason = policy.ReasonScaleToZero
		case d < f.Replicas:
			reason = policy.ReasonScaleDown
		}
		fs.mu.Lock()
		fs.state(name).replicas = d
		fs.mu.Unlock()
		fs.decided(policy.Decision{Kind: policy.KindFunction, Reason: reason, Chain: name, Core: -1},
			"function %s: %d -> %d replica(s): %s", name, f.Replicas, d, why)
	}
	fs.mu.Lock()
	for name := range fs.fns {
		if !seen[name] {
			delete(fs.fns, name) // removed: its state goes with it
		}
	}
	fs.mu.Unlock()
	return nil
}

// decide records a sample of a function at current replicas and returns the replicas it
// should have, and why.
func (fs *FunctionScaler) decide(name string, spec fnscale.Spec, current uint64, s sample) (uint64, string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	st, fresh := fs.fns[name], false
	if st == nil {
		st, fresh = fs.state(name), true
	}
	if fresh || st.replicas != current {
		// First seen (a gateway start) or changed by someone else: start over from what is there.
		st.stab.Reset()
		st.stab.Next(s.at, current)
		st.samples, st.lastActive, st.replicas = nil, s.at, current
	}
	if n := len(st.samples); n > 0 && (s.calls.Started != st.samples[n-1].calls.Started || s.calls.Completed != st.samples[n-1].calls.Completed) {
		st.lastActive = s.at
	}
	if n := len(st.samples); n > 0 && st.samples[n-1].replicas != s.replicas {
		st.samples = nil // the CPU of replicas that came or went is not comparable
	}
	st.samples = append(st.samples, s)
	cut := 0
	for cut < len(st.samples)-1 && s.at.Sub(st.samples[cut].at) > fs.window() {
		cut++
	}
	st.samples = st.samples[cut:]

	if current == 0 {
		return 0, "" // scaled to zero: a call wakes it (provider.Wake), not the load
	}
	if idle := s.at.Sub(st.lastActive); spec.Zero && idle >= spec.ZeroDuration {
		st.stab.Reset()
		return 0, fmt.Sprintf("no call for %s (%s=%s)", idle.Round(time.Second), fnscale.LabelZeroDuration, spec.ZeroDuration)
	}
	if spec.Fixed() {
		return spec.Min, fmt.Sprintf("%s = %s = %d", fnscale.LabelMin, fnscale.LabelMax, spec.Min)
	}
	load := loadOf(st.samples)
	if spec.Type != fnscale.Capacity && load.Span < MinRateSpan {
		return current, "" // a rate over less is noise (just deployed, restarted or rescaled)
	}
	want := spec.Desired(load.For(spec.Type))
	apply := st.stab.Next(s.at, want)
	return apply, fmt.Sprintf("%s %.2f over %s, target %.4g x %.2f per replica, wants %d (highest of the last %s: %d)",
		spec.Type, load.For(spec.Type), load.Span.Round(time.Second), spec.Target, spec.Proportion, want, fs.downWindow(), apply)
}

// Alert applies an AlertManager notification (OpenFaaS CE's /system/alert) to a normal
// function: "firing" adds com.openfaas.scale.factor % of its max, "resolved" goes back to
// its min. It returns the replicas before and after.
func (fs *FunctionScaler) Alert(ctx context.Context, name, status string) (uint64, uint64, error) {
	f, err := fs.Provider.NormalFunction(ctx, name)
	if err != nil {
		return 0, 0, err
	}
	spec, err := fs.Provider.ScaleSpec(&f.Deployment)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", apierr.ErrInvalid, err)
	}
	from := f.Replicas
	to := spec.Alert(status, from)
	if from == 0 || to == from {
		return from, from, nil // a function at zero wakes on a call, not on an alert
	}
	done, err := fs.Provider.Autoscale(ctx, name, from, to, "AlertManager: "+status)
	if err != nil || !done {
		return from, from, err
	}
	fs.Heard(name, to)
	fs.decided(policy.Decision{Kind: policy.KindFunction, Reason: policy.ReasonAlert, Chain: name, Core: -1},
		"function %s: %d -> %d replica(s): AlertManager alert %s (%s=%d%% of max %d)", name, from, to, status, fnscale.LabelFactor, spec.Factor, spec.Max)
	return from, to, nil
}

func (fs *FunctionScaler) decided(d policy.Decision, format string, args ...any) {
	if fs.OnDecision != nil {
		d.Time = fs.now().UTC()
		d.Text = fmt.Sprintf(format, args...)
		fs.OnDecision(d)
	}
}

func (fs *FunctionScaler) logf(format string, args ...any) {
	if fs.Logf != nil {
		fs.Logf(format, args...)
	}
}
