// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func Test_Config_Repack(t *testing.T) {
	noPack := testCfg()
	noPack.Pack = false
	idle := att("fw/9", "w1", 1, 0, 0) // attached, its flows ended
	cases := []struct {
		name string
		cfg  Config
		ins  []Instance
		want []Move
	}{
		// Room per core: 0.8 × 0.8 = 0.64 for fw, 0.8 × 0.9 = 0.72 for nat.
		{"two light sgroups on two cores share one", testCfg(),
			[]Instance{att("fw/1", "w1", 0, 3, 300e3), att("fw/2", "w1", 1, 2, 200e3)},
			[]Move{{"fw/2", "w1", 1, 0}}},
		{"the sgroup holding more load stays", testCfg(),
			[]Instance{att("fw/1", "w1", 2, 2, 200e3), att("fw/2", "w1", 1, 3, 300e3)},
			[]Move{{"fw/1", "w1", 2, 1}}},
		{"three cores into one", testCfg(),
			[]Instance{att("fw/1", "w1", 3, 1, 100e3), att("nat/1", "w1", 1, 3, 300e3), att("fw/2", "w1", 0, 2, 200e3)},
			[]Move{{"fw/1", "w1", 3, 1}, {"fw/2", "w1", 0, 1}}},
		{"packing would not save a core", testCfg(),
			[]Instance{att("fw/1", "w1", 0, 4, 400e3), att("fw/2", "w1", 1, 3, 300e3)}, nil},
		{"the lowest threshold bounds the room", testCfg(),
			[]Instance{att("fw/1", "w1", 0, 3, 300e3), att("nat/1", "w1", 1, 4, 400e3)}, nil},
		{"no packing", noPack,
			[]Instance{att("fw/1", "w1", 0, 3, 300e3), att("fw/2", "w1", 1, 2, 200e3)}, nil},
		{"instances without flows are not moved", testCfg(),
			[]Instance{att("fw/1", "w1", 0, 3, 300e3), idle}, nil},
		{"a core held by an instance without flows is not a target", testCfg(),
			[]Instance{att("fw/1", "w1", 0, 2, 200e3), idle, att("fw/2", "w1", 2, 3, 300e3)},
			[]Move{{"fw/1", "w1", 0, 2}}},
		{"workers are packed apart", testCfg(),
			[]Instance{att("fw/1", "w1", 0, 3, 300e3), att("fw/2", "w2", 1, 2, 200e3)}, nil},
		{"a gone worker's sgroups stay", testCfg(),
			[]Instance{att("fw/1", "w9", 0, 3, 300e3), att("fw/2", "w9", 1, 2, 200e3)}, nil},
		// Core 0 at 0.85 ≥ 0.8: its lightest sgroup goes to a free core.
		{"shared core above its lowest threshold sheds its lightest sgroup", testCfg(),
			[]Instance{att("fw/1", "w1", 0, 5, 500e3), att("fw/2", "w1", 0, 2, 200e3), att("fw/3", "w1", 0, 1, 150e3)},
			[]Move{{"fw/3", "w1", 0, 1}}},
		{"shed onto the fullest core it fits", testCfg(),
			[]Instance{att("fw/1", "w1", 0, 5, 500e3), att("fw/2", "w1", 0, 2, 200e3), att("fw/3", "w1", 0, 1, 150e3),
				att("nat/1", "w1", 2, 3, 300e3), att("nat/2", "w1", 3, 6, 600e3)},
			[]Move{{"fw/3", "w1", 0, 2}}},
		// Core 0 at 1.2 ≥ 0.9 sheds 0.3 then 0.4: they fit together in 0.72.
		{"sheds share the core they open", testCfg(),
			[]Instance{att("nat/1", "w1", 0, 5, 500e3), att("nat/2", "w1", 0, 4, 400e3), att("nat/3", "w1", 0, 3, 300e3)},
			[]Move{{"nat/3", "w1", 0, 1}, {"nat/2", "w1", 0, 1}}},
		{"no free core: a shared core stays", testCfg(),
			[]Instance{att("fw/1", "w1", 0, 5, 500e3), att("fw/2", "w1", 0, 4, 400e3), att("fw/3", "w1", 1, 7, 700e3),
				att("fw/4", "w1", 2, 7, 700e3), att("fw/5", "w1", 3, 7, 700e3)}, nil},
		// A removed chain's load is unknown: it is moved off a shared core and never packed.
		{"a removed chain's sgroup leaves a shared core", testCfg(),
			[]Instance{att("fw/1", "w1", 0, 3, 300e3), att("gone/1", "w1", 0, 5, 500e3)},
			[]Move{{"gone/1", "w1", 0, 1}}},
		// Core 0 at 0.5 is under 0.8, but fw/1's NIC queue says it is saturated (mixed.yaml:
		// seven light sgroups' small turns paid more handoffs than the loads count).
		{"an overloaded sgroup sheds the others from its shared core", testCfg(),
			[]Instance{queued(att("fw/1", "w1", 0, 3, 300e3)), att("fw/2", "w1", 0, 1, 100e3), att("nat/1", "w1", 0, 1, 100e3)},
			[]Move{{"nat/1", "w1", 0, 1}, {"fw/2", "w1", 0, 1}}},
		{"an overloaded sgroup is not packed", testCfg(),
			[]Instance{queued(att("fw/1", "w1", 0, 3, 300e3)), att("fw/2", "w1", 1, 2, 200e3)}, nil},
		{"a removed chain's sgroups are not packed together", testCfg(),
			[]Instance{att("gone/1", "w1", 0, 5, 500e3), att("gone/2", "w1", 1, 5, 500e3)}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.cfg.Repack(view(tc.ins...))
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Repack = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// queued is in, marked overloaded by its NIC queue.
func queued(in Instance) Instance {
	in.Overloaded, in.QueueLen = true, 64
	return in
}

// Test_Config_Repack_then_Overload: after the moves Repack returns, no core is shared above
// its lowest threshold, and packing again moves nothing.
func Test_Config_Repack_then_Overload(t *testing.T) {
	v := view(att("nat/1", "w1", 0, 5, 500e3), att("nat/2", "w1", 0, 4, 400e3), att("nat/3", "w1", 0, 3, 300e3),
		att("fw/1", "w2", 0, 1, 100e3), att("fw/2", "w2", 1, 1, 150e3), att("fw/3", "w2", 2, 1, 200e3))
	cfg := testCfg()
	moves := cfg.Repack(v)
	if len(moves) == 0 {
		t.Fatal("Repack moved nothing")
	}
	for _, mv := range moves {
		for i := range v.Instances {
			if in := &v.Instances[i]; in.ID == mv.Instance {
				if in.Worker != mv.Worker || in.Core != mv.From {
					t.Fatalf("move %+v does not start where %s is (%s core %d)", mv, in.ID, in.Worker, in.Core)
				}
				in.Core = mv.To
			}
		}
	}
	if ch := cfg.Overload(v); len(ch) != 0 {
		t.Fatalf("after packing Overload = %+v, want none", ch)
	}
	if again := cfg.Repack(v); len(again) != 0 {
		t.Fatalf("packing again moved %+v", again)
	}
	used := map[coreKey]bool{}
	for _, in := range v.Instances {
		used[coreKey{in.Worker, in.Core}] = true
	}
	// w1: 0.5 | 0.4 + 0.3; w2: 0.45 on one core.
	if len(used) != 3 {
		t.Fatalf("%d cores in use after packing, want 3", len(used))
	}
}

// Test_Config_Repack_random packs seeded random workers until no move is left and checks
// what any packing must keep: moves start where the sgroup is, stay on its worker's cores,
// never land on a core held only by sgroups without flows, converge, and leave no shared
// core at its lowest threshold while the worker still has a free core.
func Test_Config_Repack_random(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cfg := testCfg()
	for round := range 300 {
		ws := []Worker{{Name: "w1", Cores: []int32{0, 1, 2, 3, 4, 5}}, {Name: "w2", Cores: []int32{2, 3, 4, 5}}}
		v := &View{Chains: chains(), Workers: ws, Now: t0}
		for i := range 2 + rng.IntN(9) {
			w := ws[rng.IntN(2)]
			chain := []string{"fw", "nat"}[rng.IntN(2)]
			flows := rng.IntN(4)
			v.Instances = append(v.Instances, att(fmt.Sprintf("%s/%d", chain, i), w.Name, w.Cores[rng.IntN(len(w.Cores))],
				flows, float64(flows)*(20e3+rng.Float64()*150e3)))
		}
		converged := false
		for pass := 0; pass < 5 && !converged; pass++ {
			moves := cfg.Repack(v)
			converged = len(moves) == 0
			flowless := map[coreKey]bool{}
			withFlows := map[coreKey]bool{}
			for _, in := range v.Instances {
				if in.Flows == 0 {
					flowless[coreKey{in.Worker, in.Core}] = true
				} else {
					withFlows[coreKey{in.Worker, in.Core}] = true
				}
			}
			seen := map[string]bool{}
			for _, mv := range moves {
				if seen[mv.Instance] {
					t.Fatalf("round %d: %s moved twice in one pass: %+v", round, mv.Instance, moves)
				}
				seen[mv.Instance] = true
				in := find(v, mv.Instance)
				if in == nil || in.Worker != mv.Worker || in.Core != mv.From || mv.From == mv.To || in.Flows == 0 {
					t.Fatalf("round %d: bad move %+v of %+v", round, mv, in)
				}
				if !slices.Contains(v.workerUp()[mv.Worker].Cores, mv.To) {
					t.Fatalf("round %d: move %+v to a core the worker does not manage", round, mv)
				}
				if k := (coreKey{mv.Worker, mv.To}); flowless[k] && !withFlows[k] {
					t.Fatalf("round %d: move %+v onto a core held by a sgroup without flows", round, mv)
				}
			}
			for _, mv := range moves {
				find(v, mv.Instance).Core = mv.To
			}
		}
		if !converged {
			t.Fatalf("round %d: Repack still moving after 5 passes: %+v", round, v.Instances)
		}
		use := v.cores()
		for _, w := range ws {
			free := false
			for _, c := range w.Cores {
				free = free || use[coreKey{w.Name, c}] == nil
			}
			for k, u := range use {
				if k.worker == w.Name && u.members > 1 && u.load >= u.minThr && free {
					t.Fatalf("round %d: core %v shared at %.3f ≥ %.3f with a free core left: %+v", round, k, u.load, u.minThr, v.Instances)
				}
			}
		}
	}
}

func find(v *View, id string) *Instance {
	for i := range v.Instances {
		if v.Instances[i].ID == id {
			return &v.Instances[i]
		}
	}
	return nil
}

// Test_Config_Repack_keepsAShortTurnFromALongOne is bench/scenarios/random-11.yaml's loss
// (issue 33): a one-NF chain (macswap, batch 1, 32 Mpps a core) packed beside a heavy chain
// (batch 7 at 2.4 Mpps a core: turns of 93 µs) gets 32 packets a round while 93 arrive, at
// loads of 0.03 and 0.5; keel lost 39 M packets there while Metron's runtime with keel's
// thresholds lost none. Two such light sgroups still share a core.
func Test_Config_Repack_keepsAShortTurnFromALongOne(t *testing.T) {
	batch := func(in Instance, b int) Instance { in.Batch = b; return in }
	v := view(batch(att("dec/1", "w1", 0, 50, 1.2e6), 7), att("mac/1", "w1", 1, 50, 1e6))
	v.Chains["dec"] = Chain{Name: "dec", MaxPps: 2.4e6, Threshold: 0.9}
	v.Chains["mac"] = Chain{Name: "mac", MaxPps: 32e6, Threshold: 0.95}
	if got := testCfg().Repack(v); got != nil {
		t.Fatalf("Repack = %+v: the short-turn sgroup starves beside the long one", got)
	}
	v = view(att("mac/1", "w1", 0, 50, 1e6), att("mac/2", "w1", 1, 50, 1e6), batch(att("dec/1", "w1", 2, 50, 1.2e6), 7))
	v.Chains["dec"] = Chain{Name: "dec", MaxPps: 2.4e6, Threshold: 0.9}
	v.Chains["mac"] = Chain{Name: "mac", MaxPps: 32e6, Threshold: 0.95}
	if got, want := testCfg().Repack(v), []Move{{"mac/2", "w1", 1, 0}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Repack = %+v, want %+v", got, want)
	}
}

// Test_Config_Repack_keepsATightSLOFromLongTurns is bench/scenarios/random-12.yaml's SLO
// miss (issue 33): a 50 µs chain (t4) packed beside sgroups whose full turns take 90 µs and
// more had a p99 of 52.7 µs at loads where alone it has 41.5. One full round of the core
// (its own full turn and the others') must fit in its SLO; a core that already holds more is
// split.
func Test_Config_Repack_keepsATightSLOFromLongTurns(t *testing.T) {
	batch := func(in Instance, b int) Instance { in.Batch = b; return in }
	chains := func(v *View) *View {
		v.Chains["tight"] = Chain{Name: "tight", SLOus: 50, MaxPps: 1.4e6, Threshold: 0.75}  // 23 µs turns
		v.Chains["long"] = Chain{Name: "long", SLOus: 500, MaxPps: 900e3, Threshold: 0.95}   // B = 2: 71 µs turns
		v.Chains["short"] = Chain{Name: "short", SLOus: 500, MaxPps: 6.4e6, Threshold: 0.95} // B = 1: 5 µs turns
		return v
	}
	v := chains(view(att("tight/1", "w1", 0, 10, 100e3), batch(att("long/1", "w1", 1, 10, 100e3), 2)))
	if got := testCfg().Repack(v); got != nil {
		t.Fatalf("Repack = %+v: the 50 µs chain would wait for 71 µs turns", got)
	}
	// Every core in use: a new instance of tight is not packed beside long's turns, but is
	// beside short's.
	v = chains(view(batch(att("long/1", "w1", 0, 2, 20e3), 2), att("short/1", "w1", 1, 5, 300e3),
		att("fw/1", "w1", 2, 7, 700e3), att("fw/2", "w1", 3, 7, 700e3), pooled("tight/1", "w1")))
	v.Workers = workers("w1")
	if a := testCfg().Assign(v, "tight"); a.Instance != "tight/1" || !a.Attach || a.Core != 1 {
		t.Fatalf("assignment %+v, want tight/1 attached on core 1 beside short's 5 µs turns (core 0 is less loaded)", a)
	}
	v = chains(view(att("tight/1", "w1", 0, 10, 100e3), att("short/1", "w1", 1, 10, 100e3)))
	if got, want := testCfg().Repack(v), []Move{{"short/1", "w1", 1, 0}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Repack = %+v, want %+v: 23 + 5 µs fit in 50 µs", got, want)
	}
	// Packed at attach (every core was in use), then a core came free: split.
	v = chains(view(att("tight/1", "w1", 0, 10, 100e3), batch(att("long/1", "w1", 0, 5, 50e3), 2)))
	if got, want := testCfg().Repack(v), []Move{{"long/1", "w1", 0, 1}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Repack = %+v, want %+v", got, want)
	}
}
