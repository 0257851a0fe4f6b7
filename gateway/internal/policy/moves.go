// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// Flow moves (issue 37 item 3). Galleon keeps every flow on the instance that took its first
// packet and reclaims a core only once its last flow ended (§5.3); it left moving flows away
// from underused chains to future work because of the NF state (§5.3, last paragraph). keel's
// stateful NFs keep their per-flow state under the flow's key, so a flow can move with it:
// its new packets are held at the ingress, its state follows it, its rule switches and the
// held packets are released in order (OpenNF's loss-free, order-preserving move, SIGCOMM
// '14 §5.1). Moves cost a pause per flow and CPU on the control core, so the controller
// makes them only where they pay:
//
//   - scale-in: the least loaded attached instance of a chain, if it carries few flows and
//     the chain's other attached instances take all of them within FillFrac of their
//     threshold, is emptied and gives its core back, without waiting for its flows to end
//     (Galleon §7.2.2's flows last 600 s on average). The budget, the held-packet bounds
//     and QueueRoom may allow only some of its flows per plan: the instance is then emptied
//     over several plans (MoveHistory.Emptying), taking no new flows meanwhile
//     (Instance.Emptying), and each plan moves what the bounds allow. A plan gives up on it
//     (it takes flows again) when the others no longer have room for all it still carries;
//   - relief: an instance whose load grew past its threshold (RelieveAbove of it: Assign
//     fills instances up to the threshold itself) sheds its heaviest flows to instances with
//     room until its load is RelieveTo of its threshold, rather than only taking no new
//     flows.
//
// No move takes a destination over FillFrac × its threshold (§5.2's SLO-aware threshold;
// on a shared core, the core's lowest threshold) or its MaxFlows. Hysteresis: FillFrac is
// under the threshold Assign fills to, so a chain that was just emptied onto its other
// instances still has room for new flows before it attaches again; a flow that moved does
// not move again for FlowHold, an instance that received flows is not emptied for
// InstanceHold, and a chain with a move is left alone for InstanceHold. A budget of
// PerSecond flows a second (a token bucket of Burst) bounds the control core's work, and the
// packets held during the moves of a chain are at most TailShare of its packets over
// SLOWindow, so that held packets, which wait about Pause, stay inside the p99's 1 %.
// Only chains whose NFs are all movable move (a tenant NF with global state pins its
// chain's flows).

// MoveConfig is the move policy's knobs (Config.Moves).
type MoveConfig struct {
	// Enabled: keel-sim runs PlanMoves for this policy (the controller runs it when a Mover
	// is set).
	Enabled bool
	// PerSecond and Burst: the budget, in flows moved, as a token bucket.
	PerSecond, Burst float64
	// ScaleInMaxFlows: an instance with more flows is not emptied (0: no bound).
	ScaleInMaxFlows int
	// FillFrac: moves fill a destination to at most FillFrac × its threshold.
	FillFrac float64
	// RelieveAbove: an instance whose load reached RelieveAbove × its threshold is relieved:
	// above what Assign fills an instance to (its threshold), so only flows whose rates grew
	// make one; it sheds flows until its load is RelieveTo × its threshold.
	RelieveAbove, RelieveTo float64
	// FlowHold, InstanceHold: hysteresis (see the package comment above).
	FlowHold, InstanceHold time.Duration
	// Pause: how long a moved flow's packets are held (the expected pause per flow).
	Pause time.Duration
	// TailShare of a chain's packets over SLOWindow may be held by moves.
	TailShare float64
	SLOWindow time.Duration
	// MaxHeldPkts: a flow whose packets held during Pause would be more than this does not
	// move (its held packets, released at once, could overflow the destination's NIC queue;
	// a quarter of keel's 4096-packet VF ring by default).
	MaxHeldPkts float64
	// QueueRoom: the packets held by one plan's moves onto one destination, released within
	// milliseconds of each other into its NIC queue, at most this (half keel's 4096-packet
	// VF ring: a destination near its fill has little spare rate to drain them meanwhile).
	QueueRoom float64
}

// DefaultMoves are the move policy's defaults. Pause is the time a moved flow's packets
// wait, which sets how many are held: 50 ms, the upper end of UNO's measured per-packet
// latency increase during a loss-free migration that uses OpenNF's technique, 40–50 ms (UNO
// §5.2, /work/shared/papers/uno.txt), and above keel's own median pause in batches of 100
// (bench/results/migration.json "moves".pause_us_p50, 47.4 ms on this machine).
func DefaultMoves() MoveConfig {
	return MoveConfig{PerSecond: 200, Burst: 400, ScaleInMaxFlows: 512, FillFrac: 0.9, RelieveAbove: 1.1, RelieveTo: 0.95,
		FlowHold: time.Minute, InstanceHold: 10 * time.Second, Pause: 50 * time.Millisecond,
		TailShare: 0.002, SLOWindow: 10 * time.Second, MaxHeldPkts: 1024, QueueRoom: 2048}
}

// FlowRate is one flow of an instance: its key and packet rate (0: unknown, the instance's
// rate shared equally among its flows stands for it).
type FlowRate struct {
	Key string
	Pps float64
}

// FlowMove moves flows of one chain from one instance to another.
type FlowMove struct {
	Chain, From, To string
	Flows           []string // keys, sorted
	Reason          Reason   // ReasonScaleIn or ReasonRelieve
	Pps             float64  // the moved flows' packets a second (estimated)
}

// MovePlan is what PlanMoves decided: the moves, sorted by chain, source, destination; the
// instances they empty, whose cores go back once their moves are done; and the instances
// being emptied over several plans that still carry flows after these moves, by chain
// (MoveHistory.Track takes them).
type MovePlan struct {
	Moves    []FlowMove
	Detach   []string
	Emptying []Emptying
}

// Emptying is an instance of a chain that the move policy is emptying over several plans.
type Emptying struct {
	Chain, Instance string
}

// MoveHistory is what the move policy remembers between plans: the budget, the last move of
// each flow, when each instance last received flows, when each chain last moved, and the
// packets its moves held in the current SLO window. The caller keeps it and Records the
// moves it made; PlanMoves only reads it.
type MoveHistory struct {
	Tokens     float64
	TokensAt   time.Time
	FlowMoved  map[string]time.Time
	Received   map[string]time.Time // instance → last time flows moved onto it
	ChainMoved map[string]time.Time
	Held       map[string]heldWindow // chain → packets held in its window
	// Emptying: chain → the instance the policy is emptying over several plans (Track).
	Emptying map[string]string
}

// Mark sets Instance.Emptying on the view's instances the policy is emptying: Assign gives
// them no new flows. The caller marks every view it builds (the controller's state, keel-sim's
// view).
func (h *MoveHistory) Mark(v *View) {
	for i := range v.Instances {
		in := &v.Instances[i]
		in.Emptying = h.Emptying[in.Chain] == in.ID
	}
}

// Track notes the instances a plan left emptying (MovePlan.Emptying); every other instance
// takes flows again.
func (h *MoveHistory) Track(p MovePlan) {
	h.Emptying = map[string]string{}
	for _, e := range p.Emptying {
		h.Emptying[e.Chain] = e.Instance
	}
}

type heldWindow struct {
	Start time.Time
	Pkts  float64
}

// tokens is the budget available at now.
func (h *MoveHistory) tokens(mc MoveConfig, now time.Time) float64 {
	if h.TokensAt.IsZero() {
		return mc.Burst
	}
	dt := math.Max(0, now.Sub(h.TokensAt).Seconds())
	return math.Min(mc.Burst, h.Tokens+dt*mc.PerSecond)
}

func (h *MoveHistory) held(mc MoveConfig, chain string, now time.Time) float64 {
	w, ok := h.Held[chain]
	if !ok || now.Sub(w.Start) >= mc.SLOWindow {
		return 0
	}
	return w.Pkts
}

// Record notes moves made at now: they spend the budget and start the holds.
func (h *MoveHistory) Record(mc MoveConfig, moves []FlowMove, now time.Time) {
	if h.FlowMoved == nil {
		h.FlowMoved, h.Received, h.ChainMoved, h.Held = map[string]time.Time{}, map[string]time.Time{},
			map[string]time.Time{}, map[string]heldWindow{}
	}
	t := h.tokens(mc, now)
	for _, m := range moves {
		t -= float64(len(m.Flows))
		for _, f := range m.Flows {
			h.FlowMoved[f] = now
		}
		h.Received[m.To] = now
		h.ChainMoved[m.Chain] = now
		w := h.Held[m.Chain]
		if now.Sub(w.Start) >= mc.SLOWindow {
			w = heldWindow{Start: now}
		}
		w.Pkts += m.Pps * mc.Pause.Seconds()
		h.Held[m.Chain] = w
	}
	h.Tokens, h.TokensAt = math.Max(0, t), now
	// Forget what no longer holds anything back.
	for f, at := range h.FlowMoved {
		if now.Sub(at) >= mc.FlowHold {
			delete(h.FlowMoved, f)
		}
	}
}

// moveInst is an instance as a plan sees it: its load as the plan's moves change it.
type moveInst struct {
	in    *Instance
	load  float64
	flows int
}

// PlanMoves decides flow moves (see the comment at the top of this file) from the view, the
// flows of each attached instance (flows[instanceID]), which chains may move (movable) and
// the history. It is pure: the same inputs give the same plan, and a plan applied (the flows
// reassigned, the emptied instances detached, h Recorded) gives no move at once.
func (cfg Config) PlanMoves(v *View, flows map[string][]FlowRate, movable map[string]bool, h *MoveHistory) MovePlan {
	mc := cfg.Moves
	if h == nil {
		h = &MoveHistory{}
	}
	tokens := h.tokens(mc, v.Now)
	up := v.workerUp()
	use := v.cores()
	byChain := map[string][]*moveInst{}
	for i := range v.Instances {
		in := &v.Instances[i]
		if !in.Attached || in.Draining || in.Core < 0 || up[in.Worker] == nil {
			continue
		}
		byChain[in.Chain] = append(byChain[in.Chain], &moveInst{in: in, load: v.Load(in), flows: in.Flows})
	}
	names := make([]string, 0, len(byChain))
	for n := range byChain {
		names = append(names, n)
	}
	sort.Strings(names)
	var plan MovePlan
	for _, name := range names {
		ch, ok := v.Chains[name]
		insts := byChain[name]
		if !ok || !movable[name] || ch.MaxPps <= 0 || ch.Threshold <= 0 || len(insts) < 2 {
			continue // an instance it was emptying takes flows again
		}
		sort.Slice(insts, func(i, j int) bool { return idLess(insts[i].in.ID, insts[j].in.ID) })
		var emptying *moveInst
		for _, m := range insts {
			if m.in.ID == h.Emptying[name] && !m.in.Overloaded {
				emptying = m
			}
		}
		if tokens < 1 {
			if emptying != nil {
				plan.Emptying = append(plan.Emptying, Emptying{name, emptying.in.ID})
			}
			continue
		}
		p := planner{cfg: cfg, v: v, h: h, ch: ch, insts: insts, flows: flows, use: use, tokens: tokens,
			heldRoom: math.Inf(1), emptying: emptying}
		if ch.SLOus > 0 {
			p.heldRoom = mc.TailShare*p.chainRate()*mc.SLOWindow.Seconds() - h.held(mc, name, v.Now)
		}
		var moves []FlowMove
		var empty []string
		if emptying != nil {
			// Emptying goes on at every plan, within the bounds: its destinations' loads are
			// the plan's own view of them.
			moves, empty = p.emptyMore(emptying)
		}
		if at, ok := h.ChainMoved[name]; p.emptying == nil && (!ok || v.Now.Sub(at) >= mc.InstanceHold) {
			if moves, empty = p.relieve(); len(moves) == 0 {
				moves, empty = p.scaleIn()
			}
		}
		if p.emptying != nil && p.emptying.flows > 0 {
			plan.Emptying = append(plan.Emptying, Emptying{name, p.emptying.in.ID})
		}
		for _, m := range moves {
			tokens -= float64(len(m.Flows))
		}
		plan.Moves = append(plan.Moves, moves...)
		plan.Detach = append(plan.Detach, empty...)
	}
	sort.Strings(plan.Detach)
	return plan
}

// planner plans one chain's moves.
type planner struct {
	cfg      Config
	v        *View
	h        *MoveHistory
	ch       Chain
	insts    []*moveInst // by ID
	flows    map[string][]FlowRate
	use      map[coreKey]*coreUse
	tokens   float64
	heldRoom float64 // packets the chain's moves may still hold in its SLO window
	// emptying: the instance being emptied over several plans (nil: none); it takes no flows.
	emptying *moveInst
}

func (p *planner) chainRate() float64 {
	r := 0.0
	for _, m := range p.insts {
		r += m.load * p.ch.MaxPps
	}
	return r
}

// rates are an instance's flows with their packet rates, the unknown ones at the
// instance's mean, heaviest first (then by key).
func (p *planner) rates(m *moveInst) []FlowRate {
	fs := append([]FlowRate(nil), p.flows[m.in.ID]...)
	known, n := 0.0, 0
	for _, f := range fs {
		if f.Pps > 0 {
			known += f.Pps
		} else {
			n++
		}
	}
	if n > 0 {
		each := math.Max(0, m.load*p.ch.MaxPps-known) / float64(n)
		for i := range fs {
			if fs[i].Pps <= 0 {
				fs[i].Pps = each
			}
		}
	}
	sort.Slice(fs, func(i, j int) bool {
		if fs[i].Pps != fs[j].Pps {
			return fs[i].Pps > fs[j].Pps
		}
		return fs[i].Key < fs[j].Key
	})
	return fs
}

// pinned tells whether a flow may not move now: it moved too recently to move again, or
// it is too heavy to move.
func (p *planner) pinned(f FlowRate) bool {
	if p.heavy(f) {
		return true
	}
	at, ok := p.h.FlowMoved[f.Key]
	return ok && p.v.Now.Sub(at) < p.cfg.Moves.FlowHold
}

// heavy tells whether a flow's packets held during the pause would be too many: it does not
// move at all.
func (p *planner) heavy(f FlowRate) bool {
	mc := p.cfg.Moves
	return mc.MaxHeldPkts > 0 && f.Pps*mc.Pause.Seconds() > mc.MaxHeldPkts
}

// room is the load destination d can still take within FillFrac of its threshold (and of
// its shared core's lowest threshold).
func (p *planner) room(d *moveInst, extra map[*moveInst]float64) float64 {
	f := p.cfg.Moves.FillFrac
	r := f*p.ch.Threshold - d.load
	if u := p.use[coreKey{d.in.Worker, d.in.Core}]; u != nil && u.members > 1 {
		r = math.Min(r, f*u.minThr-u.load-extra[d])
	}
	return r
}

// place assigns flows to the destinations, most loaded first (as Assign fills instances),
// each taking at most room packets held by this plan (0: no bound); nil if one does not fit
// anywhere and all must fit.
func (p *planner) place(src *moveInst, fs []FlowRate, dests []*moveInst, all bool, room float64) map[*moveInst][]FlowRate {
	out := map[*moveInst][]FlowRate{}
	extra := map[*moveInst]float64{} // load added to each destination's core by this plan
	held := map[*moveInst]float64{}  // packets held for each destination by this plan
	for _, f := range fs {
		l := f.Pps / p.ch.MaxPps
		h := f.Pps * p.cfg.Moves.Pause.Seconds()
		var best *moveInst
		for _, d := range dests {
			if d == src || p.room(d, extra) < l || (p.ch.MaxFlows > 0 && d.flows >= p.ch.MaxFlows) ||
				(room > 0 && held[d]+h > room) {
				continue
			}
			if best == nil || d.load > best.load {
				best = d
			}
		}
		if best == nil {
			if all {
				return nil
			}
			continue
		}
		best.load += l
		best.flows++
		extra[best] += l
		held[best] += h
		out[best] = append(out[best], f)
	}
	return out
}

// moves turns a placement into FlowMoves, by destination ID, each destination's flows by key.
func (p *planner) moves(src *moveInst, placed map[*moveInst][]FlowRate, why Reason) []FlowMove {
	var out []FlowMove
	for d, fs := range placed {
		m := FlowMove{Chain: p.ch.Name, From: src.in.ID, To: d.in.ID, Reason: why}
		for _, f := range fs {
			m.Flows = append(m.Flows, f.Key)
			m.Pps += f.Pps
		}
		sort.Strings(m.Flows)
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return idLess(out[i].To, out[j].To) })
	return out
}

// budget cuts fs to what the tokens and the chain's held-packet room allow.
func (p *planner) budget(fs []FlowRate) []FlowRate {
	pause := p.cfg.Moves.Pause.Seconds()
	held := 0.0
	for i, f := range fs {
		if float64(i+1) > p.tokens || held+f.Pps*pause > p.heldRoom {
			return fs[:i]
		}
		held += f.Pps * pause
	}
	return fs
}

// relieve moves the heaviest flows off the chain's overloaded instances.
func (p *planner) relieve() ([]FlowMove, []string) {
	var out []FlowMove
	for _, src := range p.insts {
		if src.load < p.cfg.Moves.RelieveAbove*p.ch.Threshold {
			continue
		}
		if at, ok := p.h.Received[src.in.ID]; ok && p.v.Now.Sub(at) < p.cfg.Moves.InstanceHold {
			continue // it just took flows: its stats have not caught up
		}
		excess := src.load - p.cfg.Moves.RelieveTo*p.ch.Threshold
		var shed []FlowRate
		for _, f := range p.rates(src) {
			if excess <= 0 {
				break
			}
			if p.pinned(f) {
				continue
			}
			shed = append(shed, f)
			excess -= f.Pps / p.ch.MaxPps
		}
		if shed = p.budget(shed); len(shed) == 0 {
			continue
		}
		var dests []*moveInst
		for _, d := range p.insts {
			if d != src && d != p.emptying && !d.in.Overloaded && d.load < p.ch.Threshold {
				dests = append(dests, d)
			}
		}
		placed := p.place(src, shed, dests, false, p.cfg.Moves.QueueRoom)
		ms := p.moves(src, placed, ReasonRelieve)
		for _, m := range ms {
			src.load -= m.Pps / p.ch.MaxPps
			src.flows -= len(m.Flows)
			p.spend(m)
		}
		out = append(out, ms...)
	}
	return out, nil
}

func (p *planner) spend(m FlowMove) {
	p.tokens -= float64(len(m.Flows))
	p.heldRoom -= m.Pps * p.cfg.Moves.Pause.Seconds()
}

// scaleIn starts emptying the chain's least loaded instance onto the others, if they take
// all its flows within FillFrac of their threshold; this plan moves what the bounds allow
// (emptyMore), later plans the rest. An instance alone on its core goes first: emptying it
// frees a core, emptying one that shares a core only lightens the core.
func (p *planner) scaleIn() ([]FlowMove, []string) {
	alone := func(m *moveInst) bool {
		u := p.use[coreKey{m.in.Worker, m.in.Core}]
		return u == nil || u.members < 2
	}
	var cands []*moveInst
	for _, m := range p.insts {
		if m.flows == 0 || m.in.Overloaded || (p.cfg.Moves.ScaleInMaxFlows > 0 && m.flows > p.cfg.Moves.ScaleInMaxFlows) {
			continue
		}
		if at, ok := p.h.Received[m.in.ID]; ok && p.v.Now.Sub(at) < p.cfg.Moves.InstanceHold {
			continue
		}
		cands = append(cands, m)
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if alone(a) != alone(b) {
			return alone(a)
		}
		if a.load != b.load {
			return a.load < b.load
		}
		return a.flows < b.flows
	})
	for _, src := range cands {
		if fs := p.rates(src); len(fs) != src.flows || slices.ContainsFunc(fs, p.pinned) {
			continue // the flows listed are not all of its flows, or one may not move now
		}
		p.emptying = src
		if ms, empty := p.emptyMore(src); p.emptying != nil {
			return ms, empty
		}
		// the others lack room for all its flows: the next candidate
	}
	return nil, nil
}

// dests are the instances that may take src's flows when it is emptied: those that carry
// flows (an idle one is detached, not filled) and are neither overloaded nor src.
func (p *planner) dests(src *moveInst) []*moveInst {
	var out []*moveInst
	for _, d := range p.insts {
		if d != src && !d.in.Overloaded && d.flows > 0 {
			out = append(out, d)
		}
	}
	return out
}

// fits tells whether the chain's other instances take all of src's flows fs within FillFrac
// of their thresholds (whatever the plans that move them: the held-packet bounds and the
// budget only spread them over several plans).
func (p *planner) fits(src *moveInst, fs []FlowRate) bool {
	dests := p.dests(src)
	saved := make([][2]float64, len(dests))
	for i, d := range dests {
		saved[i] = [2]float64{d.load, float64(d.flows)}
	}
	ok := p.place(src, fs, dests, true, 0) != nil
	for i, d := range dests {
		d.load, d.flows = saved[i][0], int(saved[i][1])
	}
	return ok
}

// emptyMore moves as many of src's flows as the budget, the chain's held-packet room and
// QueueRoom allow onto the chain's other instances (a flow that moved, or failed to move,
// within FlowHold waits for a later plan). If the others no longer have room for all of
// src's flows, or one of them grew too heavy to move, the policy gives up emptying it
// (p.emptying is cleared: it takes flows again). src is detached once it carries no flow.
func (p *planner) emptyMore(src *moveInst) ([]FlowMove, []string) {
	all := p.rates(src)
	if slices.ContainsFunc(all, p.heavy) || !p.fits(src, all) {
		p.emptying = nil
		return nil, nil
	}
	var fs []FlowRate
	for _, f := range all {
		if !p.pinned(f) {
			fs = append(fs, f)
		}
	}
	placed := p.place(src, p.budget(fs), p.dests(src), false, p.cfg.Moves.QueueRoom)
	ms := p.moves(src, placed, ReasonScaleIn)
	for _, m := range ms {
		p.spend(m)
		src.load -= m.Pps / p.ch.MaxPps
		src.flows -= len(m.Flows)
	}
	if src.flows > 0 {
		return ms, nil
	}
	src.load = 0
	return ms, []string{src.in.ID}
}

// String is the move as the decision log says it.
func (m FlowMove) String() string {
	return fmt.Sprintf("%d flow(s) of chain %s moved from instance %s to %s (%s)", len(m.Flows), m.Chain, m.From, m.To, m.Reason)
}
