// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"math"
	"sort"
)

// Move takes an attached sgroup from one core of its worker to another. coopsched detaches
// it at a turn boundary and attaches it on the new core; packets wait in its NIC queue
// meanwhile, so none is lost.
type Move struct {
	Instance string
	Worker   string
	From, To int32
}

type packItem struct {
	id        string
	core      int32
	load, thr float64
	// Its packets a second, and one full turn of it (B bursts of 32 at its chain's MaxPps):
	// packets and seconds. On a shared core the sgroups take turns (coopsched's round
	// robin), so an sgroup must take in one turn what arrives during the others' turns.
	pps, turnPkts, turnS float64
	// waitS is the most the other sgroups' turns may hold its packets: its SLO less its own
	// full turn, so that one full round of the core fits in the SLO; +Inf without an SLO.
	waitS float64
}

// burstPkts is the packets of a full burst, the unit of an sgroup's batch.
const burstPkts = 32

// Repack places light sgroups together (best-fit decreasing, as Galleon's controller packs
// cores) and splits shared cores that grew past their lowest threshold. Per worker:
//  1. a shared core whose load reached the lowest threshold of its sgroups, or whose turns
//     are longer than one of them can wait (bin.fits), sheds its lightest sgroups to the
//     best-fitting other core (an empty one if none fits);
//  2. if best-fit decreasing over all sgroups, with room PackFrac × the lowest threshold
//     per core, needs fewer cores than are in use, the sgroups move to that packing,
//     matched to the cores they are on so that as few as possible move.
//
// Instances without flows are left where they are (Reclaim gives their core back). An
// overloaded sgroup shares no core: a shared core holding one sheds its other sgroups, and
// it joins no other until Overload clears it.
func (cfg Config) Repack(v *View) []Move {
	if !cfg.Pack {
		return nil
	}
	byWorker := map[string][]packItem{}
	for i := range v.Instances {
		in := &v.Instances[i]
		if !in.Attached || in.Core < 0 || in.Flows == 0 {
			continue
		}
		thr := v.Chains[in.Chain].Threshold
		if in.Overloaded {
			// The loads undercount a core whose sgroups' turns are small (each turn pays
			// its handoffs at a fill below the full bursts MaxPps assumes), so a shared
			// core can saturate under its lowest threshold: what Overload saw (a NIC
			// queue, drops, a load) counts, and the sgroup shares with nothing.
			thr = 0
		}
		byWorker[in.Worker] = append(byWorker[in.Worker],
			newPackItem(in.ID, in.Core, v.Load(in), thr, EstRate(in, perFlowPps(v, in.Chain)), in.Batch, v.Chains[in.Chain]))
	}
	var out []Move
	for _, w := range v.Workers {
		items := byWorker[w.Name]
		if len(items) == 0 {
			continue
		}
		busy := map[int32]bool{}
		for i := range v.Instances {
			in := &v.Instances[i]
			if in.Worker == w.Name && in.Attached && in.Core >= 0 {
				busy[in.Core] = true
			}
		}
		out = append(out, cfg.packWorker(w, items, busy)...)
	}
	return out
}

// newPackItem is an sgroup of chain ch at batch bursts per turn, its load and packets a second.
func newPackItem(id string, core int32, load, thr, pps float64, batch int, ch Chain) packItem {
	it := packItem{id: id, core: core, load: load, thr: thr, pps: pps, turnPkts: float64(max(1, batch) * burstPkts),
		waitS: math.Inf(1)}
	if ch.MaxPps > 0 {
		it.turnS = it.turnPkts / ch.MaxPps
	}
	if ch.SLOus > 0 {
		it.waitS = ch.SLOus/1e6 - it.turnS
	}
	return it
}

type bin struct {
	core      int32
	load, thr float64
	ids       []int
	turnS     float64 // the full turns of its sgroups, summed: a round of the core at most
	tol       float64 // the most turn time more sgroups may add before one of these starves
}

func newBin(core int32) *bin { return &bin{core: core, thr: math.Inf(1), tol: math.Inf(1)} }

// fits tells whether it can join b within frac × their lowest threshold; a sgroup whose
// threshold is 0 (its chain was removed, or no load meets its SLO) shares with nothing.
// The round robin makes each sgroup wait for the others' turns, so the others' full turns
// must fit in what each one can wait (tolerance): it must take in frac of one full turn what
// arrives while every other takes a full turn (an sgroup of a light per-packet chain at a
// small batch beside one whose turns are long is starved at a load far under its threshold:
// bench/scenarios/random-11.yaml, issue 33), and the wait must leave its SLO half of its
// bound (a 50 µs chain beside 90 µs turns missed its SLO at a load it meets alone:
// random-12.yaml's t4, issue 33).
func (b *bin) fits(it packItem, frac float64) bool {
	room := frac * math.Min(b.thr, it.thr)
	return room > 0 && b.load+it.load <= room && it.turnS <= b.tol && b.turnS <= it.tolerance(frac)
}

// tolerance is the most turn time the other sgroups on its core may take in one round.
func (it packItem) tolerance(frac float64) float64 {
	t := it.waitS
	if it.pps > 0 {
		t = math.Min(t, frac*it.turnPkts/it.pps)
	}
	return t
}

func (b *bin) add(i int, it packItem, frac float64) {
	b.ids = append(b.ids, i)
	b.load += it.load
	b.thr = math.Min(b.thr, it.thr)
	b.tol = math.Min(b.tol-it.turnS, it.tolerance(frac)-b.turnS)
	b.turnS += it.turnS
}

func (cfg Config) packWorker(w Worker, items []packItem, busy map[int32]bool) []Move {
	sort.Slice(items, func(i, j int) bool {
		if items[i].load != items[j].load {
			return items[i].load > items[j].load
		}
		return items[i].id < items[j].id
	})
	// Current use of each core.
	cur := map[int32]*bin{}
	for i, it := range items {
		b := cur[it.core]
		if b == nil {
			b = newBin(it.core)
			cur[it.core] = b
		}
		b.add(i, it, cfg.PackFrac)
	}
	// Best-fit decreasing into bins with room PackFrac × the lowest threshold.
	var bins []*bin
	for i, it := range items {
		var best *bin
		for _, b := range bins {
			if b.fits(it, cfg.PackFrac) && (best == nil || b.load > best.load) {
				best = b
			}
		}
		if best == nil {
			best = newBin(-1)
			bins = append(bins, best)
		}
		best.add(i, it, cfg.PackFrac)
	}
	var moves []Move
	if len(bins) < len(cur) {
		// Give each bin the core that already holds most of its load.
		taken := map[int32]bool{}
		sort.Slice(bins, func(i, j int) bool { return bins[i].load > bins[j].load })
		for _, b := range bins {
			share := map[int32]float64{}
			for _, i := range b.ids {
				share[items[i].core] += items[i].load + 1e-9
			}
			bestCore, bestShare := int32(-1), -1.0
			for c, s := range share {
				if !taken[c] && (s > bestShare || (s == bestShare && c < bestCore)) {
					bestCore, bestShare = c, s
				}
			}
			if bestCore < 0 {
				for _, c := range w.Cores {
					if !taken[c] && (!busy[c] || cur[c] != nil) {
						bestCore = c
						break
					}
				}
			}
			if bestCore < 0 {
				return nil // cannot happen: fewer bins than cores in use
			}
			taken[bestCore] = true
			b.core = bestCore
		}
		for _, b := range bins {
			for _, i := range b.ids {
				if items[i].core != b.core {
					moves = append(moves, Move{items[i].id, w.Name, items[i].core, b.core})
				}
			}
		}
		sort.Slice(moves, func(i, j int) bool { return moves[i].Instance < moves[j].Instance })
		return moves
	}
	// Split shared cores that reached their lowest threshold.
	cores := make([]int32, 0, len(cur))
	for c := range cur {
		cores = append(cores, c)
	}
	sort.Slice(cores, func(i, j int) bool { return cores[i] < cores[j] })
	for _, c := range cores {
		b := cur[c]
		for len(b.ids) > 1 && (b.load >= b.thr || b.tol < 0) {
			light := b.ids[len(b.ids)-1] // items are sorted by decreasing load
			it := items[light]
			var to *bin
			for _, oc := range cores {
				o := cur[oc]
				if o != b && o.fits(it, cfg.PackFrac) && (to == nil || o.load > to.load) {
					to = o
				}
			}
			if to == nil {
				for _, fc := range w.Cores {
					if !busy[fc] && cur[fc] == nil {
						to = newBin(fc)
						cur[fc] = to
						busy[fc] = true
						cores = append(cores, fc) // later sheds may join it
						break
					}
				}
			}
			if to == nil {
				break // no room anywhere: the sgroups stay overloaded and take no new flows
			}
			ids := b.ids[:len(b.ids)-1]
			// Sum again rather than subtract, so that the core's load is the one Overload sums.
			*b = *newBin(c)
			for _, i := range ids {
				b.add(i, items[i], cfg.PackFrac)
			}
			to.add(light, it, cfg.PackFrac)
			moves = append(moves, Move{it.id, w.Name, c, to.core})
		}
	}
	return moves
}
