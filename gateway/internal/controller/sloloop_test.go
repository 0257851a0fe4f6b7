// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/policy"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

// sloView is one chain (p99 SLO 100 µs, the model's threshold 0.8 of a core, 1 Mpps a core)
// with one attached instance at 0.2 of a core measuring p99 µs, and one idle instance.
func sloView(p99 float64, now time.Time) *policy.View {
	return &policy.View{Now: now,
		Chains:  map[string]policy.Chain{"c": {Name: "c", SLOus: 100, MaxPps: 1e6, Threshold: 0.8}},
		Workers: []policy.Worker{{Name: "w", Cores: []int32{1, 2}}},
		Instances: []policy.Instance{
			{ID: "c/0", Chain: "c", Worker: "w", Attached: true, Core: 1, Ready: true, Flows: 4, FlowsAtStats: 4, RatePps: 2e5, SojournP99us: p99},
			{ID: "c/1", Chain: "c", Worker: "w", Core: -1, Ready: true},
		}}
}

func Test_SLOLoop_splits_the_SLO_into_network_and_server_budgets(t *testing.T) {
	l := NewSLOLoop(10)
	if b := l.ServerBudget(100); b != 90 {
		t.Fatalf("server budget of 100 µs with a 10 µs network: %v", b)
	}
	if b := l.ServerBudget(8); b != 0.8 {
		t.Fatalf("a network over the SLO leaves the server its minimum share: %v", b)
	}
	if b := l.ServerBudget(0); b != 0 {
		t.Fatalf("no SLO, no budget: %v", b)
	}
}

// noConfirm is keel's loop acting on the first window over the budget (Confirm is tested on
// its own below).
func noConfirm(networkBudgetUs float64) *SLOLoop {
	l := NewSLOLoop(networkBudgetUs)
	l.Confirm = 0
	return l
}

func Test_SLOLoop_over_budget_marks_the_instance_overloaded_and_the_next_flow_attaches(t *testing.T) {
	l, cfg := noConfirm(10), policy.Keel()
	v := sloView(150, time.Unix(1000, 0)) // the model: 0.2 of a core is far under 0.8
	changes := l.Apply(v, v.Now)
	if len(changes) != 1 || changes[0].Reason != policy.ReasonMeasuredP99 || changes[0].To >= changes[0].From ||
		v.Chains["c"].ServerBudgetUs != 90 || v.Chains["c"].Threshold >= 0.8 {
		t.Fatalf("changes %+v, chain %+v", changes, v.Chains["c"])
	}
	if !strings.Contains(changes[0].Text(), "measured server p99 150.0 µs") {
		t.Fatalf("decision text %q does not name the measured p99", changes[0].Text())
	}
	marks := cfg.Overload(v)
	if len(marks) != 1 || !marks[0].Overloaded || marks[0].Reason != policy.ReasonMeasuredP99 ||
		!strings.Contains(marks[0].Why, "measured server p99 150.0 µs > server budget 90.0 µs") {
		t.Fatalf("overload marks %+v", marks)
	}
	v.Instances[0].Overloaded = true
	if a := cfg.Assign(v, "c"); a.Instance != "c/1" || !a.Attach {
		t.Fatalf("next flow: %+v, want c/1 attached", a)
	}
}

func Test_SLOLoop_under_budget_changes_nothing(t *testing.T) {
	l, cfg := NewSLOLoop(10), policy.Keel()
	v := sloView(60, time.Unix(1000, 0)) // under 90, not well under (45)
	if changes := l.Apply(v, v.Now); len(changes) != 0 || v.Chains["c"].Threshold != 0.8 {
		t.Fatalf("changes %+v, threshold %v", changes, v.Chains["c"].Threshold)
	}
	if marks := cfg.Overload(v); len(marks) != 0 {
		t.Fatalf("overload marks %+v", marks)
	}
	if a := cfg.Assign(v, "c"); a.Instance != "c/0" || a.Attach {
		t.Fatalf("next flow: %+v, want the attached c/0", a)
	}
}

func Test_SLOLoop_well_under_budget_raises_the_threshold_slowly_back_to_the_model_and_never_past_it(t *testing.T) {
	l := noConfirm(10)
	t0 := time.Unix(1000, 0)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 5 * time.Second) } // a window every 5 s, Hold 10 s
	for i := 0; i < 6; i++ {                                                          // over budget: three cuts
		v := sloView(150, at(i))
		l.Apply(v, v.Now)
	}
	var thr []float64
	for i := 6; i < 40; i++ { // well under (20 µs < 45 µs)
		v := sloView(20, at(i))
		l.Apply(v, v.Now)
		thr = append(thr, v.Chains["c"].Threshold)
	}
	low := 0.8 * 0.8 * 0.8 * 0.8
	if thr[0] < low-1e-9 || thr[0] > low+0.05*0.8+1e-9 {
		t.Fatalf("thresholds %v: want three cuts of x0.8 from 0.8, then the first step up", thr)
	}
	lastStep := 0
	for i := 1; i < len(thr); i++ {
		if thr[i] < thr[i-1] || thr[i]-thr[i-1] > 0.05*0.8+1e-9 {
			t.Fatalf("thresholds %v: want slow steps up", thr)
		}
		if thr[i] != thr[i-1] {
			if i-lastStep < 2 {
				t.Fatalf("thresholds %v: two steps within 10 s (windows %d and %d)", thr, lastStep, i)
			}
			lastStep = i
		}
	}
	if last := thr[len(thr)-1]; math.Abs(last-0.8) > 1e-9 {
		t.Fatalf("thresholds %v: want back at the model's 0.8 and no higher", thr)
	}
}

func Test_SLOLoop_latency_oscillating_around_the_budget_does_not_flap(t *testing.T) {
	l, cfg := noConfirm(10), policy.Keel() // even acting on single windows
	t0 := time.Unix(1000, 0)
	overloaded, reason := false, policy.Reason("")
	transitions, raised := 0, 0
	last := 0.8
	for i := 0; i < 40; i++ { // ±10 % around the 90 µs budget, a window every 5 s
		p99 := 99.0
		if i%2 == 1 {
			p99 = 81
		}
		v := sloView(p99, t0.Add(time.Duration(i)*5*time.Second))
		v.Instances[0].Overloaded, v.Instances[0].OverloadReason = overloaded, reason
		for _, c := range l.Apply(v, v.Now) {
			if c.To > c.From {
				raised++
			}
		}
		for _, m := range cfg.Overload(v) {
			if m.Instance == "c/0" && m.Overloaded != overloaded {
				overloaded, reason = m.Overloaded, m.Reason // as the controller records it
				transitions++
			}
		}
		if thr := v.Chains["c"].Threshold; thr > last {
			t.Fatalf("window %d: threshold rose from %v to %v while p99 was near its budget", i, last, thr)
		} else {
			last = thr
		}
	}
	if transitions != 1 || !overloaded || raised != 0 {
		t.Fatalf("%d overload transitions (want 1: marked once, never cleared at 90 %% of the budget), %d raises", transitions, raised)
	}
	if last < 0.8*l.MinFactor-1e-9 {
		t.Fatalf("threshold %v below the floor", last)
	}
}

func Test_SLOLoop_without_measurements_keeps_the_model(t *testing.T) {
	l, cfg := NewSLOLoop(10), policy.Keel()
	v := sloView(0, time.Unix(1000, 0))
	if changes := l.Apply(v, v.Now); len(changes) != 0 || v.Chains["c"].Threshold != 0.8 || v.Chains["c"].ServerBudgetUs != 90 {
		t.Fatalf("changes %+v, chain %+v", changes, v.Chains["c"])
	}
	// The model alone decides: the load over its threshold marks the instance.
	v.Instances[0].RatePps = 9e5
	if marks := cfg.Overload(v); len(marks) != 1 || marks[0].Reason != policy.ReasonLoad {
		t.Fatalf("overload marks %+v", marks)
	}
}

// The gateway's path: an agent's report of an instance whose measured p99 is over the server
// budget, though far under the model's threshold, makes the next new flow attach a second
// instance, and the decision log says it was the measured p99.
func Test_a_measured_p99_over_budget_attaches_a_second_instance(t *testing.T) {
	srv, _, _ := flowRack(t, false)
	srv.SLO = noConfirm(10)
	ctx := context.Background()
	first := assign(t, srv, 0)
	if first.Instance.GetId() != "chain3/0" {
		t.Fatalf("first flow went to %v", first.Instance.GetId())
	}
	if err := srv.ApplyStats(ctx, &pb.InstanceStats{Worker: "local", Instance: "chain3/0", Phase: "ready", Attached: true, Core: 1,
		RatePps: 1000, P99Us: 400, SojournP50Us: 300, SojournP999Us: 450, SojournWindowS: 5, SojournPackets: 5000}); err != nil {
		t.Fatal(err)
	}
	second := assign(t, srv, 1)
	if second.Instance.GetId() != "chain3/1" {
		t.Fatalf("second flow went to %v, want chain3/1 attached; decisions %+v", second.Instance.GetId(), srv.Decisions())
	}
	var overload, attach bool
	for _, d := range srv.Decisions() {
		if d.Kind == policy.KindOverload && d.Instance == "chain3/0" && d.Reason == policy.ReasonMeasuredP99 &&
			strings.Contains(d.Text, "measured server p99 400.0 µs > server budget 90.0 µs") {
			overload = true
		}
		if d.Kind == policy.KindAttach && d.Instance == "chain3/1" {
			attach = true
		}
	}
	if !overload || !attach {
		t.Fatalf("decisions %+v: want chain3/0 overloaded by its measured p99, then chain3/1 attached", srv.Decisions())
	}
}

func Test_SLOLoop_without_a_ready_idle_instance_a_measurement_neither_marks_nor_clears(t *testing.T) {
	l, cfg := noConfirm(10), policy.Keel()
	v := sloView(150, time.Unix(1000, 0))
	v.Instances[1].Ready = false // the pool's instance is still starting: a new flow would wait for it
	if changes := l.Apply(v, v.Now); len(changes) != 0 || v.Chains["c"].Threshold != 0.8 {
		t.Fatalf("changes %+v, threshold %v", changes, v.Chains["c"].Threshold)
	}
	if marks := cfg.Overload(v); len(marks) != 0 {
		t.Fatalf("overload marks %+v", marks)
	}
	v = sloView(150, time.Unix(1005, 0))
	v.Instances[1].Ready = false
	v.Instances[0].Overloaded, v.Instances[0].OverloadReason = true, policy.ReasonMeasuredP99 // marked while the pool had a ready instance
	l.Apply(v, v.Now)
	if marks := cfg.Overload(v); len(marks) != 0 {
		t.Fatalf("overload marks %+v: an over-budget instance is not cleared for want of a spare", marks)
	}
}

// A ready idle instance with no core it could be attached to (the worker's one core taken,
// and packing refuses another sgroup there) is no spare: marking the measured instance would
// leave the chain's next flow nowhere to go, and the ingress would drop it.
func Test_SLOLoop_an_idle_instance_without_a_core_for_it_is_no_spare(t *testing.T) {
	l, cfg := noConfirm(10), policy.Keel()
	l.Attachable = cfg.CanAttach
	v := sloView(150, time.Unix(1000, 0))
	v.Workers[0].Cores = []int32{1}
	v.Instances[0].RatePps = 7e5 // its core is well used (0.7 of it): nothing more packs there
	if !cfg.CanAttach(sloView(150, v.Now), &v.Instances[1]) {
		t.Fatal("with a free core the idle instance could be attached")
	}
	if cfg.CanAttach(v, &v.Instances[1]) {
		t.Fatal("on the one core, nearly full, the idle instance cannot be attached")
	}
	if changes := l.Apply(v, v.Now); len(changes) != 0 || v.Chains["c"].Threshold != 0.8 {
		t.Fatalf("changes %+v, threshold %v", changes, v.Chains["c"].Threshold)
	}
	if marks := cfg.Overload(v); len(marks) != 0 {
		t.Fatalf("overload marks %+v", marks)
	}
}

// One window over the budget is a tail of a few hundred packets: it neither marks nor cuts.
// Over for Confirm (two windows in a row) it does; a window back within the budget starts over.
func Test_SLOLoop_acts_on_a_p99_over_budget_only_once_confirmed(t *testing.T) {
	l, cfg := NewSLOLoop(10), policy.Keel()
	t0 := time.Unix(1000, 0)
	step := func(i int, p99 float64) (changes []ThresholdChange, marks []policy.Change) {
		v := sloView(p99, t0.Add(time.Duration(i)*5*time.Second))
		changes = l.Apply(v, v.Now)
		return changes, cfg.Overload(v)
	}
	for i, p99 := range []float64{150, 60, 150, 60} { // over, within, over, within
		if c, m := step(i, p99); len(c) != 0 || len(m) != 0 {
			t.Fatalf("window %d (p99 %v): changes %+v, marks %+v from single windows over the budget", i, p99, c, m)
		}
	}
	if c, m := step(4, 150); len(c) != 0 || len(m) != 0 {
		t.Fatalf("first of two windows over: changes %+v, marks %+v", c, m)
	}
	c, m := step(5, 150)
	if len(c) != 1 || c[0].Reason != policy.ReasonMeasuredP99 || len(m) != 1 || !m[0].Overloaded {
		t.Fatalf("second window over in a row: changes %+v, marks %+v; want a cut and a mark", c, m)
	}
}
