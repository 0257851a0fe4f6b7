// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// testCfg is keel's policy with the numbers these tests were worked out for pinned, so that
// tuning Keel()'s defaults does not change what the tests check.
func testCfg() Config {
	c := Keel()
	c.SLOThresholds, c.FixedThreshold, c.ClearFrac, c.QueueHigh = true, 0.9, 0.9, 256
	c.PoolLow, c.PoolHigh, c.Pack, c.PackFrac = 1, 3, true, 0.8
	c.AdaptiveBatch, c.BatchP, c.FixedBatch, c.MaxBatch = true, 0.95, 1, 64
	c.ReclaimAfter = time.Second
	return c
}

// chains: fw and nat run 1 Mpps on a core; fw stops taking flows at 0.8, nat at 0.9.
func chains() map[string]Chain {
	return map[string]Chain{
		"fw":  {Name: "fw", MaxPps: 1e6, Threshold: 0.8},
		"nat": {Name: "nat", MaxPps: 1e6, Threshold: 0.9},
	}
}

func workers(names ...string) []Worker {
	var ws []Worker
	for _, n := range names {
		ws = append(ws, Worker{Name: n, Cores: []int32{0, 1, 2, 3}})
	}
	return ws
}

// att is an attached instance whose stats are current: load = pps / 1e6.
func att(id, worker string, core int32, flows int, pps float64) Instance {
	return Instance{ID: id, Chain: chainOf(id), Worker: worker, Attached: true, Core: core, Ready: true,
		Flows: flows, FlowsAtStats: flows, RatePps: pps, Batch: 1}
}

// pooled is an idle, ready, detached instance.
func pooled(id, worker string) Instance {
	return Instance{ID: id, Chain: chainOf(id), Worker: worker, Core: -1, Ready: true}
}

func chainOf(id string) string { c, _ := splitID(id); return c }

func view(ins ...Instance) *View {
	return &View{Chains: chains(), Instances: ins, Workers: workers("w1", "w2"), Now: t0}
}

func Test_EstRate(t *testing.T) {
	cases := []struct {
		name    string
		in      Instance
		perFlow float64
		want    float64
	}{
		{"flows since stats scale the rate", Instance{Flows: 6, FlowsAtStats: 4, RatePps: 400e3}, 1e5, 600e3},
		{"flows ended since stats", Instance{Flows: 0, FlowsAtStats: 4, RatePps: 400e3}, 1e5, 0},
		{"fewer flows than at stats", Instance{Flows: 1, FlowsAtStats: 4, RatePps: 400e3}, 1e5, 100e3},
		{"no flows at stats: the chain's per-flow rate", Instance{Flows: 3}, 1e5, 300e3},
		{"no flows at stats: a measured rate above the estimate stays", Instance{Flows: 3, RatePps: 500e3}, 1e5, 500e3},
		{"nothing known", Instance{}, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := EstRate(&tc.in, tc.perFlow); !near(got, tc.want) {
				t.Fatalf("EstRate = %v, want %v", got, tc.want)
			}
		})
	}
}

func Test_View_Load(t *testing.T) {
	lag := att("fw/1", "w1", 0, 2, 200e3)
	lag.Flows = 5 // three flows assigned since the stats
	fresh := att("fw/2", "w1", 1, 0, 0)
	fresh.Flows, fresh.FlowsAtStats = 2, 0 // just attached, no stats yet
	orphan := att("gone/1", "w1", 2, 3, 300e3)
	ghost := att("fw/3", "w9", 0, 1, 900e3) // on a worker that is gone
	detached := pooled("fw/4", "w1")
	detached.FlowsAtStats, detached.RatePps = 1, 900e3
	other := att("nat/1", "w2", 0, 1, 900e3)
	v := view(lag, fresh, orphan, ghost, detached, other)
	cases := []struct {
		name string
		i    int
		want float64
	}{
		{"stats lag: 200 kpps at 2 flows, 5 flows now", 0, 0.5},
		// Per flow of fw: 200 kpps / 2 flows from fw/1 only (not the gone worker's fw/3,
		// not the detached fw/4, not nat/1).
		{"no stats: the chain's per-flow rate", 1, 0.2},
		{"chain not deployed", 2, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := v.Load(&v.Instances[tc.i]); !near(got, tc.want) {
				t.Fatalf("Load(%s) = %v, want %v", v.Instances[tc.i].ID, got, tc.want)
			}
		})
	}
	v.Chains["fw"] = Chain{Name: "fw", Threshold: 0.8}
	if got := v.Load(&v.Instances[0]); got != 0 {
		t.Fatalf("Load with MaxPps 0 = %v, want 0", got)
	}
}

func Test_Config_Assign(t *testing.T) {
	over := func(in Instance) Instance { in.Overloaded = true; return in }
	cases := []struct {
		name string
		v    *View
		want Assignment
	}{
		{"most loaded that stays under its threshold",
			view(att("fw/1", "w1", 0, 3, 300e3), att("fw/2", "w2", 0, 5, 500e3)),
			Assignment{Instance: "fw/2", Core: 0}},
		// per flow 1.05 Mpps / 8 = 131 kpps: fw/2 at 0.75 would reach 0.88 > 0.8.
		{"one more flow would cross the threshold",
			view(att("fw/1", "w1", 0, 3, 300e3), att("fw/2", "w2", 1, 5, 750e3)),
			Assignment{Instance: "fw/1", Core: 0}},
		{"overloaded instances take no flow",
			view(att("fw/1", "w1", 0, 3, 300e3), over(att("fw/2", "w2", 1, 5, 500e3))),
			Assignment{Instance: "fw/1", Core: 0}},
		{"other chains are not candidates",
			view(att("fw/1", "w1", 0, 3, 300e3), att("nat/1", "w1", 1, 5, 500e3)),
			Assignment{Instance: "fw/1", Core: 0}},
		{"tie on load: more flows",
			view(att("fw/1", "w1", 0, 2, 400e3), att("fw/2", "w2", 0, 4, 400e3)),
			Assignment{Instance: "fw/2", Core: 0}},
		{"tie on load and flows: lower ID",
			view(att("fw/2", "w2", 1, 4, 400e3), att("fw/1", "w1", 2, 4, 400e3)),
			Assignment{Instance: "fw/1", Core: 2}},
		{"tie on load and flows: lower ID in numeric order",
			view(att("fw/10", "w1", 1, 4, 400e3), att("fw/9", "w2", 2, 4, 400e3)),
			Assignment{Instance: "fw/9", Core: 2}},
		{"an attached instance without flows takes one even above its threshold",
			view(Instance{ID: "fw/1", Chain: "fw", Worker: "w1", Attached: true, Core: 0, Ready: true, RatePps: 850e3}),
			Assignment{Instance: "fw/1", Core: 0}},
		// w1 carries 0.5 on 4 cores, w2 0.7: the idle instance on w1 goes on its first free core.
		{"all overloaded: idle instance of the least loaded worker, on a free core",
			view(over(att("fw/1", "w1", 0, 5, 500e3)), over(att("fw/2", "w2", 0, 7, 700e3)),
				pooled("fw/3", "w2"), pooled("fw/5", "w1")),
			Assignment{Instance: "fw/5", Attach: true, Core: 1}},
		{"all overloaded: idle tie on worker load goes to the lower ID",
			view(over(att("fw/1", "w1", 0, 5, 500e3)), over(att("fw/2", "w2", 0, 5, 500e3)),
				pooled("fw/10", "w1"), pooled("fw/9", "w2")),
			Assignment{Instance: "fw/9", Attach: true, Core: 1}},
		{"no attached instance: idle one attached on core 0",
			view(pooled("fw/1", "w1")),
			Assignment{Instance: "fw/1", Attach: true, Core: 0}},
		{"worker gone: its instances are never chosen",
			view(att("fw/1", "w9", 0, 1, 100e3), pooled("fw/2", "w9"), pooled("fw/3", "w2")),
			Assignment{Instance: "fw/3", Attach: true, Core: 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := testCfg().Assign(tc.v, "fw"); got != tc.want {
				t.Fatalf("Assign = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func Test_Config_Assign_no_instance(t *testing.T) {
	over := att("fw/1", "w1", 0, 8, 800e3)
	over.Overloaded = true
	full := &View{Chains: chains(), Workers: []Worker{{Name: "w1", Cores: []int32{0}}},
		Instances: []Instance{over, pooled("fw/2", "w1")}}
	cases := []struct {
		name, chain string
		v           *View
		want        string
	}{
		{"empty pool", "fw", view(over), "chain fw: every attached instance is at its threshold (0.80 of a core) and no idle instance has a free core"},
		{"no instance at all", "nat", view(), "chain nat: "},
		{"idle instance but no free core", "fw", full, "chain fw: "},
		{"idle only on a gone worker", "fw", view(over, pooled("fw/2", "w9")), "chain fw: "},
		{"chain removed while its flows are live", "gone", view(att("gone/1", "w1", 0, 3, 300e3)), "chain gone is not deployed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := testCfg().Assign(tc.v, tc.chain)
			if got.Instance != "" || got.Attach || !strings.HasPrefix(got.Reason, tc.want) {
				t.Fatalf("Assign(%s) = %+v, want no instance and a reason starting %q", tc.chain, got, tc.want)
			}
		})
	}
}

// Test_Config_Assign_stats_lag assigns a burst of flows before any new stats arrive: the
// estimate scales the last measured rate with the flows assigned since, so the instance
// stops taking flows at its threshold instead of taking the whole burst.
func Test_Config_Assign_stats_lag(t *testing.T) {
	cfg := testCfg()
	v := view(att("fw/1", "w1", 0, 2, 200e3), pooled("fw/2", "w2"))
	v.Chains["fw"] = Chain{Name: "fw", MaxPps: 1e6, Threshold: 0.75}
	taken := 0
	for ; taken < 100; taken++ {
		a := cfg.Assign(v, "fw")
		if a.Instance != "fw/1" {
			if want := (Assignment{Instance: "fw/2", Attach: true, Core: 0}); a != want {
				t.Fatalf("after %d flows: Assign = %+v, want %+v", taken, a, want)
			}
			break
		}
		v.Instances[0].Flows++
	}
	// 100 kpps per flow: flows 3..7 fit under 0.75 (0.6 + 0.1 ≤ 0.75), an 8th would not.
	if taken != 5 || v.Instances[0].Flows != 7 {
		t.Fatalf("fw/1 took %d flows (now %d), want 5 (now 7)", taken, v.Instances[0].Flows)
	}
}

// Test_Config_Assign_shared_core: an instance whose core is shared stops taking flows when
// one more flow would take the core past the lowest threshold of its sgroups, not only its
// own.
func Test_Config_Assign_shared_core(t *testing.T) {
	v := view(att("fw/1", "w1", 0, 4, 400e3), att("nat/1", "w1", 0, 3, 350e3), pooled("fw/2", "w2"))
	// fw/1 alone: 0.4 + 0.1 ≤ 0.8; its core: 0.75 + 0.1 > 0.8.
	want := Assignment{Instance: "fw/2", Attach: true, Core: 0}
	if got := testCfg().Assign(v, "fw"); got != want {
		t.Fatalf("Assign = %+v, want %+v", got, want)
	}
	v.Instances[1].RatePps = 250e3 // the core at 0.65 + 0.1 fits
	want = Assignment{Instance: "fw/1", Core: 0}
	if got := testCfg().Assign(v, "fw"); got != want {
		t.Fatalf("Assign = %+v, want %+v", got, want)
	}
	// A removed chain's sgroup on the core: its load is unknown, the core takes no new flow.
	v.Instances[1].Chain = "gone"
	want = Assignment{Instance: "fw/2", Attach: true, Core: 0}
	if got := testCfg().Assign(v, "fw"); got != want {
		t.Fatalf("Assign next to a removed chain = %+v, want %+v", got, want)
	}
}

// Test_Config_Assign_packs_by_new_chain: with every core of the worker in use, a new sgroup
// shares a core only if the core is light enough for the new chain's threshold too.
func Test_Config_Assign_packs_by_new_chain(t *testing.T) {
	v := &View{Chains: chains(), Workers: []Worker{{Name: "w1", Cores: []int32{0, 1}}},
		Instances: []Instance{att("nat/1", "w1", 0, 4, 400e3), att("nat/2", "w1", 1, 2, 200e3), pooled("fw/1", "w1")}}
	// fw's threshold 0.8: room 0.64 per core; core 1 (0.2) is the least loaded.
	want := Assignment{Instance: "fw/1", Attach: true, Core: 1}
	if got := testCfg().Assign(v, "fw"); got != want {
		t.Fatalf("Assign = %+v, want %+v", got, want)
	}
	// fw's threshold 0.2: room 0.16, and no core is that light.
	v.Chains["fw"] = Chain{Name: "fw", MaxPps: 1e6, Threshold: 0.2}
	if got := testCfg().Assign(v, "fw"); got.Instance != "" {
		t.Fatalf("Assign = %+v, want none: core 1 at 0.2 is above fw's room 0.16", got)
	}
}

func Test_Config_PickCore(t *testing.T) {
	noPack := testCfg()
	noPack.Pack = false
	w := func(cores ...int32) []Worker { return []Worker{{Name: "w1", Cores: cores}} }
	cases := []struct {
		name    string
		cfg     Config
		workers []Worker
		ins     []Instance
		worker  string
		want    int32
	}{
		{"lowest free core", testCfg(), w(0, 1, 2), []Instance{att("fw/1", "w1", 0, 1, 700e3)}, "w1", 1},
		{"free core before a light shared one", testCfg(), w(0, 1, 2), []Instance{att("fw/1", "w1", 0, 1, 100e3), att("fw/2", "w1", 1, 1, 100e3)}, "w1", 2},
		{"lowest free core of unsorted cores", testCfg(), w(3, 1, 2), []Instance{att("fw/1", "w1", 1, 1, 700e3)}, "w1", 2},
		{"idle attached instances hold their core", testCfg(), w(0, 1), []Instance{att("fw/1", "w1", 0, 0, 0), att("fw/2", "w1", 1, 1, 700e3)}, "w1", 0},
		{"detached instances hold no core", testCfg(), w(0, 1), []Instance{pooled("fw/1", "w1"), att("fw/2", "w1", 0, 1, 700e3)}, "w1", 1},
		// Room: 0.8 × 0.8 = 0.64 for fw, 0.8 × 0.9 = 0.72 for nat.
		{"packing: least loaded core under its room", testCfg(), w(0, 1, 2), []Instance{att("fw/1", "w1", 0, 5, 500e3), att("fw/2", "w1", 1, 3, 300e3), att("fw/3", "w1", 2, 7, 700e3)}, "w1", 1},
		{"packing: a core above its room is full", testCfg(), w(0, 1), []Instance{att("fw/1", "w1", 0, 7, 700e3), att("fw/2", "w1", 1, 65, 650e3)}, "w1", -1},
		{"packing: the lowest threshold of a shared core counts", testCfg(), w(0, 1), []Instance{att("fw/1", "w1", 0, 7, 700e3), att("nat/1", "w1", 1, 33, 330e3), att("fw/2", "w1", 1, 33, 330e3)}, "w1", -1},
		{"packing: nat's core has more room", testCfg(), w(0, 1), []Instance{att("fw/1", "w1", 0, 68, 680e3), att("nat/1", "w1", 1, 70, 700e3)}, "w1", 1},
		{"no packing: every core in use", noPack, w(0, 1), []Instance{att("fw/1", "w1", 0, 1, 100e3), att("fw/2", "w1", 1, 1, 100e3)}, "w1", -1},
		{"unknown worker", testCfg(), w(0, 1), nil, "w2", -1},
		{"worker without cores", testCfg(), w(), nil, "w1", -1},
		{"another worker's instances do not count", testCfg(), append(w(0), Worker{Name: "w2", Cores: []int32{0}}), []Instance{att("fw/1", "w2", 0, 8, 800e3)}, "w1", 0},
		{"a removed chain's core is not shared", testCfg(), w(0), []Instance{att("gone/1", "w1", 0, 1, 100e3)}, "w1", -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := &View{Chains: chains(), Workers: tc.workers, Instances: tc.ins, Now: t0}
			if got := tc.cfg.PickCore(v, tc.worker); got != tc.want {
				t.Fatalf("PickCore(%s) = %d, want %d", tc.worker, got, tc.want)
			}
		})
	}
}

// A mark clears under ClearFrac of the limit that made it; the measured p99 holds back only a
// mark made for it, or a p99 over the budget (issue 33: keel-sim's random-12, where t1's
// load-marked instances sat at 0.93 of its budget and never cleared).
func Test_Config_Overload_clears_a_load_mark_with_the_p99_within_budget(t *testing.T) {
	v := func(p99 float64, reason Reason) *View {
		in := att("fw/1", "w1", 0, 7, 700e3) // load 0.70, under 0.9 × 0.8
		in.Overloaded, in.OverloadReason, in.SojournP99us = true, reason, p99
		v := view(in)
		c := v.Chains["fw"]
		c.ServerBudgetUs = 30
		v.Chains["fw"] = c
		return v
	}
	cleared := func(v *View) bool {
		ch := testCfg().Overload(v)
		return len(ch) == 1 && !ch[0].Overloaded
	}
	if !cleared(v(27.9, ReasonLoad)) {
		t.Error("a load mark with the p99 at 0.93 of the budget stays: the chain's instances never clear")
	}
	if cleared(v(31, ReasonLoad)) {
		t.Error("a load mark cleared with the p99 over the budget")
	}
	if cleared(v(27.9, ReasonMeasuredP99)) {
		t.Error("a p99 mark cleared above ClearFrac of the budget: no hysteresis")
	}
	if !cleared(v(26.9, ReasonMeasuredP99)) {
		t.Error("a p99 mark stays under ClearFrac (0.9) of the budget")
	}
}

// A chain's flow cap (OpenFaaS's capacity target) sends a flow to a new instance when one can
// be attached; when none can, the instance with room under its threshold takes it over the cap
// instead of the flow being refused (make demo's chain2 on one managed core).
func Test_Assign_over_the_flow_cap_only_when_no_instance_can_be_attached(t *testing.T) {
	v := func(cores []int32) *View {
		v := view(att("fw/1", "w1", 0, 2, 1e4), att("fw/2", "w1", 0, 3, 1e4), pooled("fw/3", "w1"))
		c := v.Chains["fw"]
		c.MaxFlows = 2
		v.Chains["fw"] = c
		v.Workers = []Worker{{Name: "w1", Cores: cores}}
		return v
	}
	cfg := testCfg()
	if a := cfg.Assign(v([]int32{0, 1}), "fw"); a.Instance != "fw/3" || !a.Attach {
		t.Fatalf("with a free core: %+v, want fw/3 attached", a)
	}
	cfg.Pack = false // core 0 is the only one, and taken
	if a := cfg.Assign(v([]int32{0}), "fw"); a.Instance != "fw/1" || a.Attach {
		t.Fatalf("without a core: %+v, want fw/1 (fewest flows) over its cap", a)
	}
	full := v([]int32{0})
	full.Instances[0].RatePps, full.Instances[1].RatePps = 8e5, 8e5 // at the threshold: no room
	if a := testCfg().Assign(full, "fw"); a.Instance != "" {
		t.Fatalf("instances at their threshold: %+v, want the flow refused", a)
	}
}

func Test_Config_Overload(t *testing.T) {
	with := func(in Instance, f func(*Instance)) Instance { f(&in); return in }
	over := func(in *Instance) { in.Overloaded = true }
	cases := []struct {
		name string
		ins  []Instance
		want []Change
	}{
		{"calm", []Instance{att("fw/1", "w1", 0, 7, 700e3)}, nil},
		{"load", []Instance{att("fw/1", "w1", 0, 8, 850e3)}, []Change{{"fw/1", true, ReasonLoad, "load 0.85 ≥ threshold 0.80"}}},
		{"load at the threshold", []Instance{att("fw/1", "w1", 0, 8, 800e3)}, []Change{{"fw/1", true, ReasonLoad, "load 0.80 ≥ threshold 0.80"}}},
		{"stats lag counts", []Instance{with(att("fw/1", "w1", 0, 4, 400e3), func(in *Instance) { in.Flows = 9 })}, []Change{{"fw/1", true, ReasonLoad, "load 0.90 ≥ threshold 0.80"}}},
		{"queue", []Instance{with(att("fw/1", "w1", 0, 1, 100e3), func(in *Instance) { in.QueueLen = 300 })}, []Change{{"fw/1", true, ReasonQueue, "NIC queue 300 ≥ 256"}}},
		{"drops", []Instance{with(att("fw/1", "w1", 0, 1, 100e3), func(in *Instance) { in.NewDrops = 3 })}, []Change{{"fw/1", true, ReasonDrops, "3 packets dropped"}}},
		{"shared core", []Instance{att("fw/1", "w1", 2, 4, 400e3), att("nat/1", "w1", 2, 4, 450e3)},
			[]Change{{"fw/1", true, ReasonSharedCore, "shared core 2 load 0.85 ≥ 0.80"}, {"nat/1", true, ReasonSharedCore, "shared core 2 load 0.85 ≥ 0.80"}}},
		{"shared core under its lowest threshold", []Instance{att("fw/1", "w1", 2, 4, 400e3), att("nat/1", "w1", 2, 3, 350e3)}, nil},
		{"load comes first", []Instance{with(att("fw/1", "w1", 0, 9, 900e3), func(in *Instance) { in.QueueLen, in.NewDrops = 300, 5 })},
			[]Change{{"fw/1", true, ReasonLoad, "load 0.90 ≥ threshold 0.80"}}},
		{"still overloaded: no change", []Instance{with(att("fw/1", "w1", 0, 9, 900e3), over)}, nil},
		{"hysteresis: under the threshold, above ClearFrac of it", []Instance{with(att("fw/1", "w1", 0, 7, 750e3), over)}, nil},
		{"cleared under ClearFrac × threshold", []Instance{with(att("fw/1", "w1", 0, 7, 700e3), over)}, []Change{{"fw/1", false, ReasonBelowThreshold, "load 0.70 < 0.72"}}},
		{"hysteresis on the queue", []Instance{with(att("fw/1", "w1", 0, 1, 100e3), func(in *Instance) { in.Overloaded, in.QueueLen = true, 240 })}, nil},
		{"queue cleared", []Instance{with(att("fw/1", "w1", 0, 1, 100e3), func(in *Instance) { in.Overloaded, in.QueueLen = true, 200 })}, []Change{{"fw/1", false, ReasonBelowThreshold, "load 0.10 < 0.72"}}},
		{"hysteresis on a shared core", []Instance{with(att("fw/1", "w1", 0, 4, 400e3), over), att("nat/1", "w1", 0, 3, 350e3)}, nil},
		{"detached", []Instance{with(pooled("fw/1", "w1"), over)}, []Change{{"fw/1", false, ReasonDetached, "detached"}}},
		// A removed chain's load and threshold are unknown (0): its core counts as full.
		{"a removed chain's sgroup on a shared core", []Instance{att("fw/1", "w1", 0, 3, 300e3), att("gone/1", "w1", 0, 3, 300e3)},
			[]Change{{"fw/1", true, ReasonSharedCore, "shared core 0 load 0.30 ≥ 0.00"}, {"gone/1", true, ReasonLoad, "load 0.00 ≥ threshold 0.00"}}},
		{"worker gone: no mark", []Instance{att("fw/1", "w9", 0, 9, 900e3), with(att("fw/2", "w9", 0, 1, 100e3), over)}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := testCfg().Overload(view(tc.ins...))
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Overload = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Test_Config_Overload_flapping feeds an instance a sequence of loads (as fractions of its
// threshold) and counts how often its mark toggles.
func Test_Config_Overload_flapping(t *testing.T) {
	repeat := func(n int, xs ...float64) []float64 {
		var out []float64
		for range n {
			out = append(out, xs...)
		}
		return out
	}
	cases := []struct {
		name      string
		clearFrac float64
		loads     []float64
		want      int
	}{
		{"0.85/0.95 never reaches the threshold", 0.9, repeat(10, 0.85, 0.95), 0},
		{"0.85/0.95 after an overload: cleared once", 0.9, append([]float64{1.05}, repeat(10, 0.95, 0.85)...), 2},
		{"0.95/1.05 around the threshold: marked once", 0.9, repeat(10, 0.95, 1.05), 1},
		{"without hysteresis 0.95/1.05 flaps", 1.0, repeat(10, 0.95, 1.05), 19},
		{"slow ramp up and down", 0.9, []float64{0.5, 0.8, 0.99, 1.0, 0.97, 0.91, 0.89, 0.95, 0.99, 1.01, 0.92, 0.5}, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testCfg()
			cfg.ClearFrac = tc.clearFrac
			v := view(att("fw/1", "w1", 0, 10, 0))
			toggles := 0
			for _, x := range tc.loads {
				v.Instances[0].RatePps = x * 0.8 * 1e6
				for _, ch := range cfg.Overload(v) {
					v.Instances[0].Overloaded = ch.Overloaded
					toggles++
				}
			}
			if toggles != tc.want {
				t.Fatalf("%d toggles, want %d", toggles, tc.want)
			}
		})
	}
}

func Test_Config_Reclaim(t *testing.T) {
	idle := func(id, worker string, since time.Duration) Instance {
		in := att(id, worker, 0, 0, 0)
		in.IdleSince = t0.Add(-since)
		return in
	}
	busy := idle("fw/4", "w1", 5*time.Second)
	busy.Flows = 1
	detached := pooled("fw/5", "w1")
	detached.IdleSince = t0.Add(-5 * time.Second)
	cases := []struct {
		name string
		ins  []Instance
		want []string
	}{
		{"idle longer than ReclaimAfter", []Instance{idle("fw/1", "w1", 2*time.Second)}, []string{"fw/1"}},
		{"idle exactly ReclaimAfter", []Instance{idle("fw/1", "w1", time.Second)}, []string{"fw/1"}},
		{"idle for less", []Instance{idle("fw/1", "w1", 999*time.Millisecond)}, nil},
		{"has flows", []Instance{busy}, nil},
		{"no idle time recorded", []Instance{att("fw/1", "w1", 0, 0, 0)}, nil},
		{"detached", []Instance{detached}, nil},
		{"worker gone", []Instance{idle("fw/1", "w9", 5*time.Second)}, nil},
		{"chain removed", []Instance{idle("gone/1", "w1", 5*time.Second)}, []string{"gone/1"}},
		{"several, sorted", []Instance{idle("nat/1", "w2", 3*time.Second), idle("fw/2", "w1", 2*time.Second), idle("fw/1", "w1", 0)}, []string{"fw/2", "nat/1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := testCfg().Reclaim(view(tc.ins...)); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Reclaim = %q, want %q", got, tc.want)
			}
		})
	}
}

// Test_Config_Reclaim_flows_come_back steps the clock by 100 ms while an instance's flows
// drop to 0 and come back: it is detached only after ReclaimAfter without a flow.
func Test_Config_Reclaim_flows_come_back(t *testing.T) {
	// Flows per 100 ms step: idle 0.6 s, busy, idle 0.9 s, busy, then idle for good.
	flows := []int{1, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	cfg := testCfg()
	v := view(att("fw/1", "w1", 0, 1, 100e3))
	detachedAt := -1
	for step, f := range flows {
		v.Now = t0.Add(time.Duration(step) * 100 * time.Millisecond)
		in := &v.Instances[0]
		switch {
		case f > 0:
			in.IdleSince = time.Time{}
		case in.Flows > 0:
			in.IdleSince = v.Now
		}
		in.Flows = f
		if got := cfg.Reclaim(v); len(got) > 0 {
			detachedAt = step
			break
		}
	}
	// Idle from step 18: detached at step 28, 1 s later.
	if detachedAt != 28 {
		t.Fatalf("detached at step %d, want 28", detachedAt)
	}
}

func Test_Config_Pool(t *testing.T) {
	cfg := testCfg()
	cfg.PoolLow, cfg.PoolHigh = 2, 3
	idle := func(ids ...string) []Instance {
		var out []Instance
		for i, id := range ids {
			out = append(out, pooled(id, []string{"w1", "w2", "w3"}[i%3]))
		}
		return out
	}
	starting := pooled("fw/1", "w1")
	starting.Ready = false
	cases := []struct {
		name  string
		ins   []Instance
		chain string
		want  PoolChange
	}{
		{"within bounds", idle("fw/1", "fw/2"), "fw", PoolChange{}},
		{"at PoolHigh", idle("fw/1", "fw/2", "fw/3"), "fw", PoolChange{}},
		// w1 carries load; w2 and w3 none: one each, spread by their instance count.
		{"empty: create on the least loaded workers", []Instance{att("fw/1", "w1", 0, 6, 600e3)}, "fw",
			PoolChange{Create: []string{"w2", "w3"}}},
		{"fewer instances first on equal load", []Instance{pooled("nat/1", "w2"), pooled("nat/2", "w3"), pooled("nat/3", "w3")}, "fw",
			PoolChange{Create: []string{"w1", "w1"}}},
		{"one short", []Instance{att("fw/1", "w1", 0, 6, 600e3), pooled("fw/2", "w2")}, "fw",
			PoolChange{Create: []string{"w3"}}},
		{"a starting instance counts as idle", []Instance{starting, pooled("fw/2", "w2")}, "fw", PoolChange{}},
		{"attached instances are not idle", []Instance{att("fw/1", "w1", 0, 0, 0), att("fw/2", "w2", 0, 0, 0)}, "fw",
			PoolChange{Create: []string{"w3", "w1"}}},
		{"other chains' idle instances do not count", idle("nat/1", "nat/2", "nat/3", "nat/4"), "fw",
			PoolChange{Create: []string{"w2", "w3"}}},
		{"above PoolHigh: highest IDs in numeric order", idle("fw/9", "fw/10", "fw/2", "fw/11", "fw/1"), "fw",
			PoolChange{Remove: []string{"fw/11", "fw/10"}}},
		{"idle instances on a gone worker do not count", []Instance{pooled("fw/1", "w9"), pooled("fw/2", "w9"), pooled("fw/3", "w1")}, "fw",
			PoolChange{Create: []string{"w2"}}},
		{"a removed chain keeps no pool", idle("gone/1", "gone/2"), "gone",
			PoolChange{Remove: []string{"gone/2", "gone/1"}}},
		{"a removed chain without idle instances", []Instance{att("gone/1", "w1", 0, 3, 300e3)}, "gone", PoolChange{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := &View{Chains: chains(), Instances: tc.ins, Workers: workers("w1", "w2", "w3"), Now: t0}
			if got := cfg.Pool(v, tc.chain); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Pool(%s) = %+v, want %+v", tc.chain, got, tc.want)
			}
		})
	}
	if got := cfg.Pool(&View{Chains: chains()}, "fw"); !reflect.DeepEqual(got, PoolChange{}) {
		t.Fatalf("Pool without workers = %+v, want nothing", got)
	}
}

func Test_idLess(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"fw/9", "fw/10", true},
		{"fw/10", "fw/9", false},
		{"fw/2", "fw/2", false},
		{"fw/10", "nat/1", true},
		{"a/b/3", "a/b/12", true},
		{"fw", "fw/1", true},
		{"fw/x", "fw/1", false},
	}
	for _, tc := range cases {
		if got := idLess(tc.a, tc.b); got != tc.want {
			t.Errorf("idLess(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// Test_Config_Assign_prefers_a_ready_idle_instance: a pooled instance that is still starting
// is attached only when no ready one is left, and the assignment says it is a cold start.
func Test_Config_Assign_prefers_a_ready_idle_instance(t *testing.T) {
	over := att("fw/1", "w1", 0, 8, 800e3)
	over.Overloaded = true
	starting := pooled("fw/2", "w1")
	starting.Ready = false
	got := testCfg().Assign(view(over, starting, pooled("fw/3", "w2")), "fw")
	if got.Instance != "fw/3" || !got.Attach || got.ColdStart {
		t.Fatalf("with a ready idle instance: %+v, want fw/3 attached without a cold start", got)
	}
	got = testCfg().Assign(view(over, starting), "fw")
	if got.Instance != "fw/2" || !got.Attach || !got.ColdStart {
		t.Fatalf("with only a starting one: %+v, want fw/2 attached as a cold start", got)
	}
}

// Test_Config_Overload_queue_off: QueueHigh 0 turns the queue rule off.
func Test_Config_Overload_queue_off(t *testing.T) {
	cfg := testCfg()
	cfg.QueueHigh = 0
	in := att("fw/1", "w1", 0, 1, 100e3)
	in.QueueLen = 5000
	if ch := cfg.Overload(view(in)); len(ch) != 0 {
		t.Fatalf("QueueHigh 0 marked %+v", ch)
	}
}

func Test_Pool_keeps_the_instances_faas_cli_scale_asked_for_and_ignores_draining_ones(t *testing.T) {
	cfg := Keel() // idle pool 1..3
	v := &View{Chains: map[string]Chain{"c": {Name: "c", Threshold: 0.9, MinInstances: 5}},
		Workers: []Worker{{Name: "w", Cores: []int32{1, 2}}},
		Instances: []Instance{
			{ID: "c/0", Chain: "c", Worker: "w", Attached: true, Core: 1, Flows: 3},
			{ID: "c/1", Chain: "c", Worker: "w", Attached: true, Core: 2, Flows: 1, Draining: true},
			{ID: "c/2", Chain: "c", Worker: "w", Core: -1, Ready: true}}}
	// 5 wanted: 1 attached of this version, so 4 idle; 1 is there.
	if pc := cfg.Pool(v, "c"); len(pc.Create) != 3 || len(pc.Remove) != 0 {
		t.Fatalf("pool change %+v, want 3 more idle instances", pc)
	}
	// A new flow never goes to the draining instance, even when it is the only attached one
	// with room.
	v.Instances[0].Overloaded = true
	if a := cfg.Assign(v, "c"); a.Instance != "c/2" || !a.Attach {
		t.Fatalf("assignment %+v, want the idle c/2 attached, not the draining c/1", a)
	}
	// Draining instances are removed by the gateway, not detached.
	v.Instances[1].Flows, v.Instances[1].IdleSince = 0, v.Now.Add(-time.Hour)
	if got := cfg.Reclaim(v); len(got) != 0 {
		t.Fatalf("reclaim %v, want nothing", got)
	}
}

// An idle instance on a worker whose cores are all taken cannot take a flow: the pool is
// made up on a worker with a free core, and the stuck one goes first when the pool is too
// large. Before, the stuck instance counted as the pool, the chain's new flows waited at the
// ingress until a core came free on its worker and then reached an instance all at once,
// overflowing its NIC queue (bench/scenarios/random-12.yaml's t1 lost 28,726 packets).
func Test_Config_Pool_counts_only_idle_instances_that_could_attach(t *testing.T) {
	cfg := testCfg()
	cfg.PoolLow, cfg.PoolHigh = 1, 1
	full := []Instance{att("nat/1", "w1", 0, 8, 850e3), att("nat/2", "w1", 1, 8, 850e3),
		att("nat/3", "w1", 2, 8, 850e3), att("nat/4", "w1", 3, 8, 850e3)}
	v := view(append(full, att("fw/1", "w2", 0, 8, 800e3), pooled("fw/2", "w1"))...)
	if a := cfg.Assign(v, "fw"); a.Instance != "" {
		t.Fatalf("assignment %+v, want none: fw/1 is at its threshold and w1 has no core for fw/2", a)
	}
	want := PoolChange{Create: []string{"w2"}, Remove: []string{"fw/2"}}
	if got := cfg.Pool(v, "fw"); !reflect.DeepEqual(got, want) {
		t.Fatalf("Pool = %+v, want %+v", got, want)
	}
	// Once w1 has a core again, its idle instance is the pool.
	v.Instances[3].Attached, v.Instances[3].Core = false, -1
	if got := cfg.Pool(v, "fw"); !reflect.DeepEqual(got, PoolChange{}) {
		t.Fatalf("Pool with a free core on w1 = %+v, want nothing", got)
	}
	// No worker has a core: nothing is gained by another idle instance.
	v.Instances[3].Attached, v.Instances[3].Core = true, 3
	v.Workers = workers("w1")
	if got := cfg.Pool(v, "fw"); !reflect.DeepEqual(got, PoolChange{}) {
		t.Fatalf("Pool on a full rack = %+v, want nothing", got)
	}
}

// Operating chooses the batch and the threshold together: a longer turn raises the rate a
// core sustains (eq. 1) but holds packets longer, and for a tight SLO the threshold it
// leaves is lower (bench/scenarios/random-12.yaml's t4: eqs. 2–3 give B = 3, where the
// threshold is 0.687 of 779 kpps; at B = 1 it is 0.749 of 718 kpps: as many packets a core
// within the SLO, in shorter turns).
func Test_Config_Operating(t *testing.T) {
	cost := Cost{NFCycles: []float64{440, 1054, 63, 166, 1054}, IOCycles: 47, CopyCycles: 69, HandoffCycles: 2531,
		FreqHz: 2.4e9, BurstMax: 32}
	cfg := testCfg()
	if b := cfg.BatchFor(cost, 32); b != 3 {
		t.Fatalf("eqs. 2–3 give B = %d, want 3", b)
	}
	// A profile whose p99 at each load grows with the batch: B·10 µs + 60 µs·load⁴.
	asked := []int{}
	profile := func(b int) Profile {
		asked = append(asked, b)
		p := Profile{MaxPps: cost.Rate(b, 32), Batch: b}
		for i := 1; i <= 20; i++ {
			l := float64(i) / 20
			p.Points = append(p.Points, Point{Load: l, P99us: float64(b)*10 + 60*l*l*l*l})
		}
		return p
	}
	b, p, thr := cfg.Operating(cost, 50, profile)
	if b != 1 || p.Batch != 1 || thr < 0.9 || !reflect.DeepEqual(asked, []int{3, 1}) {
		t.Fatalf("tight SLO: B = %d (profile at %d), threshold %.3f, profiles at %v; want B = 1 of [3 1]", b, p.Batch, thr, asked)
	}
	asked = nil
	if b, _, thr := cfg.Operating(cost, 500, profile); b != 3 || thr != 0.95 {
		t.Fatalf("loose SLO: B = %d, threshold %.3f; want eqs. 2–3's B = 3 at 0.95", b, thr)
	}
	m := Metron()
	if b, _, _ := m.Operating(cost, 50, profile); b != 1 {
		t.Fatalf("Metron: B = %d, want 1", b)
	}
	if got := (Chain{BatchCap: 2}).CapBatch(5); got != 2 {
		t.Fatalf("CapBatch(5) with cap 2 = %d", got)
	}
	if got := (Chain{}).CapBatch(5); got != 5 {
		t.Fatalf("CapBatch(5) without cap = %d", got)
	}
}

// A queue that one turn takes is no backlog: an instance at 8 bursts per turn holding 200
// packets between turns is not overloaded, one at 1 burst is (mixed.yaml's chain1 runs at
// B = 16: turns of 512 packets).
func Test_Config_Overload_queue_scales_with_the_batch(t *testing.T) {
	cfg := testCfg()
	cfg.QueueHigh = 64
	long := att("fw/1", "w1", 0, 3, 300e3)
	long.Batch, long.QueueLen = 8, 200
	short := att("fw/2", "w1", 1, 3, 300e3)
	short.QueueLen = 200
	got := cfg.Overload(view(long, short))
	if len(got) != 1 || got[0].Instance != "fw/2" || got[0].Reason != ReasonQueue {
		t.Fatalf("overload marks %+v, want fw/2's only (queue 200 ≥ 64; fw/1's turn takes 256)", got)
	}
	long.QueueLen = 256
	if got := cfg.Overload(view(long)); len(got) != 1 || got[0].Reason != ReasonQueue {
		t.Fatalf("overload marks %+v, want fw/1 at a queue of a full turn", got)
	}
	if cfg.QueueHigh = 0; cfg.QueueHighFor(8) != 0 {
		t.Fatal("QueueHigh 0 must keep the queue check off")
	}
}
