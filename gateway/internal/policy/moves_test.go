// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"
)

// moveCfg is testCfg with the move knobs these tests were worked out for pinned.
func moveCfg() Config {
	c := testCfg()
	c.Moves = MoveConfig{Enabled: true, PerSecond: 100, Burst: 100, ScaleInMaxFlows: 64, FillFrac: 0.8, RelieveAbove: 1.1, RelieveTo: 0.85,
		FlowHold: time.Minute, InstanceHold: 10 * time.Second, Pause: 10 * time.Millisecond,
		TailShare: 0.002, SLOWindow: 10 * time.Second, MaxHeldPkts: 2048, QueueRoom: 4096}
	return c
}

// flowsOf lists n flows of instance id at pps each (keys id#k).
func flowsOf(m map[string][]FlowRate, id string, n int, pps float64) {
	for k := 0; k < n; k++ {
		m[id] = append(m[id], FlowRate{Key: fmt.Sprintf("%s#%02d", id, k), Pps: pps})
	}
}

var bothMovable = map[string]bool{"fw": true, "nat": true}

func keysOf(fs []FlowRate) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Key)
	}
	return out
}

func Test_PlanMoves_scale_in_empties_the_least_loaded_instance(t *testing.T) {
	// fw: threshold 0.8, fill to 0.64. fw/1 at 0.5 (50 flows), fw/3 at 0.3, fw/2 at 0.1 (10
	// flows): fw/2's flows fit on fw/1 (0.6); none fits on... both fw/1 and fw/3 have room,
	// the most loaded one fills first.
	v := view(att("fw/1", "w1", 0, 50, 50e4), att("fw/2", "w1", 1, 10, 10e4), att("fw/3", "w2", 0, 30, 30e4))
	fl := map[string][]FlowRate{}
	flowsOf(fl, "fw/1", 50, 1e4)
	flowsOf(fl, "fw/2", 10, 1e4)
	flowsOf(fl, "fw/3", 30, 1e4)
	plan := moveCfg().PlanMoves(v, fl, bothMovable, &MoveHistory{})
	want := MovePlan{Moves: []FlowMove{{Chain: "fw", From: "fw/2", To: "fw/1", Flows: keysOf(fl["fw/2"]), Reason: ReasonScaleIn, Pps: 1e5}},
		Detach: []string{"fw/2"}}
	if !reflect.DeepEqual(plan, want) {
		t.Fatalf("plan = %+v, want %+v", plan, want)
	}
}

func Test_PlanMoves_scale_in_spills_over_and_never_passes_the_fill(t *testing.T) {
	// fw/2's 10 flows: 4 fit on fw/1 (0.6 → 0.64), the other 6 go to fw/3.
	v := view(att("fw/1", "w1", 0, 60, 60e4), att("fw/2", "w1", 1, 10, 10e4), att("fw/3", "w2", 0, 30, 30e4))
	fl := map[string][]FlowRate{}
	flowsOf(fl, "fw/1", 60, 1e4)
	flowsOf(fl, "fw/2", 10, 1e4)
	flowsOf(fl, "fw/3", 30, 1e4)
	plan := moveCfg().PlanMoves(v, fl, bothMovable, nil)
	if len(plan.Moves) != 2 || plan.Moves[0].To != "fw/1" || len(plan.Moves[0].Flows) != 4 || plan.Moves[1].To != "fw/3" ||
		len(plan.Moves[1].Flows) != 6 || !reflect.DeepEqual(plan.Detach, []string{"fw/2"}) {
		t.Fatalf("plan = %+v", plan)
	}
	// No room for all of them: nothing moves (a half-emptied instance keeps its core).
	v = view(att("fw/1", "w1", 0, 60, 60e4), att("fw/2", "w1", 1, 10, 10e4))
	if plan := moveCfg().PlanMoves(v, fl, bothMovable, nil); len(plan.Moves) != 0 || len(plan.Detach) != 0 {
		t.Fatalf("plan = %+v, want none", plan)
	}
}

func Test_PlanMoves_scale_in_respects_a_shared_core(t *testing.T) {
	// fw/1 shares core 0 of w1 with nat/1 (0.5 + 0.1: the core's lowest threshold 0.8,
	// fill 0.64): only 0.04 more fits there, so fw/2's 0.1 cannot go.
	v := view(att("fw/1", "w1", 0, 10, 10e4), att("nat/1", "w1", 0, 50, 50e4), att("fw/2", "w2", 1, 10, 10e4))
	fl := map[string][]FlowRate{}
	flowsOf(fl, "fw/1", 10, 1e4)
	flowsOf(fl, "fw/2", 10, 1e4)
	flowsOf(fl, "nat/1", 50, 1e4)
	// fw/1 is the least loaded (ties: fewer flows, then the first): emptied onto fw/2 (w2,
	// alone on its core) is fine; fw/2 onto fw/1's shared core is not.
	plan := moveCfg().PlanMoves(v, fl, bothMovable, nil)
	if len(plan.Moves) != 1 || plan.Moves[0].From != "fw/1" || plan.Moves[0].To != "fw/2" {
		t.Fatalf("plan = %+v", plan)
	}
	// fw/2 (alone on its core: emptying it would free the core) is tried first, but its
	// flows do not fit on fw/1's shared core; fw/1's do not fit on fw/2 (0.6 + 0.1 > 0.64).
	v = view(att("fw/1", "w1", 0, 10, 10e4), att("nat/1", "w1", 0, 50, 50e4), att("fw/2", "w2", 1, 60, 60e4))
	fl["fw/2"] = nil
	flowsOf(fl, "fw/2", 60, 1e4)
	if plan := moveCfg().PlanMoves(v, fl, bothMovable, nil); len(plan.Moves) != 0 {
		t.Fatalf("plan = %+v, want none (no room on either side)", plan)
	}
	// fw/2 light and alone: it goes first, onto the shared core's fw/1 (0.6 + 0.03 ≤ 0.64).
	v = view(att("fw/1", "w1", 0, 10, 10e4), att("nat/1", "w1", 0, 50, 50e4), att("fw/2", "w2", 1, 3, 3e4))
	fl["fw/2"] = nil
	flowsOf(fl, "fw/2", 3, 1e4)
	if plan := moveCfg().PlanMoves(v, fl, bothMovable, nil); len(plan.Moves) != 1 || plan.Moves[0].From != "fw/2" {
		t.Fatalf("plan = %+v, want fw/2 emptied first (alone on its core)", plan)
	}
}

func Test_PlanMoves_relieve_moves_the_heaviest_flows(t *testing.T) {
	// fw/1 at 0.9 ≥ 0.8: it sheds its heaviest flows until ≤ 0.85 × 0.8 = 0.68; fw/2 (0.2)
	// takes them up to 0.64.
	v := view(att("fw/1", "w1", 0, 12, 90e4), att("fw/2", "w2", 0, 20, 20e4))
	fl := map[string][]FlowRate{"fw/1": {
		{"a", 15e4}, {"b", 12e4}, {"c", 5e4}, {"d", 8e4}, {"e", 10e4}, {"f", 10e4},
		{"g", 5e4}, {"h", 5e4}, {"i", 5e4}, {"j", 5e4}, {"k", 5e4}, {"l", 5e4}}}
	flowsOf(fl, "fw/2", 20, 1e4)
	plan := moveCfg().PlanMoves(v, fl, bothMovable, nil)
	// 0.9 − 0.15 (a) − 0.12 (b) = 0.63 ≤ 0.68.
	want := []FlowMove{{Chain: "fw", From: "fw/1", To: "fw/2", Flows: []string{"a", "b"}, Reason: ReasonRelieve, Pps: 27e4}}
	if !reflect.DeepEqual(plan.Moves, want) || len(plan.Detach) != 0 {
		t.Fatalf("plan = %+v, want %+v", plan, want)
	}
	// fw/2 at 0.5: a (0.15) would take it to 0.65 > 0.64; b (0.12) fits; then the 0.1
	// flows no longer do (0.62 + 0.1), the 0.05 ones do, until fw/1 is under 0.68.
	v = view(att("fw/1", "w1", 0, 12, 90e4), att("fw/2", "w2", 0, 50, 50e4))
	plan = moveCfg().PlanMoves(v, fl, bothMovable, nil)
	for _, m := range plan.Moves {
		if m.To != "fw/2" {
			t.Fatalf("move to %s", m.To)
		}
		if got := 0.5 + m.Pps/1e6; got > 0.64+1e-9 {
			t.Fatalf("fw/2 would reach %.2f > 0.64: %+v", got, plan)
		}
	}
	if len(plan.Moves) != 1 || !reflect.DeepEqual(plan.Moves[0].Flows, []string{"b"}) {
		t.Fatalf("plan = %+v, want only b (the rest overshoots the fill or is not needed)", plan)
	}
}

func Test_PlanMoves_an_unmovable_chain_never_moves(t *testing.T) {
	v := view(att("fw/1", "w1", 0, 12, 90e4), att("fw/2", "w2", 0, 20, 20e4), att("nat/1", "w1", 1, 5, 5e4),
		att("nat/2", "w2", 1, 5, 5e4))
	fl := map[string][]FlowRate{}
	flowsOf(fl, "fw/1", 12, 75e3)
	flowsOf(fl, "fw/2", 20, 1e4)
	flowsOf(fl, "nat/1", 5, 1e4)
	flowsOf(fl, "nat/2", 5, 1e4)
	for _, movable := range []map[string]bool{nil, {}, {"fw": false, "nat": false}} {
		if plan := moveCfg().PlanMoves(v, fl, movable, nil); len(plan.Moves) != 0 || len(plan.Detach) != 0 {
			t.Fatalf("movable %v: plan = %+v, want none", movable, plan)
		}
	}
	// Only nat movable: nat scales in, fw (overloaded) does not move.
	plan := moveCfg().PlanMoves(v, fl, map[string]bool{"nat": true}, nil)
	for _, m := range plan.Moves {
		if m.Chain != "nat" {
			t.Fatalf("chain %s moved: %+v", m.Chain, plan)
		}
	}
	if len(plan.Moves) != 1 {
		t.Fatalf("plan = %+v, want nat's scale-in", plan)
	}
}

func Test_PlanMoves_budget(t *testing.T) {
	cfg := moveCfg()
	cfg.Moves.PerSecond, cfg.Moves.Burst = 5, 5
	v := view(att("fw/1", "w1", 0, 50, 50e4), att("fw/2", "w1", 1, 10, 10e4))
	fl := map[string][]FlowRate{}
	flowsOf(fl, "fw/1", 50, 1e4)
	flowsOf(fl, "fw/2", 10, 1e4)
	// Emptying fw/2 takes 10 moves: over the budget of 5, this plan moves 5 and fw/2 stays
	// emptying (Test_PlanMoves_empties_an_instance_over_several_plans follows it on).
	if plan := cfg.PlanMoves(v, fl, bothMovable, nil); len(plan.Moves) != 1 || len(plan.Moves[0].Flows) != 5 ||
		len(plan.Detach) != 0 || !reflect.DeepEqual(plan.Emptying, []Emptying{{"fw", "fw/2"}}) {
		t.Fatalf("plan = %+v, want 5 flows moved and fw/2 left emptying", plan)
	}
	cfg.Moves.Burst = 10
	h := &MoveHistory{}
	plan := cfg.PlanMoves(v, fl, bothMovable, h)
	if len(plan.Moves) != 1 || len(plan.Moves[0].Flows) != 10 {
		t.Fatalf("plan = %+v, want the 10 flows", plan)
	}
	h.Record(cfg.Moves, plan.Moves, v.Now)
	// Relief is cut to the budget: nat/3 at 1.5 cores sheds 5 of its 0.1 flows, not the 8
	// its excess asks (0.735 over 0.85 × 0.9), 1 s later (5 tokens; fw is in its hold).
	v = view(att("nat/3", "w1", 0, 15, 150e4), att("nat/4", "w2", 0, 1, 1e4), att("nat/5", "w2", 1, 1, 1e4))
	v.Now = t0.Add(time.Second)
	fl = map[string][]FlowRate{}
	flowsOf(fl, "nat/3", 15, 1e5)
	flowsOf(fl, "nat/4", 1, 1e4)
	flowsOf(fl, "nat/5", 1, 1e4)
	plan = cfg.PlanMoves(v, fl, bothMovable, h)
	n := 0
	for _, m := range plan.Moves {
		n += len(m.Flows)
	}
	if n != 5 {
		t.Fatalf("plan = %+v, want 5 flows (the budget)", plan)
	}
	h.Record(cfg.Moves, plan.Moves, v.Now)
	if h.Tokens != 0 {
		t.Fatalf("tokens = %v after spending the budget", h.Tokens)
	}
}

func Test_PlanMoves_held_packets_stay_in_the_tail(t *testing.T) {
	// An SLO'd chain at 0.6 Mpps: over 10 s it sends 6 M packets, 0.2 % of them is 12 K;
	// a 1 s pause holds 10 K packets of each 1e4 pps flow: one move fits, not two.
	cfg := moveCfg()
	cfg.Moves.Pause = time.Second
	v := view(att("fw/1", "w1", 0, 50, 50e4), att("fw/2", "w1", 1, 10, 10e4))
	ch := v.Chains["fw"]
	ch.SLOus = 100
	v.Chains["fw"] = ch
	fl := map[string][]FlowRate{}
	flowsOf(fl, "fw/1", 50, 1e4)
	flowsOf(fl, "fw/2", 10, 1e4)
	if plan := cfg.PlanMoves(v, fl, bothMovable, nil); len(plan.Moves) != 0 {
		t.Fatalf("plan = %+v, want none: its pauses would spend more than the tail", plan)
	}
	cfg.Moves.Pause = 10 * time.Millisecond // 100 packets a flow, 1 K for the 10
	if plan := cfg.PlanMoves(v, fl, bothMovable, nil); len(plan.Moves) != 1 {
		t.Fatalf("plan = %+v, want the scale-in", plan)
	}
	// A flow whose held packets would be more than MaxHeldPkts (100 > 99) does not move:
	// fw/2 cannot be emptied.
	cfg.Moves.MaxHeldPkts = 99
	if plan := cfg.PlanMoves(v, fl, bothMovable, nil); len(plan.Moves) != 0 {
		t.Fatalf("plan = %+v, want none: each flow would hold 100 packets", plan)
	}
}

// rig applies plans to a toy deployment: instances with flows whose rates the test sets.
type rig struct {
	cfg  Config
	now  time.Time
	rate map[string]float64 // flow → pps
	on   map[string]string  // flow → instance
	att  map[string]bool    // instance → attached
	h    MoveHistory
}

func (r *rig) view() (*View, map[string][]FlowRate) {
	fl := map[string][]FlowRate{}
	pps := map[string]float64{}
	for f, id := range r.on {
		fl[id] = append(fl[id], FlowRate{Key: f, Pps: r.rate[f]})
		pps[id] += r.rate[f]
	}
	var ins []Instance
	for _, id := range []string{"fw/1", "fw/2", "fw/3"} {
		if r.att[id] {
			in := att(id, "w1", int32(id[3]-'0'), len(fl[id]), pps[id])
			in.Overloaded = pps[id]/1e6 >= 0.8
			ins = append(ins, in)
		}
	}
	v := view(ins...)
	v.Now = r.now
	return v, fl
}

func (r *rig) step() MovePlan {
	v, fl := r.view()
	plan := r.cfg.PlanMoves(v, fl, bothMovable, &r.h)
	for _, m := range plan.Moves {
		for _, f := range m.Flows {
			if r.on[f] != m.From {
				panic("plan moves a flow from where it is not")
			}
			r.on[f] = m.To
		}
	}
	for _, id := range plan.Detach {
		r.att[id] = false
	}
	r.h.Record(r.cfg.Moves, plan.Moves, r.now)
	return plan
}

func Test_PlanMoves_no_flapping_under_oscillating_load(t *testing.T) {
	// Three instances, 30 flows; every flow's rate swings ±40 % with a 4 s period, half of
	// them in opposite phase, around a total of 1.2 cores' load. Once a second the plan is
	// applied. No flow may move twice within FlowHold, no instance that received flows may be
	// emptied within InstanceHold, and once the deployment settles it stays put.
	r := &rig{cfg: moveCfg(), now: t0, rate: map[string]float64{}, on: map[string]string{},
		att: map[string]bool{"fw/1": true, "fw/2": true, "fw/3": true}}
	base := map[string]float64{}
	for k := 0; k < 30; k++ {
		f := fmt.Sprintf("f%02d", k)
		r.on[f] = []string{"fw/1", "fw/2", "fw/3"}[k%3]
		base[f] = 4e4
	}
	last := map[string]time.Time{}
	received := map[string]time.Time{}
	moves := 0
	var lastMoveAt time.Time
	for s := 0; s < 600; s++ {
		for k := 0; k < 30; k++ {
			f := fmt.Sprintf("f%02d", k)
			ph := 2 * math.Pi * float64(s) / 4
			if k%2 == 1 {
				ph += math.Pi
			}
			r.rate[f] = base[f] * (1 + 0.4*math.Sin(ph))
		}
		plan := r.step()
		for _, m := range plan.Moves {
			moves += len(m.Flows)
			lastMoveAt = r.now
			for _, f := range m.Flows {
				if at, ok := last[f]; ok && r.now.Sub(at) < r.cfg.Moves.FlowHold {
					t.Fatalf("t=%ds: flow %s moved again after %s", s, f, r.now.Sub(at))
				}
				last[f] = r.now
			}
			received[m.To] = r.now
		}
		for _, id := range plan.Detach {
			if at, ok := received[id]; ok && r.now.Sub(at) < r.cfg.Moves.InstanceHold {
				t.Fatalf("t=%ds: %s emptied %s after it received flows", s, id, r.now.Sub(at))
			}
		}
		r.now = r.now.Add(time.Second)
	}
	if moves == 0 {
		t.Fatalf("nothing moved: the rig does not exercise the policy")
	}
	if lastMoveAt.Sub(t0) > 120*time.Second {
		t.Fatalf("still moving at %s (%d flow moves in all): the plan does not settle", lastMoveAt.Sub(t0), moves)
	}
}

func Test_PlanMoves_is_idempotent_and_deterministic(t *testing.T) {
	v := view(att("fw/1", "w1", 0, 50, 50e4), att("fw/2", "w1", 1, 10, 10e4), att("fw/3", "w2", 0, 30, 30e4))
	fl := map[string][]FlowRate{}
	flowsOf(fl, "fw/1", 50, 1e4)
	flowsOf(fl, "fw/2", 10, 1e4)
	flowsOf(fl, "fw/3", 30, 1e4)
	cfg := moveCfg()
	a := cfg.PlanMoves(v, fl, bothMovable, &MoveHistory{})
	b := cfg.PlanMoves(v, fl, bothMovable, &MoveHistory{})
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two plans of the same inputs differ: %+v vs %+v", a, b)
	}
	// Applied: fw/2's flows on fw/1, fw/2 detached. The next plan moves nothing (fw/3 at
	// 0.3 would not fit on fw/1 at 0.6, and the chain is in its hold anyway).
	h := &MoveHistory{}
	h.Record(cfg.Moves, a.Moves, v.Now)
	fl["fw/1"] = append(fl["fw/1"], fl["fw/2"]...)
	delete(fl, "fw/2")
	v2 := view(att("fw/1", "w1", 0, 60, 60e4), att("fw/3", "w2", 0, 30, 30e4))
	for _, dt := range []time.Duration{0, time.Minute} {
		v2.Now = t0.Add(dt)
		if plan := cfg.PlanMoves(v2, fl, bothMovable, h); len(plan.Moves) != 0 {
			t.Fatalf("after %s: plan = %+v, want none", dt, plan)
		}
	}
}

func Test_PlanMoves_an_instance_Assign_filled_to_its_threshold_is_not_relieved(t *testing.T) {
	// fw/1 at 0.85 (threshold 0.8: Assign's last flow took it there) is full, not overloaded
	// by its flows' growth (under 1.1 × 0.8); fw/2 keeps its room for new flows.
	v := view(att("fw/1", "w1", 0, 17, 85e4), att("fw/2", "w2", 0, 10, 50e4))
	v.Instances[0].Overloaded = true
	fl := map[string][]FlowRate{}
	flowsOf(fl, "fw/1", 17, 5e4)
	flowsOf(fl, "fw/2", 10, 5e4)
	if plan := moveCfg().PlanMoves(v, fl, bothMovable, nil); len(plan.Moves) != 0 {
		t.Fatalf("plan = %+v, want none", plan)
	}
}

func Test_Overload_ignores_the_queue_of_released_held_packets(t *testing.T) {
	in := att("fw/1", "w1", 0, 10, 10e4)
	in.QueueLen = 500
	if ch := testCfg().Overload(view(in)); len(ch) != 1 || ch[0].Reason != ReasonQueue {
		t.Fatalf("changes %+v, want a queue overload", ch)
	}
	in.Settling = true
	if ch := testCfg().Overload(view(in)); len(ch) != 0 {
		t.Fatalf("changes %+v, want none while it settles", ch)
	}
	in.NewDrops = 3 // drops still count
	if ch := testCfg().Overload(view(in)); len(ch) != 1 || ch[0].Reason != ReasonDrops {
		t.Fatalf("changes %+v, want a drops overload", ch)
	}
}

func Test_PlanMoves_bounds_the_held_packets_released_into_one_destination(t *testing.T) {
	// fw/2's 10 flows hold 100 packets each in the 10 ms pause: a room of 500 takes 5 per
	// destination, so fw/2 empties onto fw/1 and fw/3 (5 each) but not onto fw/1 alone.
	cfg := moveCfg()
	cfg.Moves.QueueRoom = 500
	fl := map[string][]FlowRate{}
	flowsOf(fl, "fw/1", 30, 1e4)
	flowsOf(fl, "fw/2", 10, 1e4)
	flowsOf(fl, "fw/3", 30, 1e4)
	v := view(att("fw/1", "w1", 0, 30, 30e4), att("fw/2", "w1", 1, 10, 10e4), att("fw/3", "w2", 0, 30, 30e4))
	plan := cfg.PlanMoves(v, fl, bothMovable, nil)
	if len(plan.Moves) != 2 || len(plan.Moves[0].Flows) != 5 || len(plan.Moves[1].Flows) != 5 {
		t.Fatalf("plan = %+v, want 5 flows onto each of fw/1 and fw/3", plan)
	}
	// fw/1 alone takes only 5 in one plan: fw/2 stays emptying for the other 5.
	v = view(att("fw/1", "w1", 0, 30, 30e4), att("fw/2", "w1", 1, 10, 10e4))
	if plan := cfg.PlanMoves(v, fl, bothMovable, nil); len(plan.Moves) != 1 || len(plan.Moves[0].Flows) != 5 ||
		!reflect.DeepEqual(plan.Emptying, []Emptying{{"fw", "fw/2"}}) {
		t.Fatalf("plan = %+v, want 5 flows onto fw/1 and fw/2 left emptying", plan)
	}
}

// applyMoves is what the controller does with a plan: the flows move (fl and the view's
// counts and rates follow them), the emptied instances are detached, and h records it all.
func applyMoves(cfg Config, v *View, fl map[string][]FlowRate, plan MovePlan, h *MoveHistory) {
	byID := map[string]*Instance{}
	for i := range v.Instances {
		byID[v.Instances[i].ID] = &v.Instances[i]
	}
	for _, m := range plan.Moves {
		moving := map[string]bool{}
		for _, k := range m.Flows {
			moving[k] = true
		}
		var stay []FlowRate
		for _, f := range fl[m.From] {
			if moving[f.Key] {
				fl[m.To] = append(fl[m.To], f)
			} else {
				stay = append(stay, f)
			}
		}
		fl[m.From] = stay
		from, to := byID[m.From], byID[m.To]
		from.Flows, to.Flows = from.Flows-len(m.Flows), to.Flows+len(m.Flows)
		from.RatePps, to.RatePps = from.RatePps-m.Pps, to.RatePps+m.Pps
		from.FlowsAtStats, to.FlowsAtStats = from.Flows, to.Flows
	}
	for _, id := range plan.Detach {
		byID[id].Attached, byID[id].Core = false, -1
	}
	h.Record(cfg.Moves, plan.Moves, v.Now)
	h.Track(plan)
}

// emptyingRack is fw/1 with 30 flows and fw/2 with n, 10 Kpps each, and a budget of 5 flows
// moved a second.
func emptyingRack(n int) (Config, map[string][]FlowRate, *View) {
	cfg := moveCfg()
	cfg.Moves.PerSecond, cfg.Moves.Burst = 5, 5
	fl := map[string][]FlowRate{}
	flowsOf(fl, "fw/1", 30, 1e4)
	flowsOf(fl, "fw/2", n, 1e4)
	return cfg, fl, view(att("fw/1", "w1", 0, 30, 30e4), att("fw/2", "w1", 1, n, float64(n)*1e4))
}

func Test_PlanMoves_empties_an_instance_over_several_plans(t *testing.T) {
	// fw/2's 12 flows fit on fw/1 (0.3 + 0.12 under the fill of 0.64), but the budget moves
	// 5 a second: fw/2 is emptied over three plans, and takes no new flow meanwhile.
	cfg, fl, v := emptyingRack(12)
	h := &MoveHistory{}
	var moved []int
	for step := 0; step < 3; step++ {
		v.Now = t0.Add(time.Duration(step) * time.Second)
		h.Mark(v)
		plan := cfg.PlanMoves(v, fl, bothMovable, h)
		n := 0
		for _, m := range plan.Moves {
			if m.From != "fw/2" || m.To != "fw/1" || m.Reason != ReasonScaleIn {
				t.Fatalf("step %d: move %v, want fw/2 to fw/1 for scale-in", step, m)
			}
			n += len(m.Flows)
		}
		moved = append(moved, n)
		applyMoves(cfg, v, fl, plan, h)
		if step < 2 {
			if len(plan.Detach) != 0 || !reflect.DeepEqual(plan.Emptying, []Emptying{{"fw", "fw/2"}}) {
				t.Fatalf("step %d: plan = %+v, want fw/2 still emptying", step, plan)
			}
			// A new flow of fw goes to fw/1, not to the instance being emptied.
			h.Mark(v)
			if a := cfg.Assign(v, "fw"); a.Instance != "fw/1" {
				t.Fatalf("step %d: new flow assigned %+v, want fw/1 (fw/2 is being emptied)", step, a)
			}
		} else if !reflect.DeepEqual(plan.Detach, []string{"fw/2"}) || len(plan.Emptying) != 0 {
			t.Fatalf("last step: plan = %+v, want fw/2 detached", plan)
		}
	}
	if !reflect.DeepEqual(moved, []int{5, 5, 2}) {
		t.Fatalf("flows moved per plan = %v, want [5 5 2]", moved)
	}
}

func Test_PlanMoves_gives_up_emptying_when_the_others_fill(t *testing.T) {
	// fw/2 is half emptied when fw/1's load grows to 0.6: fw/2's 5 other flows (0.05) no
	// longer fit under the fill (0.64), so the plan gives up and fw/2 takes flows again.
	cfg, fl, v := emptyingRack(10)
	h := &MoveHistory{}
	plan := cfg.PlanMoves(v, fl, bothMovable, h)
	applyMoves(cfg, v, fl, plan, h)
	if h.Emptying["fw"] != "fw/2" {
		t.Fatalf("emptying = %v after %+v, want fw/2", h.Emptying, plan)
	}
	v.Instances[0].RatePps = 60e4 // fw/1's flows grew
	v.Now = t0.Add(time.Second)
	h.Mark(v)
	plan = cfg.PlanMoves(v, fl, bothMovable, h)
	if len(plan.Moves) != 0 || len(plan.Emptying) != 0 {
		t.Fatalf("plan = %+v, want no move and fw/2 no longer emptying", plan)
	}
	h.Track(plan)
	h.Mark(v)
	if v.Instances[1].Emptying {
		t.Fatal("fw/2 is still marked emptying")
	}
}
