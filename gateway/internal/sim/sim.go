// SPDX-License-Identifier: Apache-2.0

// Package sim is keel's rack-scale simulator: workers with managed cores (dpmodel), a ToR
// that installs a new flow's rule after a delay, flows arriving by phase, pre-deployed pools
// of chain instances, and keel's real controller policy (gateway/internal/policy) called at
// every decision: Assign for each new flow, Overload on each stats report (every stats_ms,
// and at once when a NIC queue reaches QueueHigh), Reclaim, Pool and Repack every
// control_ms, Operating at deploy and BatchFor at attach. It is a discrete-event simulation (an event heap and a
// clock) with seeded randomness: the same scenario, policy and costs give the same result.
//
// Each chain of a scenario runs on its own in the rack (as Galleon ran each chain's
// experiment on its own), once per policy; a scenario with together: true runs all its
// chains at once in one rack, where their sgroups compete for cores (and share them when
// the policy packs). There, a core's time is attributed to the chains of the sgroups
// attached to it, an equal share per sgroup (a core holding two sgroups of chain1 and one of
// chain3 counts 2/3 for chain1, 1/3 for chain3): a chain's cores_avg is the time average of
// its shares, its cores_max the most cores that held one of its sgroups at once, and the row
// of chain "all" has the rack's cores in use.
package sim

import (
	"container/heap"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/controller"
	"github.com/keel-nfv/keel/gateway/internal/costs"
	"github.com/keel-nfv/keel/gateway/internal/dpmodel"
	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// Row is one chain under one policy in one scenario.
type Row struct {
	Scenario  string  `json:"scenario"`
	Policy    string  `json:"policy"`
	Chain     string  `json:"chain"`
	SLOus     float64 `json:"slo_us"`
	P99us     float64 `json:"p99_us"`
	Loss      uint64  `json:"loss"`
	CoresAvg  float64 `json:"cores_avg"`
	CoresMax  int     `json:"cores_max"`
	P50us     float64 `json:"p50_us"`
	MaxUs     float64 `json:"max_us"`
	MeetsSLO  bool    `json:"meets_slo"`
	Flows     int     `json:"flows"`
	Packets   uint64  `json:"packets"`
	Unserved  int     `json:"unserved_flows"` // flows that ended before any instance took them
	Threshold float64 `json:"threshold"`
	Batch     int     `json:"batch"`
	MaxPps    float64 `json:"max_pps"`
	Moves     int     `json:"moves"`
	// A policy with flow moves (Moves.Enabled): the flows it moved, the control core's
	// time they cost as a share of a core over the run, and the SLO windows (10 s of a
	// chain's packets, with a flow move in them) whose p99 missed the chain's SLO.
	FlowMoves     int     `json:"flow_moves,omitempty"`
	MoveCPUCores  float64 `json:"move_cpu_cores,omitempty"`
	MoveSLOMisses int     `json:"move_slo_misses,omitempty"`
	Instances     int     `json:"instances_created"`
	SimSeconds    float64 `json:"sim_seconds"`
}

// Policies are the named policies keel-sim knows: keel, metron and keel's ablations.
func Policies(ablation bool, names ...string) ([]policy.Config, error) {
	var out []policy.Config
	for _, n := range names {
		switch n {
		case "keel":
			out = append(out, policy.Keel())
		case "metron":
			out = append(out, policy.Metron())
		case "metron-slo":
			out = append(out, metronSLO())
		case "keel-moves":
			out = append(out, KeelMoves())
		default:
			return nil, fmt.Errorf("unknown policy %q (keel, keel-moves, metron or metron-slo)", n)
		}
	}
	if ablation {
		a := policy.Keel()
		a.Name, a.Pack = "keel-nopack", false
		b := policy.Keel()
		b.Name, b.AdaptiveBatch, b.FixedBatch = "keel-fixedbatch", false, 1
		c := policy.Keel()
		c.Name, c.SLOThresholds, c.FixedThreshold = "keel-fixedthr", false, 0.9
		out = append(out, a, b, c)
		if !has(out, "metron-slo") {
			out = append(out, metronSLO())
		}
	}
	return out, nil
}

// KeelMoves is keel's policy with flow moves on (policy.PlanMoves): instances are emptied
// to give their cores back, and overloaded ones shed their heaviest flows.
func KeelMoves() policy.Config {
	c := policy.Keel()
	c.Name, c.Moves.Enabled = "keel-moves", true
	return c
}

// metronSLO is Metron's runtime (run to completion, no isolation) with keel's SLO
// thresholds: set beside keel, it prices isolation alone; beside metron, meeting the SLO.
func metronSLO() policy.Config {
	c := policy.Metron()
	c.Name, c.SLOThresholds = "metron-slo", true
	return c
}

func has(cfgs []policy.Config, name string) bool {
	for _, c := range cfgs {
		if c.Name == name {
			return true
		}
	}
	return false
}

// profiles caches DeriveProfile by its inputs (it is deterministic).
var profiles sync.Map // key → *profEntry

type profEntry struct {
	once sync.Once
	p    policy.Profile
}

// ProfileFor is dpmodel.DeriveProfile, computed once per process for the same inputs.
func ProfileFor(chain string, cost policy.Cost, batch, pktBytes int, seed uint64) policy.Profile {
	key := fmt.Sprintf("%s|%v|%d|%d|%d", chain, cost, batch, pktBytes, seed)
	e, _ := profiles.LoadOrStore(key, &profEntry{})
	pe := e.(*profEntry)
	pe.once.Do(func() { pe.p = dpmodel.DeriveProfile(chain, cost, batch, pktBytes, seed) })
	return pe.p
}

// ChainCost is the cost a policy's instances of the chain pay at the chain's mean packet
// size and the scenario's clock: isolated for keel, run to completion for a policy without
// isolation.
func ChainCost(tbl *costs.Table, sc *Scenario, ch ChainSpec, cfg policy.Config) (policy.Cost, error) {
	c, err := tbl.ChainAt(ch.NFs, ch.tr.meanBytes, sc.GHz*1e9)
	if err != nil {
		return c, err
	}
	if !cfg.Isolation {
		c = costs.RunToCompletion(c)
	}
	return c, nil
}

type evKind int

const (
	evFlow evKind = iota
	evRule
	evFlowEnd
	evStats
	evControl
	evReady
	evPhase
	evMoveDone // a moved flow's held packets are released to its new instance
	evDetach   // an instance a move emptied gives its core back
)

type event struct {
	t    float64
	seq  uint64
	kind evKind
	f    *flow
	in   *inst
	c    *chainRun // the chain of a flow arrival or phase end
}

type evHeap []*event

func (h evHeap) Len() int { return len(h) }
func (h evHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h evHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *evHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *evHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type flow struct {
	start, end, pps float64
	c               *chainRun
	in              *inst
	active          bool // its rule is in: its rate feeds the instance
	ended           bool
	key             string
	moving          bool    // its packets are held at the ingress since heldFrom (a move)
	heldFrom        float64 //
}

type inst struct {
	p          policy.Instance
	c          *chainRun
	g          *dpmodel.SGroup
	core       *dpmodel.Core
	lastArr    uint64
	lastDrop   uint64
	removed    bool
	flowsAlive int
	live       map[*flow]bool // its flows (assigned, not ended)
	// settleUntil: flows moved onto it; until then its stats count their released held
	// packets, so its rate is stale (as the controller's after an attach) and it Settles.
	settleUntil float64
	active      int     // flows whose rule is in
	rate        float64 // their packets per second
	// The sojourn its packets saw since win began: the measurement keel-agent reports
	// (position 0's histogram over --sojourn-window), here the model's latencies.
	win      dpmodel.Hist
	winStart float64
}

// chainRun is one chain of a run: its costs, its traffic and its results.
type chainRun struct {
	spec  ChainSpec
	tr    *traffic
	cost  policy.Cost
	batch int
	pchan policy.Chain
	rng   *rand.Rand
	mrng  *rand.Rand // the held packets of its moved flows: apart, so that moves leave its traffic as it is
	seed  uint64

	phase             int
	phStart           float64
	flowSeq, phaseSeq uint64 // the live flow-arrival and phase-end events
	lmax              map[int]float64
	done              bool // its phases are over: no new flows
	pending           []*flow
	nextID            int
	hist              dpmodel.Hist

	flows, unserved, moves int
	flowMoves, sloMisses   int
	snap                   dpmodel.Hist // hist at winStart: the SLO window's start
	winStart               float64
	movedInWin             bool
	unservedPkts           float64
	offered, stranded      uint64
	coresNow, coresInt     float64 // its share of the cores in use (see the package comment)
	touchMax               int     // the most cores holding one of its sgroups at once
}

type run struct {
	sc     *Scenario
	cfg    policy.Config
	chains []*chainRun
	byName map[string]*chainRun
	label  string // what progress lines call the run's chains

	now     float64
	seq     uint64
	ev      evHeap
	workers []policy.Worker
	cores   map[string][]*dpmodel.Core
	coreOf  []*dpmodel.Core // all cores, worker-major, for advancing
	insts   []*inst         // by creation
	byID    map[string]*inst
	epoch   time.Time

	// results
	coresInt                  float64
	coresNow, coresMax        int
	end                       float64
	progress                  io.Writer
	lastProgress, wallStarted time.Time
	// slo corrects the chains' thresholds with the instances' sojourn (the gateway's
	// controller.SLOLoop, with no network: the model's latency is the server's); nil for a
	// policy without SLO thresholds.
	slo *controller.SLOLoop
	// Flow moves (cfg.Moves.Enabled): the policy's memory, the flows by key, the control
	// core's seconds spent on moves.
	mh          policy.MoveHistory
	flowByKey   map[string]*flow
	controlBusy float64
}

func (r *run) push(t float64, k evKind, f *flow, in *inst, c *chainRun) {
	r.seq++
	heap.Push(&r.ev, &event{t: t, seq: r.seq, kind: k, f: f, in: in, c: c})
}

func seedOf(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// Run simulates one chain of a scenario on its own in the rack under one policy. progress
// (may be nil) gets a line every few seconds of wall time.
func Run(sc *Scenario, chain string, cfg policy.Config, tbl *costs.Table, progress io.Writer) (Row, error) {
	for _, c := range sc.Chains {
		if c.Name == chain {
			rows, err := simulate(sc, []ChainSpec{c}, sc.Seed^seedOf(sc.Name, c.Name), cfg, tbl, progress)
			if err != nil {
				return Row{}, err
			}
			return rows[0], nil
		}
	}
	return Row{}, fmt.Errorf("%s: no chain %q", sc.file, chain)
}

// RunTogether simulates all the chains of a scenario at once in one rack under one policy:
// a row per chain, in the scenario's order, then the row of chain "all".
func RunTogether(sc *Scenario, cfg policy.Config, tbl *costs.Table, progress io.Writer) ([]Row, error) {
	return simulate(sc, sc.Chains, sc.Seed^seedOf(sc.Name), cfg, tbl, progress)
}

// simulate runs chains in one rack whose cores draw from rackSeed; each chain's traffic and
// sgroups draw from the seed it would have on its own.
func simulate(sc *Scenario, specs []ChainSpec, rackSeed uint64, cfg policy.Config, tbl *costs.Table, progress io.Writer) ([]Row, error) {
	r := &run{sc: sc, cfg: cfg, byName: map[string]*chainRun{}, cores: map[string][]*dpmodel.Core{},
		byID: map[string]*inst{}, flowByKey: map[string]*flow{}, progress: progress, epoch: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), end: sc.MaxSeconds}
	for i := range specs {
		ch := &specs[i]
		cost, err := ChainCost(tbl, sc, *ch, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: chain %s: %v", sc.file, ch.Name, err)
		}
		batch := cfg.BatchFor(cost, dpmodel.BurstSize)
		pc := policy.Chain{Name: ch.Name, SLOus: ch.SLOus}
		if cfg.SLOThresholds {
			batch, _, pc.Threshold = cfg.Operating(cost, ch.SLOus, func(b int) policy.Profile {
				return ProfileFor(ch.Name, cost, b, int(math.Round(ch.tr.meanBytes)), sc.Seed)
			})
		} else {
			pc.Threshold = cfg.ThresholdFor(nil, ch.SLOus)
		}
		pc.MaxPps, pc.BatchCap = cost.Rate(batch, dpmodel.BurstSize), batch
		seed := sc.Seed ^ seedOf(sc.Name, ch.Name)
		c := &chainRun{spec: *ch, tr: &ch.tr, cost: cost, batch: batch, pchan: pc, seed: seed,
			rng: rand.New(rand.NewPCG(seed, 0x5eed)), mrng: rand.New(rand.NewPCG(seed, 0x6d6f7665)), lmax: map[int]float64{}}
		r.chains = append(r.chains, c)
		r.byName[ch.Name] = c
	}
	r.cfg.Moves.Pause = time.Duration(sc.FlowMovePauseMs * float64(time.Millisecond))
	if cfg.SLOThresholds {
		r.slo = controller.NewSLOLoop(0)
		r.slo.Attachable = cfg.CanAttach
	}
	r.label = r.chains[0].spec.Name
	if len(r.chains) > 1 {
		r.label = "all"
	}
	for w := 0; w < sc.Workers; w++ {
		name := fmt.Sprintf("w%02d", w)
		pw := policy.Worker{Name: name}
		for c := 0; c < sc.Cores; c++ {
			pw.Cores = append(pw.Cores, int32(c))
			core := dpmodel.NewCore(sc.GHz*1e9, seedOf(name, fmt.Sprint(c))^rackSeed, 0)
			r.cores[name] = append(r.cores[name], core)
			r.coreOf = append(r.coreOf, core)
		}
		r.workers = append(r.workers, pw)
	}
	// The pools are deployed before the traffic starts.
	for _, c := range r.chains {
		r.pool(c)
	}
	for _, c := range r.chains {
		r.startPhase(c, 0)
	}
	r.push(sc.StatsMs/1e3, evStats, nil, nil, nil)
	r.push(sc.ControlMs/1e3, evControl, nil, nil, nil)
	r.wallStarted, r.lastProgress = time.Now(), time.Now()
	r.loop()
	return r.rows(), nil
}

func (r *run) loop() {
	for r.ev.Len() > 0 {
		e := heap.Pop(&r.ev).(*event)
		if e.t >= r.end {
			r.advance(r.end)
			break
		}
		r.advance(e.t)
		switch e.kind {
		case evPhase:
			if e.seq == e.c.phaseSeq {
				r.startPhase(e.c, e.c.phase+1)
			}
		case evFlow:
			if e.seq == e.c.flowSeq {
				r.newFlow(e.c)
			}
		case evRule:
			r.ruleIn(e.f)
		case evFlowEnd:
			r.flowEnd(e.f)
		case evStats:
			r.stats()
			r.push(r.now+r.sc.StatsMs/1e3, evStats, nil, nil, nil)
		case evControl:
			r.control()
			r.push(r.now+r.sc.ControlMs/1e3, evControl, nil, nil, nil)
		case evMoveDone:
			r.moveDone(e.f)
		case evDetach:
			r.emptied(e.in)
		case evReady:
			if !e.in.removed {
				e.in.p.Ready = true
				r.retry()
			}
		}
		r.alerts()
		if r.progress != nil && time.Since(r.lastProgress) > 3*time.Second {
			r.lastProgress = time.Now()
			var offered uint64
			for _, c := range r.chains {
				offered += c.offered
			}
			fmt.Fprintf(r.progress, "keel-sim: %s/%s/%s: t=%.0f s, %d flows, %d cores, %.1f M packets, wall %.0f s\n",
				r.sc.Name, r.label, r.cfg.Name, r.now, r.flowsAlive(), r.coresNow, float64(offered)/1e6,
				time.Since(r.wallStarted).Seconds())
		}
	}
}

func (r *run) flowsAlive() int {
	n := 0
	for _, c := range r.chains {
		n += len(c.pending)
	}
	for _, in := range r.insts {
		n += in.flowsAlive
	}
	return n
}

// advance brings every core to t and integrates the cores in use.
func (r *run) advance(t float64) {
	if t > r.now {
		for _, c := range r.coreOf {
			if len(c.Groups()) > 0 {
				c.RunUntil(t)
			} else if c.T < t {
				c.T = t
			}
		}
		r.coresInt += float64(r.coresNow) * (t - r.now)
		for _, c := range r.chains {
			c.coresInt += c.coresNow * (t - r.now)
		}
		r.now = t
	}
}

// countCores counts the cores in use and each chain's share of them.
func (r *run) countCores() {
	n := 0
	for _, c := range r.coreOf {
		if len(c.Groups()) > 0 {
			n++
		}
	}
	r.coresNow = n
	r.coresMax = max(r.coresMax, n)
	if len(r.chains) == 1 {
		c := r.chains[0]
		c.coresNow, c.touchMax = float64(n), r.coresMax
		return
	}
	members := map[*dpmodel.Core]int{}
	for _, in := range r.insts {
		if in.core != nil {
			members[in.core]++
		}
	}
	touched := map[*chainRun]map[*dpmodel.Core]bool{}
	for _, c := range r.chains {
		c.coresNow = 0
		touched[c] = map[*dpmodel.Core]bool{}
	}
	for _, in := range r.insts {
		if in.core != nil {
			in.c.coresNow += 1 / float64(members[in.core])
			touched[in.c][in.core] = true
		}
	}
	for _, c := range r.chains {
		c.touchMax = max(c.touchMax, len(touched[c]))
	}
}

// --- traffic ---

// startPhase enters phase i of chain c at the current time; past the last phase the chain
// takes no new flow, and the run ends once every chain is past its last.
func (r *run) startPhase(c *chainRun, i int) {
	if i >= len(c.tr.phases) {
		c.done, c.flowSeq, c.phaseSeq = true, 0, 0
		for _, o := range r.chains {
			if !o.done {
				return
			}
		}
		r.end = r.now
		return
	}
	c.phase = i
	ph := &c.tr.phases[i]
	c.phStart = r.now // phases that end on a packet count end when they do
	c.phaseSeq = 0
	if ph.DurationS > 0 {
		r.push(r.now+ph.DurationS, evPhase, nil, nil, c)
		c.phaseSeq = r.seq
	}
	r.scheduleFlow(c)
}

// scheduleFlow draws the next flow arrival of c's current phase by thinning.
func (r *run) scheduleFlow(c *chainRun) {
	ph := &c.tr.phases[c.phase]
	lmax := c.lambdaMax(ph)
	if lmax <= 0 {
		c.flowSeq = 0
		return
	}
	t := r.now
	for {
		t += c.rng.ExpFloat64() / lmax
		if ph.DurationS > 0 && t >= c.phStart+ph.DurationS {
			c.flowSeq = 0
			return
		}
		if c.rng.Float64()*lmax <= c.tr.lambda(ph, t-c.phStart) {
			break
		}
	}
	r.push(t, evFlow, nil, nil, c)
	c.flowSeq = r.seq
}

func (c *chainRun) lambdaMax(ph *Phase) float64 {
	if m, ok := c.lmax[c.phase]; ok {
		return m
	}
	span := ph.DurationS
	if span <= 0 {
		span = 1
	}
	m := 0.0
	for i := 0; i <= 1000; i++ {
		m = math.Max(m, c.tr.lambda(ph, span*float64(i)/1000))
	}
	c.lmax[c.phase] = m * 1.05
	return m * 1.05
}

func (r *run) newFlow(c *chainRun) {
	ph := &c.tr.phases[c.phase]
	fs := c.tr.flows
	pps := ph.flowPps
	if fs.RateSigma > 0 {
		pps *= math.Exp(fs.RateSigma*c.rng.NormFloat64() - fs.RateSigma*fs.RateSigma/2)
	}
	f := &flow{start: r.now, end: r.now + c.rng.ExpFloat64()*fs.MeanS, pps: pps, c: c,
		key: fmt.Sprintf("%s#%d", c.spec.Name, c.flows)}
	c.flows++
	r.push(f.end, evFlowEnd, f, nil, nil)
	if !r.assign(f) {
		c.pending = append(c.pending, f)
	}
	r.scheduleFlow(c)
}

// sojournWindowS is the window of an instance's measured sojourn: keel-agent's
// --sojourn-window default.
const sojournWindowS = 5.0

// --- decisions ---

func (r *run) view() *policy.View {
	v := &policy.View{Chains: make(map[string]policy.Chain, len(r.chains)), Workers: r.workers,
		Now: r.epoch.Add(time.Duration(r.now * float64(time.Second)))}
	for _, c := range r.chains {
		v.Chains[c.spec.Name] = c.pchan
	}
	v.Instances = make([]policy.Instance, 0, len(r.insts))
	for _, in := range r.insts {
		if !in.removed {
			v.Instances = append(v.Instances, in.p)
		}
	}
	if r.slo != nil {
		r.slo.Apply(v, v.Now)
	}
	r.mh.Mark(v)
	return v
}

func (r *run) inst(id string) *inst {
	if in := r.byID[id]; in != nil && !in.removed {
		return in
	}
	panic("policy named an unknown instance " + id)
}

func (r *run) create(c *chainRun, worker string) {
	c.nextID++
	id := fmt.Sprintf("%s/%d", c.spec.Name, c.nextID)
	in := &inst{c: c, live: map[*flow]bool{}, p: policy.Instance{ID: id, Chain: c.spec.Name, Worker: worker, Core: -1, Ready: r.now == 0}}
	in.g = dpmodel.NewSGroup(id, c.cost, c.batch, r.sc.QueueCap, &c.hist, c.seed^seedOf(id), r.now)
	in.g.QueueHigh = r.cfg.QueueHigh
	r.insts = append(r.insts, in)
	r.byID[id] = in
	if !in.p.Ready {
		r.push(r.now+r.sc.ColdStartS, evReady, nil, in, nil)
	}
}

func (r *run) pool(c *chainRun) {
	pc := r.cfg.Pool(r.view(), c.spec.Name)
	for _, w := range pc.Create {
		r.create(c, w)
	}
	for _, id := range pc.Remove {
		r.inst(id).removed = true
	}
}

func (r *run) coreOfInst(worker string, core int32) *dpmodel.Core { return r.cores[worker][core] }

func (r *run) attach(in *inst, core int32) {
	c := r.coreOfInst(in.p.Worker, core)
	in.g.Batch = in.c.pchan.CapBatch(r.cfg.BatchFor(in.c.cost, dpmodel.BurstSize))
	c.Attach(in.g, r.now, r.sc.MovePauseMs/1e3)
	in.core = c
	in.win.Reset()
	in.winStart, in.g.Window = r.now, &in.win
	in.p.Attached, in.p.Core, in.p.Batch = true, core, in.g.Batch
	in.g.QueueHigh = r.cfg.QueueHighFor(in.g.Batch)
	in.lastArr, in.lastDrop = in.g.Arrived, in.g.Dropped
	r.countCores()
}

func (r *run) detach(in *inst) {
	in.core.Detach(in.g, r.now)
	if q := in.g.QueueLen(); q > 0 {
		in.c.stranded += uint64(q) // nothing will serve them
	}
	in.core = nil
	in.p.Attached, in.p.Core, in.p.Overloaded, in.p.OverloadReason = false, -1, false, ""
	in.p.IdleSince, in.p.RatePps, in.p.FlowsAtStats, in.p.QueueLen, in.p.NewDrops = time.Time{}, 0, 0, 0, 0
	in.p.SojournP99us, in.g.Window = 0, nil
	r.countCores()
}

// assign asks the policy for an instance of f's chain; false when there is none now.
func (r *run) assign(f *flow) bool {
	a := r.cfg.Assign(r.view(), f.c.spec.Name)
	if a.Instance == "" {
		return false
	}
	in := r.inst(a.Instance)
	if a.Attach {
		r.attach(in, a.Core)
	}
	in.p.Flows++
	in.flowsAlive++
	in.live[f] = true
	r.flowByKey[f.key] = f
	in.p.IdleSince = time.Time{}
	f.in = in
	r.push(r.now+r.sc.TorInstallMs/1e3, evRule, f, nil, nil)
	if a.Attach {
		r.pool(f.c) // the pool lost an instance: replenish it now rather than at the next control tick
	}
	return true
}

func (r *run) retry() {
	for _, c := range r.chains {
		for len(c.pending) > 0 {
			if !r.assign(c.pending[0]) {
				break
			}
			c.pending = c.pending[1:]
		}
	}
}

// ruleIn: the ToR now forwards f to its instance; the packets the ingress held since the
// flow started arrive together.
func (r *run) ruleIn(f *flow) {
	in := f.in
	until := math.Min(f.end, r.now)
	n := dpmodel.Poisson(f.c.rng, f.pps*(until-f.start))
	in.g.Inject(r.now, n, f.start, until)
	r.feed(f, true)
}

// feed makes a live flow's rate feed its instance (on), or stop feeding it.
func (r *run) feed(f *flow, on bool) {
	in := f.in
	switch {
	case on && !f.ended && !f.active:
		f.active = true
		in.active++
		in.rate += f.pps
	case !on && f.active:
		f.active = false
		in.active--
		in.rate -= f.pps
		if in.active == 0 {
			in.rate = 0
		}
	default:
		return
	}
	in.g.SetRate(r.now, in.rate)
}

func (r *run) flowEnd(f *flow) {
	f.ended = true
	in := f.in
	if in == nil {
		c := f.c
		for i, p := range c.pending {
			if p == f {
				c.pending = append(c.pending[:i], c.pending[i+1:]...)
				break
			}
		}
		c.unserved++
		c.unservedPkts += f.pps * (f.end - f.start)
		return
	}
	r.feed(f, false)
	in.p.Flows--
	in.flowsAlive--
	delete(in.live, f)
	delete(r.flowByKey, f.key)
	if in.p.Flows == 0 {
		in.p.IdleSince = r.epoch.Add(time.Duration(r.now * float64(time.Second)))
	}
}

func (r *run) applyOverload() {
	for _, c := range r.cfg.Overload(r.view()) {
		in := r.inst(c.Instance)
		in.p.Overloaded, in.p.OverloadReason = c.Overloaded, ""
		if c.Overloaded {
			in.p.OverloadReason = c.Reason
		}
	}
}

func (r *run) stats() {
	dt := r.sc.StatsMs / 1e3
	for _, c := range r.chains {
		c.offered = 0
	}
	for _, in := range r.insts {
		in.c.offered += in.g.Arrived
		if !in.p.Attached || in.removed {
			continue
		}
		g := in.g
		g.Admit(r.now)
		in.p.RatePps = float64(g.Arrived-in.lastArr) / dt
		in.p.NewDrops = g.Dropped - in.lastDrop
		in.p.QueueLen = g.QueueLen()
		in.p.FlowsAtStats = in.p.Flows
		if in.p.Settling = r.now < in.settleUntil; in.p.Settling {
			in.p.RatePps, in.p.FlowsAtStats = 0, 0
		}
		in.lastArr, in.lastDrop = g.Arrived, g.Dropped
		if r.now-in.winStart >= sojournWindowS {
			in.p.SojournP99us = in.win.Quantile(0.99) * 1e6
			in.win.Reset()
			in.winStart = r.now
		}
	}
	r.applyOverload()
	r.retry()
	if r.cfg.Moves.Enabled {
		r.sloWindows()
	}
	for _, c := range r.chains {
		if ph := c.tr.phases[c.phase]; !c.done && ph.Packets > 0 && float64(c.offered) >= ph.Packets {
			r.startPhase(c, c.phase+1)
		}
	}
}

// alerts: an agent reports an instance at once when its NIC queue reaches QueueHigh.
func (r *run) alerts() {
	any := false
	for _, in := range r.insts {
		if in.g.High {
			in.g.High = false
			if in.p.Attached {
				in.p.QueueLen = in.g.QueueLen()
				in.p.NewDrops = in.g.Dropped - in.lastDrop
				any = true
			}
		}
	}
	if any {
		r.applyOverload()
	}
}

func (r *run) control() {
	for _, id := range r.cfg.Reclaim(r.view()) {
		r.detach(r.inst(id))
	}
	for _, c := range r.chains {
		r.pool(c)
	}
	for _, m := range r.cfg.Repack(r.view()) {
		in := r.inst(m.Instance)
		in.core.Detach(in.g, r.now)
		c := r.coreOfInst(m.Worker, m.To)
		c.Attach(in.g, r.now, r.sc.MovePauseMs/1e3)
		in.core, in.p.Core = c, m.To
		in.c.moves++
	}
	if r.cfg.Moves.Enabled {
		r.flowMoves()
	}
	r.countCores()
	r.retry()
}

// rows are the run's results: a row per chain, then, when chains ran together, the rack's
// row (chain "all": every packet, the cores in use).
func (r *run) rows() []Row {
	var rows []Row
	all := Row{Scenario: r.sc.Name, Policy: r.cfg.Name, Chain: "all", MeetsSLO: true, CoresMax: r.coresMax,
		SimSeconds: round(r.now, 3)}
	var hist dpmodel.Hist
	for _, c := range r.chains {
		var arr, drop uint64
		for _, in := range r.insts {
			if in.c == c {
				arr += in.g.Arrived
				drop += in.g.Dropped
			}
		}
		row := Row{Scenario: r.sc.Name, Policy: r.cfg.Name, Chain: c.spec.Name, SLOus: c.spec.SLOus,
			P99us: round(c.hist.Quantile(0.99)*1e6, 2), P50us: round(c.hist.Quantile(0.5)*1e6, 2),
			MaxUs: round(c.hist.Max()*1e6, 1), Loss: drop + c.stranded + uint64(math.Round(c.unservedPkts)),
			Flows: c.flows, Packets: arr + uint64(math.Round(c.unservedPkts)), Unserved: c.unserved,
			CoresMax: c.touchMax, Threshold: c.pchan.Threshold, Batch: c.batch, MaxPps: math.Round(c.pchan.MaxPps),
			Moves: c.moves, Instances: c.nextID, SimSeconds: round(r.now, 3), FlowMoves: c.flowMoves, MoveSLOMisses: c.sloMisses}
		if r.now > 0 {
			row.CoresAvg = round(c.coresInt/r.now, 3)
			row.MoveCPUCores = round(float64(c.flowMoves)*r.sc.FlowMoveCPUus/1e6/r.now, 4)
		}
		row.MeetsSLO = c.spec.SLOus <= 0 || row.P99us <= c.spec.SLOus
		rows = append(rows, row)
		hist.Merge(&c.hist)
		all.Loss += row.Loss
		all.Flows += row.Flows
		all.Packets += row.Packets
		all.Unserved += row.Unserved
		all.Moves += row.Moves
		all.FlowMoves += row.FlowMoves
		all.MoveSLOMisses += row.MoveSLOMisses
		all.Instances += row.Instances
		all.MeetsSLO = all.MeetsSLO && row.MeetsSLO
	}
	if len(r.chains) == 1 {
		return rows
	}
	all.P99us, all.P50us = round(hist.Quantile(0.99)*1e6, 2), round(hist.Quantile(0.5)*1e6, 2)
	all.MaxUs = round(hist.Max()*1e6, 1)
	if r.now > 0 {
		all.CoresAvg = round(r.coresInt/r.now, 3)
		all.MoveCPUCores = round(float64(all.FlowMoves)*r.sc.FlowMoveCPUus/1e6/r.now, 4)
	}
	return append(rows, all)
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// RunAll runs every scenario under every policy, jobs at a time: each chain on its own, or,
// for a scenario with together, all its chains at once. It returns the rows in scenario,
// chain, policy order (chain "all" last in its scenario).
func RunAll(scs []*Scenario, cfgs []policy.Config, tbl *costs.Table, jobs int, progress io.Writer) ([]Row, error) {
	type job struct {
		sc    *Scenario
		chain string // "" : all the chains together
		cfg   policy.Config
	}
	var js []job
	for _, sc := range scs {
		for _, cfg := range cfgs {
			if sc.Together {
				js = append(js, job{sc, "", cfg})
				continue
			}
			for _, ch := range sc.Chains {
				js = append(js, job{sc, ch.Name, cfg})
			}
		}
	}
	out := make([][]Row, len(js))
	errs := make([]error, len(js))
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < max(1, jobs); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				j := js[i]
				t0 := time.Now()
				label := j.chain
				if j.chain == "" {
					label = "all"
					out[i], errs[i] = RunTogether(j.sc, j.cfg, tbl, progress)
				} else {
					var row Row
					row, errs[i] = Run(j.sc, j.chain, j.cfg, tbl, progress)
					out[i] = []Row{row}
				}
				if progress != nil && errs[i] == nil {
					fmt.Fprintf(progress, "keel-sim: %s/%s/%s done: %.1f s simulated in %.1f s\n",
						j.sc.Name, label, j.cfg.Name, out[i][0].SimSeconds, time.Since(t0).Seconds())
				}
			}
		}()
	}
	for i := range js {
		work <- i
	}
	close(work)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	// Order: scenario, then chain (in the scenario's order, "all" last), then policy.
	var rows []Row
	for _, sc := range scs {
		names := []string{}
		for _, ch := range sc.Chains {
			names = append(names, ch.Name)
		}
		if sc.Together && len(sc.Chains) > 1 {
			names = append(names, "all")
		}
		for _, name := range names {
			for _, cfg := range cfgs {
				for i, j := range js {
					if j.sc != sc || j.cfg.Name != cfg.Name {
						continue
					}
					for _, row := range out[i] {
						if row.Chain == name {
							rows = append(rows, row)
						}
					}
				}
			}
		}
	}
	return rows, nil
}
