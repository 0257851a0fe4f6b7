// SPDX-License-Identifier: Apache-2.0

// Package policy is keel's controller: which instance a new flow goes to, when an instance
// is overloaded, how many idle instances each chain keeps, when an instance gives its core
// back, which sgroups share a core and at what batch each runs (Galleon §4.3, §5). It does no
// I/O: the inputs are a View of chains, instances and workers, the outputs are decisions.
// keel-gateway applies them to Redis and the agents; keel-sim applies them to simulated
// workers. Both call the same functions.
package policy

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Config is one controller policy. Keel() is keel's; Metron() is the baseline of Galleon
// §7.2.2; the ablations change one field.
type Config struct {
	Name string
	// SLOThresholds: each chain's overload threshold is the highest profiled per-core load
	// whose p99 meets its SLO (Galleon §5.2). Otherwise every chain uses FixedThreshold.
	SLOThresholds  bool
	FixedThreshold float64
	// ClearFrac: an overloaded instance takes new flows again once its load is below
	// ClearFrac × its threshold (hysteresis against flapping).
	ClearFrac float64
	// QueueHigh: a NIC queue this long marks an instance overloaded whatever its rate (0: off),
	// or a full turn of its batch if that is longer (QueueHighFor).
	QueueHigh int
	// PoolLow and PoolHigh keep each chain's idle (pooled, detached) instances within
	// [PoolLow, PoolHigh] (Listing 1's scale-out and scale-in thresholds).
	PoolLow, PoolHigh int
	// Pack lets light sgroups share a core while their loads sum to at most PackFrac × the
	// lowest threshold among them; a shared core above the lowest threshold is split again.
	Pack     bool
	PackFrac float64
	// AdaptiveBatch picks bursts per turn by Galleon eqs. 1–3 with handoff share 1−BatchP;
	// otherwise every instance runs at FixedBatch.
	AdaptiveBatch bool
	BatchP        float64
	FixedBatch    int
	MaxBatch      int
	// Isolation: chains run as isolated processes (copy into the chain buffer, handoffs);
	// false runs each chain to completion in one thread, as Metron does.
	Isolation bool
	// ReclaimAfter: an attached instance whose flows have all ended gives its core back
	// after this long without a new flow.
	ReclaimAfter time.Duration
	// Moves: when and how flows move between instances with their state (moves.go).
	Moves MoveConfig
}

// Keel is keel's policy: SLO thresholds, packing, adaptive batch, isolation.
func Keel() Config {
	return Config{Name: "keel", SLOThresholds: true, FixedThreshold: 0.9, ClearFrac: 0.9, QueueHigh: 64,
		PoolLow: 1, PoolHigh: 3, Pack: true, PackFrac: 0.8, AdaptiveBatch: true, BatchP: 0.95,
		FixedBatch: 1, MaxBatch: 64, Isolation: true, ReclaimAfter: time.Second, Moves: DefaultMoves()}
}

// Metron is the baseline of Galleon §7.2.2: chains run to completion without isolation,
// each core loaded up to the chain's max rate, scale-out only on queue build-up or loss,
// no SLO awareness.
func Metron() Config {
	c := Keel()
	c.Name, c.SLOThresholds, c.FixedThreshold = "metron", false, 1.0
	c.AdaptiveBatch, c.FixedBatch, c.Isolation = false, 1, false
	return c
}

// Chain is what the policy knows of one chain.
type Chain struct {
	Name      string
	SLOus     float64 // p99 bound, 0: none
	MaxPps    float64 // one core's rate for the chain: load 1.0
	Threshold float64 // per-core load at which its instances stop taking new flows
	// MaxFlows caps the flows of one instance (0: no cap): OpenFaaS's capacity target
	// (com.openfaas.scale.target with com.openfaas.scale.type=capacity).
	MaxFlows int
	// MinInstances is how many instances (attached and idle) the chain keeps deployed at
	// least, as faas-cli scale set it: the idle pool is kept large enough to make it up.
	MinInstances int
	// ServerBudgetUs is the SLO's share for the server's sojourn (the rest is the network's:
	// controller.SLOLoop); 0: no measured-latency bound.
	ServerBudgetUs float64
	// BatchCap is the most bursts per turn its instances run at (0: the policy's MaxBatch):
	// the batch Operating chose for its SLO.
	BatchCap int
}

// Instance is one chain instance (an sgroup) as the controller sees it.
type Instance struct {
	ID, Chain, Worker string
	Attached          bool
	Core              int32 // -1 when detached
	Ready             bool  // the agent reports it running (a pooled instance can attach without a cold start)
	Flows             int   // flows assigned now
	FlowsAtStats      int   // flows assigned when RatePps was measured
	RatePps           float64
	QueueLen          int
	NewDrops          uint64  // drops in the latest stats interval
	SojournP99us      float64 // measured server sojourn p99 over the last window (0: none)
	Overloaded        bool
	OverloadReason    Reason // why it is marked (Overload's Change.Reason); "" when not
	Batch             int
	IdleSince         time.Time // attached and without flows since then (zero: it has flows)
	// Settling: flows were just moved onto it (Config.PlanMoves): its NIC queue holds their
	// packets held during the move, released at once, so a long queue is no overload.
	Settling bool
	// Draining: a redeploy replaced the chain's version; the instance keeps its flows, takes
	// no new ones and is removed when they end (not detached back into the pool).
	Draining bool
	// Emptying: the move policy is emptying it over several plans (MoveHistory.Mark): it
	// takes no new flows, and its core goes back once its last flow has moved.
	Emptying bool
}

// Worker is a worker and the cores coopsched manages on it.
type Worker struct {
	Name  string
	Cores []int32
}

// View is the state a decision reads. Instances of workers that are not in Workers are
// ignored (the worker is gone).
type View struct {
	Chains    map[string]Chain
	Instances []Instance
	Workers   []Worker
	Now       time.Time
}

// ThresholdFor is the overload threshold of a chain with the given profile and SLO.
func (cfg Config) ThresholdFor(p *Profile, sloUs float64) float64 {
	if !cfg.SLOThresholds || p == nil {
		return cfg.FixedThreshold
	}
	return p.Threshold(sloUs)
}

// BatchFor is the bursts per turn an instance of a chain with this cost runs at; fill is the
// mean packets per burst seen (the burst size when unknown).
func (cfg Config) BatchFor(c Cost, fill float64) int {
	if !cfg.AdaptiveBatch {
		return max(1, cfg.FixedBatch)
	}
	return c.Batch(cfg.BatchP, fill, max(1, cfg.MaxBatch))
}

// CapBatch is b within the chain's BatchCap.
func (ch Chain) CapBatch(b int) int {
	if ch.BatchCap > 0 {
		return max(1, min(b, ch.BatchCap))
	}
	return b
}

// Operating is the batch a chain runs at, its latency profile there and its threshold.
// Galleon's eqs. 1–3 give the fewest bursts per turn that keep the handoffs within 1−p of
// the core (BatchFor), but a longer turn also holds every packet of the batch longer, and
// §4.3 notes that a chain with a low latency SLO cannot have a large batch. The threshold
// of §5.2 is taken from the profile at the batch the chain runs at, so the batch and the
// threshold are chosen together: among BatchFor's B and its halvings down to 1, the one whose profile gives
// the most packets per second a core serves within the SLO (threshold × eq. 1's rate);
// a batch within 0.5 % of the best that is smaller wins (shorter turns: lower latency for
// the chain and for sgroups sharing its core). profile(B) is the chain's profile at B.
// Without SLO thresholds or adaptive batch it is BatchFor's B and its profile.
func (cfg Config) Operating(c Cost, sloUs float64, profile func(batch int) Profile) (int, Profile, float64) {
	top := cfg.BatchFor(c, float64(c.burstMax()))
	p := profile(top)
	thr := cfg.ThresholdFor(&p, sloUs)
	if !cfg.SLOThresholds || !cfg.AdaptiveBatch || !c.Isolated() {
		return top, p, thr
	}
	type cand struct {
		b        int
		p        Profile
		thr, cap float64
	}
	cands := []cand{{top, p, thr, thr * p.MaxPps}}
	best := cands[0].cap
	for b := top / 2; b >= 1; b /= 2 {
		q := profile(b)
		t := cfg.ThresholdFor(&q, sloUs)
		cands = append(cands, cand{b, q, t, t * q.MaxPps})
		best = math.Max(best, t*q.MaxPps)
	}
	pick := cands[0]
	for _, x := range cands {
		if x.cap >= 0.995*best && (pick.cap < 0.995*best || x.b < pick.b) {
			pick = x
		}
	}
	return pick.b, pick.p, pick.thr
}

// perFlowPps estimates one flow's packet rate in a chain from the instances of live workers
// that report a rate with flows.
func perFlowPps(v *View, chain string) float64 {
	rate, flows := 0.0, 0
	up := v.workerUp()
	for i := range v.Instances {
		in := &v.Instances[i]
		if in.Chain == chain && in.Attached && in.FlowsAtStats > 0 && up[in.Worker] != nil {
			rate += in.RatePps
			flows += in.FlowsAtStats
		}
	}
	if flows == 0 {
		return 0
	}
	return rate / float64(flows)
}

// EstRate is an instance's packet rate now: the measured rate scaled to the flows assigned
// since it was measured (stats lag behind a burst of new flows), or per flow of the chain's
// average when it had no flows then.
func EstRate(in *Instance, perFlow float64) float64 {
	if in.FlowsAtStats > 0 {
		return in.RatePps * float64(in.Flows) / float64(in.FlowsAtStats)
	}
	return math.Max(in.RatePps, perFlow*float64(in.Flows))
}

// Load is an instance's estimated load: its rate as a fraction of one core's rate for its
// chain.
func (v *View) Load(in *Instance) float64 {
	ch, ok := v.Chains[in.Chain]
	if !ok || ch.MaxPps <= 0 {
		return 0
	}
	return EstRate(in, perFlowPps(v, in.Chain)) / ch.MaxPps
}

type coreKey struct {
	worker string
	core   int32
}

// coreUse is the load on each attached core and the lowest threshold among its sgroups.
type coreUse struct {
	load, minThr float64
	members      int
}

func (v *View) workerUp() map[string]*Worker {
	up := map[string]*Worker{}
	for i := range v.Workers {
		up[v.Workers[i].Name] = &v.Workers[i]
	}
	return up
}

func (v *View) cores() map[coreKey]*coreUse {
	use := map[coreKey]*coreUse{}
	up := v.workerUp()
	for i := range v.Instances {
		in := &v.Instances[i]
		if !in.Attached || in.Core < 0 || up[in.Worker] == nil {
			continue
		}
		k := coreKey{in.Worker, in.Core}
		u := use[k]
		if u == nil {
			u = &coreUse{minThr: math.Inf(1)}
			use[k] = u
		}
		u.load += v.Load(in)
		u.minThr = math.Min(u.minThr, v.Chains[in.Chain].Threshold)
		u.members++
	}
	return use
}

// Assignment is where a new flow goes.
type Assignment struct {
	Instance string // "" when the flow cannot be served (Reason says why)
	Attach   bool   // the instance leaves the pool: attach it on Core
	Core     int32
	// ColdStart: no idle instance was ready, so the flow waits for a starting one (the pool
	// was too small for the arrival of new instances).
	ColdStart bool
	Reason    string
}

// Assign is Galleon's Listing 1 (handle_flows_at_ingress): the flow goes to the most loaded
// attached instance of its chain that is not overloaded and stays under its threshold with
// one more flow (on a shared core, the core stays under its lowest threshold too); else an
// idle instance from the pool is attached (a ready one before one that is still starting),
// on the least loaded worker, to the core PickCore chooses. Ties go to more flows, then the
// lower ID (CHAIN/N by N as a number, as Pool orders them).
func (cfg Config) Assign(v *View, chain string) Assignment {
	ch, ok := v.Chains[chain]
	if !ok {
		return Assignment{Reason: "chain " + chain + " is not deployed"}
	}
	up := v.workerUp()
	use := v.cores()
	perFlow := perFlowPps(v, chain)
	var best, capped *Instance
	bestLoad := 0.0
	for i := range v.Instances {
		in := &v.Instances[i]
		if in.Chain != chain || !in.Attached || in.Overloaded || in.Draining || in.Emptying || up[in.Worker] == nil {
			continue
		}
		if ch.MaxFlows > 0 && in.Flows >= ch.MaxFlows {
			if load := v.Load(in); ch.MaxPps > 0 && load+perFlow/ch.MaxPps <= ch.Threshold &&
				(capped == nil || in.Flows < capped.Flows || in.Flows == capped.Flows && idLess(in.ID, capped.ID)) {
				capped = in // only its flow cap turns it away
			}
			continue
		}
		load := v.Load(in)
		if ch.MaxPps > 0 && load+perFlow/ch.MaxPps > ch.Threshold && in.Flows > 0 {
			continue // one more flow would take it over its threshold
		}
		if u := use[coreKey{in.Worker, in.Core}]; ch.MaxPps > 0 && u != nil && u.members > 1 &&
			u.load+perFlow/ch.MaxPps > u.minThr {
			continue // one more flow would take its shared core over the core's lowest threshold
		}
		if best == nil || load > bestLoad || (load == bestLoad && (in.Flows > best.Flows ||
			(in.Flows == best.Flows && idLess(in.ID, best.ID)))) {
			best, bestLoad = in, load
		}
	}
	if best != nil {
		return Assignment{Instance: best.ID, Core: best.Core}
	}
	// pick_idle_chain_from_lowest_load_worker
	wload := v.workerLoads()
	var idle *Instance
	for i := range v.Instances {
		in := &v.Instances[i]
		if in.Chain != chain || in.Attached || in.Draining || up[in.Worker] == nil {
			continue
		}
		if v.freeCore(cfg, up[in.Worker], ch) < 0 {
			continue
		}
		// A ready instance first; then the least loaded worker; then the lower ID.
		if idle == nil || (in.Ready && !idle.Ready) || (in.Ready == idle.Ready && (wload[in.Worker] < wload[idle.Worker] ||
			(wload[in.Worker] == wload[idle.Worker] && idLess(in.ID, idle.ID)))) {
			idle = in
		}
	}
	if idle == nil && capped != nil {
		// The flow cap is a scaling target (OpenFaaS's capacity), not a limit of the
		// instance: with no core for another instance, the instance with the fewest flows that
		// has room under its threshold takes the flow rather than the ingress dropping it
		// (make demo on this one-core machine: chain2's cap of 20 flows, no core for chain2/1
		// beside chain3 under packing's rules, 15 of 44 flows refused, 4,816 packets lost).
		return Assignment{Instance: capped.ID, Core: capped.Core, Reason: fmt.Sprintf(
			"chain %s: over its cap of %d flows on %s, as no idle instance has a free core", chain, ch.MaxFlows, capped.ID)}
	}
	if idle == nil {
		return Assignment{Reason: fmt.Sprintf("chain %s: every attached instance is at its threshold (%.2f of a core) and no idle instance has a free core",
			chain, ch.Threshold)}
	}
	return Assignment{Instance: idle.ID, Attach: true, Core: v.freeCore(cfg, up[idle.Worker], ch), ColdStart: !idle.Ready}
}

// workerLoads is each worker's attached load per managed core.
func (v *View) workerLoads() map[string]float64 {
	out := map[string]float64{}
	for k, u := range v.cores() {
		out[k.worker] += u.load
	}
	for _, w := range v.Workers {
		if len(w.Cores) > 0 {
			out[w.Name] /= float64(len(w.Cores))
		}
	}
	return out
}

// freeCore is the core a newly attached instance of chain ch gets on worker w (Listing 1's
// pick_idle_core): the lowest core no sgroup uses; with packing, when every core is in use,
// the least loaded core whose load is under PackFrac × the lowest threshold of its sgroups
// and ch's, and where the new sgroup and those on the core can wait for each other's turns
// as Repack requires (bin.fits; the new one at its chain's batch); -1 if none.
func (v *View) freeCore(cfg Config, w *Worker, ch Chain) int32 {
	thr := ch.Threshold
	use := v.cores()
	var it packItem
	bins := map[int32]*bin{}
	if ch.Name != "" && cfg.Pack {
		it = newPackItem("", -1, 0, thr, perFlowPps(v, ch.Name), max(1, ch.BatchCap), ch)
		for i := range v.Instances {
			in := &v.Instances[i]
			if in.Worker != w.Name || !in.Attached || in.Core < 0 {
				continue
			}
			b := bins[in.Core]
			if b == nil {
				b = newBin(in.Core)
				bins[in.Core] = b
			}
			o := v.Chains[in.Chain]
			b.add(len(b.ids), newPackItem(in.ID, in.Core, v.Load(in), o.Threshold, EstRate(in, perFlowPps(v, in.Chain)), in.Batch, o), cfg.PackFrac)
		}
	}
	free, best, bestLoad := int32(-1), int32(-1), math.Inf(1)
	for _, c := range w.Cores {
		u := use[coreKey{w.Name, c}]
		if u == nil {
			if free < 0 || c < free {
				free = c
			}
			continue
		}
		if cfg.Pack && u.load < cfg.PackFrac*math.Min(u.minThr, thr) && u.load < bestLoad &&
			(ch.Name == "" || it.turnS <= bins[c].tol && bins[c].turnS <= it.tolerance(cfg.PackFrac)) {
			best, bestLoad = c, u.load
		}
	}
	if free >= 0 {
		return free
	}
	return best
}

// CanAttach reports whether the idle instance in could be attached now: its worker has a
// core for its chain (freeCore, with packing's rules). A mark that makes a chain's next flow
// look for another instance is only worth making when one can take it.
func (cfg Config) CanAttach(v *View, in *Instance) bool {
	w := v.workerUp()[in.Worker]
	return w != nil && v.freeCore(cfg, w, v.Chains[in.Chain]) >= 0
}

// PickCore is freeCore for callers outside the package: the core worker gets for a newly
// attached instance, -1 if it has none. It does not know the instance's chain, so a shared
// core is bounded by its own sgroups' thresholds only (Assign also bounds it by the new
// chain's).
func (cfg Config) PickCore(v *View, worker string) int32 {
	w := v.workerUp()[worker]
	if w == nil {
		return -1
	}
	return v.freeCore(cfg, w, Chain{Threshold: math.Inf(1)})
}

// QueueHighFor is the NIC queue that marks an instance running at batch bursts per turn
// overloaded (Galleon §5.1's queue-length event): QueueHigh, or one full turn if that is
// longer. A turn of B bursts takes B·32 packets at once, so between its turns an instance at
// a large batch holds a queue of up to a turn at loads it sustains (Galleon Fig. 4's queue
// length under its threshold); only what one turn cannot take is a backlog. 0: off.
func (cfg Config) QueueHighFor(batch int) int {
	if cfg.QueueHigh <= 0 {
		return 0
	}
	return max(cfg.QueueHigh, batch*burstPkts)
}

// Change is a new overload mark for an instance: why as a bounded Reason, and as a line
// with the figures for describe.
type Change struct {
	Instance   string
	Overloaded bool
	Reason     Reason
	Why        string
}

// Overload recomputes every attached instance's overload mark (Galleon §5.1–5.2): an
// instance is overloaded when its load reaches its chain's threshold, its NIC queue reaches
// QueueHigh, it dropped packets, the core it shares has reached the lowest threshold of
// its sgroups, or its measured server sojourn p99 is over its chain's server budget. It
// takes new flows again only once all of these are below ClearFrac of their limits. It
// returns the marks that change; instances of gone workers get none.
func (cfg Config) Overload(v *View) []Change {
	use := v.cores()
	up := v.workerUp()
	var out []Change
	for i := range v.Instances {
		in := &v.Instances[i]
		if up[in.Worker] == nil {
			continue
		}
		if !in.Attached {
			if in.Overloaded {
				out = append(out, Change{in.ID, false, ReasonDetached, "detached"})
			}
			continue
		}
		thr, budget := v.Chains[in.Chain].Threshold, v.Chains[in.Chain].ServerBudgetUs
		load := v.Load(in)
		qh := cfg.QueueHighFor(in.Batch)
		u := use[coreKey{in.Worker, in.Core}]
		var why string
		var reason Reason
		switch {
		case load >= thr:
			reason, why = ReasonLoad, fmt.Sprintf("load %.2f ≥ threshold %.2f", load, thr)
		case qh > 0 && in.QueueLen >= qh && !in.Settling:
			reason, why = ReasonQueue, fmt.Sprintf("NIC queue %d ≥ %d", in.QueueLen, qh)
		case in.NewDrops > 0:
			reason, why = ReasonDrops, fmt.Sprintf("%d packets dropped", in.NewDrops)
		case u != nil && u.members > 1 && u.load >= u.minThr:
			reason, why = ReasonSharedCore, fmt.Sprintf("shared core %d load %.2f ≥ %.2f", in.Core, u.load, u.minThr)
		case budget > 0 && in.SojournP99us > budget:
			reason, why = ReasonMeasuredP99, fmt.Sprintf("measured server p99 %.1f µs > server budget %.1f µs", in.SojournP99us, budget)
		}
		if why != "" {
			if !in.Overloaded {
				out = append(out, Change{in.ID, true, reason, why})
			}
			continue
		}
		if !in.Overloaded {
			continue
		}
		// Each limit clears under ClearFrac of itself, except the measured p99 for a mark made
		// for another reason: a chain whose threshold the model set can have its p99 near the
		// budget at any load, when its tail is one turn and not a queue (keel-sim's random-12:
		// t1, p99 27.9 µs of 30, never under 0.8 × 30; its load-marked instances never cleared,
		// it took 3.95 cores instead of 2.8 and left none for two other chains' flows, 6.1 M
		// packets lost). Such a mark clears once the p99 is within the budget.
		f := cfg.ClearFrac
		p99Calm := budget == 0 || in.SojournP99us < f*budget ||
			in.OverloadReason != ReasonMeasuredP99 && in.SojournP99us <= budget
		calm := load < f*thr && float64(in.QueueLen) < f*float64(qh) &&
			(u == nil || u.members < 2 || u.load < f*u.minThr) && p99Calm
		if calm {
			out = append(out, Change{in.ID, false, ReasonBelowThreshold, fmt.Sprintf("load %.2f < %.2f", load, f*thr)})
		}
	}
	return out
}

// Reclaim returns the attached instances that give their core back (Galleon §5.3,
// Listing 1's detach): no flow for ReclaimAfter. Instances of gone workers are left alone,
// and draining ones too: they are removed, not detached (see Instance.Draining).
func (cfg Config) Reclaim(v *View) []string {
	var out []string
	up := v.workerUp()
	for i := range v.Instances {
		in := &v.Instances[i]
		if up[in.Worker] != nil && in.Attached && !in.Draining && in.Flows == 0 && !in.IdleSince.IsZero() && v.Now.Sub(in.IdleSince) >= cfg.ReclaimAfter {
			out = append(out, in.ID)
		}
	}
	sort.Strings(out)
	return out
}

// PoolChange resizes a chain's pool of idle instances.
type PoolChange struct {
	Create []string // one worker per instance to pre-deploy
	Remove []string // idle instances to remove
}

// Pool keeps a chain's idle instances (detached, ready or starting) within [PoolLow,
// PoolHigh], both raised to what the chain's MinInstances needs beside its attached ones
// (Listing 1's scale_out / scale_in loops). An idle instance counts toward PoolLow only
// where it could take a flow: on a worker with a core for it (Assign's freeCore). An idle
// instance on a full worker is no pool at all: the chain's new flows would wait at the
// ingress, their packets held, until a core came free on that worker, and then reach the
// instance at once (bench/scenarios/random-12.yaml's t1, issue 33). New instances go to
// the least loaded workers that have a core for one, or to the least loaded workers when
// none has; above PoolHigh, the idle instances that could not attach go first, then those
// with the highest IDs. A chain not in Chains (removed) keeps no idle instance.
func (cfg Config) Pool(v *View, chain string) PoolChange {
	low, high := cfg.PoolLow, cfg.PoolHigh
	ch, ok := v.Chains[chain]
	if !ok {
		low, high = 0, 0
	}
	up := v.workerUp()
	room := map[string]bool{} // the worker has a core for a new instance of the chain
	for _, w := range v.Workers {
		room[w.Name] = v.freeCore(cfg, up[w.Name], ch) >= 0
	}
	var idle []string
	attached, usable := 0, 0
	count := map[string]int{}
	stuck := map[string]bool{}
	for i := range v.Instances {
		in := &v.Instances[i]
		if up[in.Worker] == nil {
			continue
		}
		count[in.Worker]++
		switch {
		case in.Chain != chain || in.Draining:
		case in.Attached:
			attached++
		default:
			idle = append(idle, in.ID)
			if room[in.Worker] {
				usable++
			} else {
				stuck[in.ID] = true
			}
		}
	}
	if ok {
		low, high = max(low, ch.MinInstances-attached), max(high, ch.MinInstances-attached)
	}
	var pc PoolChange
	if len(v.Workers) == 0 {
		return pc
	}
	anyRoom := false
	for _, r := range room {
		anyRoom = anyRoom || r
	}
	wload := v.workerLoads()
	for n := len(idle); usable < low && (anyRoom || n < low); n++ {
		var pick string
		for _, w := range v.Workers {
			if anyRoom && !room[w.Name] {
				continue
			}
			if pick == "" || wload[w.Name] < wload[pick] || (wload[w.Name] == wload[pick] && count[w.Name] < count[pick]) {
				pick = w.Name
			}
		}
		count[pick]++
		usable++
		pc.Create = append(pc.Create, pick)
	}
	if n := len(idle) + len(pc.Create); n > high {
		sort.Slice(idle, func(i, j int) bool {
			if stuck[idle[i]] != stuck[idle[j]] {
				return stuck[idle[i]]
			}
			return idLess(idle[j], idle[i])
		})
		pc.Remove = idle[:min(len(idle), n-high)]
	}
	return pc
}

// idLess orders CHAIN/N ids by chain, then N as a number.
func idLess(a, b string) bool {
	ca, na := splitID(a)
	cb, nb := splitID(b)
	if ca != cb {
		return ca < cb
	}
	return na < nb
}

func splitID(id string) (string, int) {
	for i := len(id) - 1; i >= 0; i-- {
		if id[i] == '/' {
			n := 0
			for _, r := range id[i+1:] {
				if r < '0' || r > '9' {
					return id, 0
				}
				n = n*10 + int(r-'0')
			}
			return id[:i], n
		}
	}
	return id, 0
}
