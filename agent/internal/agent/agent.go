// SPDX-License-Identifier: Apache-2.0

// Package agent is keel-agent's controller: it follows the gateway's desired chain
// instances for this worker (Watch), reads what runs (container labels, coopsched Status,
// VF ports), and closes the gap with reconcile.Diff's actions, level-triggered: every
// pass starts from the observed state, so a restarted agent re-adopts everything.
package agent

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-nfv/keel/agent/internal/reconcile"
	"github.com/keel-nfv/keel/agent/internal/runtime"
	"github.com/keel-nfv/keel/agent/internal/vf"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Config is the agent's configuration (keel-agent's flags).
type Config struct {
	SpecConfig
	Address         string  // the agent's metrics/health address, told to the gateway
	Cores           []int32 // the cores coopsched manages
	Heartbeat       time.Duration
	StatsInterval   time.Duration
	SojournWindow   time.Duration // the window of the server sojourn figures reported
	Resync          time.Duration // a full pass at least this often
	RegisterTimeout time.Duration // containers up, sgroup not formed after this: failed
	ReadyResetAfter time.Duration // ready this long: the failure backoff starts over
	MaxParallel     int           // instances created or torn down at once
	// ProcRoot is the node's /proc (hostPID): with StatsDir set (--runtime kubernetes) the
	// NFs' statistics files are read inside position 0's root there.
	ProcRoot string
	// PodCores: the kubelet, not the controller, picks the cores of an instance's Pod
	// (--runtime kubernetes with whole cores per instance); the agent attaches the instance
	// on one of them (podCore).
	PodCores bool
	// AttachOnEvent: attachNow attaches a scale-out's pooled instance on the gateway's event
	// (else the pass the event triggers does).
	AttachOnEvent bool
	// PassWaitsForAttach: a pass waits for attachNow's attaches under way before it reads the
	// worker (waitEventAttaches); false only to compare (bench/scale_out.py).
	PassWaitsForAttach bool
}

// Deps are the agent's connections.
type Deps struct {
	Runtime   runtime.Runtime
	VF        vf.Provider
	Coopsched pb.CoopschedClient
	Control   pb.ControlClient
	// Redis deletes removed instances' NF state and, with NFLogins, keeps each instance's
	// Redis user (nfuser.go); nil: neither.
	Redis *redis.Client
	Log   *slog.Logger
}

// failure is the rebuild backoff of one instance.
type failure struct {
	count     int
	notBefore time.Time
	reason    string
	tenant    string // whose NF state the instance left in Redis (deleted if it is removed)
}

// instStatus is what the agent knows of a desired instance for reports and metrics.
type instStatus struct {
	chain    string
	tenant   string
	members  []string // NF names in chain order
	phase    string
	reason   string
	attached bool
	core     int32
	batch    uint32
	restarts uint64
	ready    time.Time // when it last became ready
	stats    sampleState
}

// Agent is one worker's controller.
type Agent struct {
	cfg Config
	Deps

	mu        sync.Mutex
	chains    map[string]*pb.Chain
	instances map[string]*pb.ChainInstance // this worker's, by id
	synced    bool
	connected bool
	busy      map[string]bool
	fails     map[string]*failure
	status    map[string]*instStatus
	pods      map[string]*podProc // with StatsDir or PodCores: each instance's position 0 on the node
	actions   map[string]uint64   // "kind result" -> count, for metrics
	nfUsers   map[string]string   // instances whose Redis user this agent made, with the tenant
	nic       nicParts            // the instances' NIC parts (XDP), nic.go
	// lastActual is the last pass's view of each instance, for attachNow; attachedNow the
	// instances attached since that view was read.
	lastActual  map[string]reconcile.Actual
	attachedNow map[string]attachMark
	// eventAttaches counts attachNow's attaches under way; a pass waits for them (attachDone,
	// on mu) before it reads the worker. Its reads fork ovs-vsctl and ip: a Go thread in
	// vfork keeps its P until the child execs, and on a busy core that held an attach's
	// coopsched call back by 10-17 ms (perf sched trace, 4 CPU-bound loops on core 0).
	eventAttaches int
	attachDone    *sync.Cond
	// attachAsked: when the gateway attached each pooled instance (its Watch event), until
	// coopsched has attached it; attachDelay the time in between, by who attached it.
	attachAsked map[string]time.Time
	attachDelay *prometheus.HistogramVec

	aclUnsaved atomic.Bool // ACL SAVE failed once (warned)

	kick    chan struct{} // a reconcile pass is due
	report  chan struct{} // a phase changed: report now
	slots   chan struct{} // bounds concurrent slow actions
	workers sync.WaitGroup
}

// New returns an agent; Run starts it.
func New(cfg Config, deps Deps) *Agent {
	if cfg.MaxParallel < 1 {
		cfg.MaxParallel = 2
	}
	a := &Agent{cfg: cfg, Deps: deps,
		chains: map[string]*pb.Chain{}, instances: map[string]*pb.ChainInstance{},
		busy: map[string]bool{}, fails: map[string]*failure{}, status: map[string]*instStatus{}, actions: map[string]uint64{},
		nfUsers: map[string]string{}, kick: make(chan struct{}, 1), report: make(chan struct{}, 1),
		slots: make(chan struct{}, cfg.MaxParallel), attachAsked: map[string]time.Time{}, attachedNow: map[string]attachMark{},
		attachDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "keel_agent_attach_delay_seconds",
			Help: "From the gateway attaching a pooled instance (its Watch event) to coopsched running it, by who " +
				"attached it: event (at once, against the last pass's view) or pass (a reconcile pass)",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)}, []string{"via"})}
	a.attachDone = sync.NewCond(&a.mu)
	return a
}

// Kick asks for a reconcile pass soon.
func (a *Agent) Kick() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *Agent) reportNow() {
	select {
	case a.report <- struct{}{}:
	default:
	}
}

// Run follows the gateway, Docker and coopsched events and reconciles until ctx ends,
// then waits for the actions in flight.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.VF.Setup(ctx); err != nil {
		return err
	}
	go a.followGateway(ctx)
	go a.followDocker(ctx)
	go a.followCoopsched(ctx)
	go a.reportStats(ctx)
	t := time.NewTicker(a.cfg.Resync)
	defer t.Stop()
	for {
		a.reconcileOnce(ctx)
		select {
		case <-ctx.Done():
			a.workers.Wait()
			return nil
		case <-a.kick:
		case <-t.C:
		}
	}
}

// reconcileOnce runs one pass: desired and actual state, Diff, actions.
func (a *Agent) reconcileOnce(ctx context.Context) {
	start := time.Now()
	// An instance busy at any moment of the pass is left alone: an action that ends while
	// the state is read would otherwise be judged on a view from before it ended.
	a.mu.Lock()
	a.waitEventAttaches()
	start = time.Now()
	busy := map[string]bool{}
	for id := range a.busy {
		busy[id] = true
	}
	var podCores map[string]int32 // with PodCores: the core each attached instance's Pod runs on
	if a.cfg.PodCores {
		podCores = map[string]int32{}
		for id, in := range a.instances {
			if c := coreOf(in); c >= 0 {
				podCores[id] = c
			}
		}
	}
	a.mu.Unlock()
	obs, err := a.observe(ctx)
	observed := time.Since(start)
	if err != nil {
		a.Log.Warn("reconcile: cannot read the worker's state; nothing changed", "err", err)
		a.countAction("observe", err)
		return
	}
	for id, c := range podCores {
		if position0Runs(obs.actual[id]) {
			podCores[id] = a.podCore(ctx, id, c)
		} else {
			delete(podCores, id)
		}
	}
	a.mu.Lock()
	a.keepView(obs.actual, start)
	desired := map[string]reconcile.Desired{}
	for id, in := range a.instances {
		d, ok := a.desiredOf(in)
		if !ok {
			continue
		}
		if c, ok := podCores[id]; ok && d.Core >= 0 {
			d.Core = c // one of the Pod's own cores
		}
		desired[id] = d
	}
	notBefore := map[string]time.Time{}
	for id, f := range a.fails {
		notBefore[id] = f.notBefore
	}
	for id := range a.busy {
		busy[id] = true
	}
	in := reconcile.Input{Now: start, Synced: a.synced, Desired: desired, Actual: obs.actual, Busy: busy,
		NotBefore: notBefore, RegisterTimeout: a.cfg.RegisterTimeout}
	a.updateStatus(desired, obs, busy, start)
	a.mu.Unlock()
	a.ensureNFUsers(ctx, desired, obs, busy)
	usersDone := time.Since(start)

	var next time.Time
	for _, act := range reconcile.Diff(in) {
		// since_ms: how long the pass took to get here (reading Docker, the VFs and coopsched),
		// which an attach waits out too.
		a.Log.Info("reconcile", "action", act.String(), "since_ms", time.Since(start).Milliseconds(),
			"observe_ms", observed.Milliseconds(), "users_ms", usersDone.Milliseconds())
		if act.Kind.Slow() {
			a.startSlow(ctx, act, obs)
			continue
		}
		if !a.claim(act.ID) {
			continue // attachNow is attaching it
		}
		a.fast(ctx, act, "pass")
		a.mu.Lock()
		delete(a.busy, act.ID)
		a.mu.Unlock()
	}
	a.syncNIC(obs, busy)
	for id, t := range notBefore {
		if _, ok := desired[id]; ok && t.After(start) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if !next.IsZero() {
		time.AfterFunc(time.Until(next), a.Kick)
	}
}

// desiredOf is what the gateway wants of instance in (a.mu held); false while its chain is
// unknown or empty.
func (a *Agent) desiredOf(in *pb.ChainInstance) (reconcile.Desired, bool) {
	ch := chainOf(a.chains, in)
	if ch == nil || len(ch.Members) == 0 {
		return reconcile.Desired{}, false
	}
	specs := a.cfg.Specs(in, ch)
	return reconcile.Desired{ID: in.Id, Tenant: ch.Tenant, Members: len(ch.Members),
		Spec: specs[0].Labels[LabelSpec], Core: coreOf(in), Batch: in.Batch}, true
}

// attachNow attaches an instance the gateway just attached (a scale-out onto a pooled
// instance: a flow is already on its way to it) without waiting for the next pass, which
// first reads Docker, the VFs and coopsched again: 42-60 ms in make demo, all of it added
// to the first packet of the flow that caused the scale-out. It runs Diff on the instance's
// desired state and the last pass's view of it, and acts only if that gives an attach and
// nothing slow; the pass that follows (Kick) checks the result as always. A stale view costs
// at most an Attach that coopsched refuses. The decision is made here, the attach runs in a
// goroutine of its own (a.workers).
func (a *Agent) attachNow(ctx context.Context, id string) {
	start := time.Now()
	a.mu.Lock()
	in := a.instances[id]
	act, seen := a.lastActual[id]
	mark, done := a.attachedNow[id]
	if !a.cfg.AttachOnEvent || a.cfg.PodCores || !a.synced || in == nil || !seen || coreOf(in) < 0 || (done && mark.core == coreOf(in)) ||
		a.busy[id] || a.fails[id] != nil {
		a.mu.Unlock()
		return
	}
	d, ok := a.desiredOf(in)
	if !ok {
		a.mu.Unlock()
		return
	}
	acts := reconcile.Diff(reconcile.Input{Now: start, Synced: true, RegisterTimeout: a.cfg.RegisterTimeout,
		Desired: map[string]reconcile.Desired{id: d}, Actual: map[string]reconcile.Actual{id: act}})
	if !attachOnly(acts) {
		a.mu.Unlock()
		return
	}
	a.busy[id] = true // the pass leaves it alone meanwhile
	a.eventAttaches++
	a.mu.Unlock()
	// In its own goroutine: a scale-out of two chains at once (the first flows after a
	// deploy) attaches both at once, not one after the other's coopsched call.
	a.workers.Add(1)
	go func() {
		defer a.workers.Done()
		for _, x := range acts {
			a.Log.Info("reconcile", "action", x.String(), "on_event", true, "since_ms", time.Since(start).Milliseconds())
			a.fast(ctx, x, "event")
		}
		a.mu.Lock()
		delete(a.busy, id)
		a.eventAttaches--
		a.attachDone.Broadcast()
		a.mu.Unlock()
	}()
}

// waitEventAttaches returns once no attach of attachNow is under way (a.mu held; released
// while it waits). A pass calls it first: an attach on the gateway's event goes before the
// pass, which would only check it, and whose reads (Docker, ovs-vsctl, ip) would compete
// with it for the agent's threads. Bounded by the attach's coopsched timeout.
func (a *Agent) waitEventAttaches() {
	for a.cfg.PassWaitsForAttach && a.eventAttaches > 0 {
		a.attachDone.Wait()
	}
}

// keepView stores a pass's view of the instances, read from start on, for attachNow (a.mu
// held). Attaches made since start stay marked: the view may predate them.
func (a *Agent) keepView(actual map[string]reconcile.Actual, start time.Time) {
	a.lastActual = actual
	for id, m := range a.attachedNow {
		if m.at.Before(start) {
			delete(a.attachedNow, id) // the view has it
		}
	}
}

// attachMark is an attach made after the last pass began reading the worker.
type attachMark struct {
	core int32
	at   time.Time
}

// attachOnly reports whether acts attach an instance and do nothing slow.
func attachOnly(acts []reconcile.Action) bool {
	attach := false
	for _, x := range acts {
		if x.Kind.Slow() || x.Kind == reconcile.Detach {
			return false
		}
		attach = attach || x.Kind == reconcile.Attach
	}
	return attach
}

// claim marks instance id busy for a fast action; false if something else acts on it.
func (a *Agent) claim(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.busy[id] {
		return false
	}
	a.busy[id] = true
	return true
}

// chainOf is the chain an instance runs: the version it carries while it drains after a
// redeploy (its containers keep running as they are, with their flows), else its chain's
// current one.
func chainOf(chains map[string]*pb.Chain, in *pb.ChainInstance) *pb.Chain {
	if in.Runs != nil {
		return in.Runs
	}
	return chains[in.Chain]
}

func position0Runs(act reconcile.Actual) bool {
	for _, c := range act.Containers {
		if c.Position == 0 && c.Running {
			return true
		}
	}
	return false
}

func coreOf(in *pb.ChainInstance) int32 {
	if in.State == "attached" && in.Core >= 0 {
		return in.Core
	}
	return -1
}

// updateStatus refreshes each desired instance's phase from the observed state (a.mu held).
func (a *Agent) updateStatus(desired map[string]reconcile.Desired, obs *observed, busy map[string]bool, now time.Time) {
	changed := false
	for id, d := range desired {
		st := a.status[id]
		in := a.instances[id]
		ch := chainOf(a.chains, in)
		if st == nil {
			st = &instStatus{core: -1}
			a.status[id] = st
		}
		st.chain, st.tenant = in.Chain, ch.Tenant
		st.members = st.members[:0]
		for _, m := range ch.Members {
			st.members = append(st.members, m.Name)
		}
		if busy[id] {
			continue // the action in flight sets the phase
		}
		act := obs.actual[id]
		f := a.fails[id]
		phase, reason := reconcile.Phase(d, act, f != nil), ""
		if phase == "failed" {
			reason = f.reason
		}
		if phase == "ready" && st.phase != "ready" {
			st.ready = now
		}
		if phase == "ready" && f != nil && now.Sub(st.ready) >= a.cfg.ReadyResetAfter {
			delete(a.fails, id)
		}
		attached := act.Group == reconcile.GroupAttached
		core := int32(-1)
		if attached {
			core = act.GroupCore
		}
		if st.phase != phase || st.reason != reason || st.attached != attached || st.core != core || st.batch != act.GroupBatch {
			changed = true
		}
		st.phase, st.reason, st.attached, st.core, st.batch = phase, reason, attached, core, act.GroupBatch
	}
	for id := range a.status {
		if _, ok := desired[id]; !ok {
			delete(a.status, id)
		}
	}
	if changed {
		a.reportNow()
	}
}

func (a *Agent) countAction(kind string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	a.mu.Lock()
	a.actions[kind+" "+result]++
	a.mu.Unlock()
}
