// SPDX-License-Identifier: Apache-2.0

// Package sim is keel's rack-scale simulator: workers with managed cores (dpmodel), a ToR
// that installs a new flow's rule after a delay, flows arriving by phase, pre-deployed pools
// of chain instances, and keel's real controller policy (gateway/internal/policy) called at
// every decision: Assign for each new flow, Overload on each stats report (every stats_ms,
// and at once when a NIC queue reaches QueueHigh), Reclaim, Pool and Repack every
// control_ms, BatchFor at attach. It is a discrete-event simulation (an event heap and a
// clock) with seeded randomness: the same scenario, policy and costs give the same result.
//
// Each chain of a scenario runs on its own in the rack (as Galleon ran each chain's
// experiment on its own), once per policy.
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

	"github.com/keel-nfv/keel/gateway/internal/costs"
	"github.com/keel-nfv/keel/gateway/internal/dpmodel"
	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// Row is one chain under one policy in one scenario.
type Row struct {
	Scenario   string  `json:"scenario"`
	Policy     string  `json:"policy"`
	Chain      string  `json:"chain"`
	SLOus      float64 `json:"slo_us"`
	P99us      float64 `json:"p99_us"`
	Loss       uint64  `json:"loss"`
	CoresAvg   float64 `json:"cores_avg"`
	CoresMax   int     `json:"cores_max"`
	P50us      float64 `json:"p50_us"`
	MaxUs      float64 `json:"max_us"`
	MeetsSLO   bool    `json:"meets_slo"`
	Flows      int     `json:"flows"`
	Packets    uint64  `json:"packets"`
	Unserved   int     `json:"unserved_flows"` // flows that ended before any instance took them
	Threshold  float64 `json:"threshold"`
	Batch      int     `json:"batch"`
	MaxPps     float64 `json:"max_pps"`
	Moves      int     `json:"moves"`
	Instances  int     `json:"instances_created"`
	SimSeconds float64 `json:"sim_seconds"`
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
		default:
			return nil, fmt.Errorf("unknown policy %q (keel or metron)", n)
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
	}
	return out, nil
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

// ChainCost is the cost a policy's instances of the chain pay at the scenario's mean packet
// size and clock: isolated for keel, run to completion for a policy without isolation.
func ChainCost(tbl *costs.Table, sc *Scenario, ch ChainSpec, cfg policy.Config) (policy.Cost, error) {
	c, err := tbl.ChainAt(ch.NFs, sc.MeanBytes(), sc.GHz*1e9)
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
)

type event struct {
	t    float64
	seq  uint64
	kind evKind
	f    *flow
	in   *inst
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
	in              *inst
	active          bool // its rule is in: its rate feeds the instance
	ended           bool
}

type inst struct {
	p          policy.Instance
	g          *dpmodel.SGroup
	core       *dpmodel.Core
	lastArr    uint64
	lastDrop   uint64
	readyAt    float64
	removed    bool
	flowsAlive int
	active     int     // flows whose rule is in
	rate       float64 // their packets per second
}

type run struct {
	sc    *Scenario
	cfg   policy.Config
	ch    ChainSpec
	cost  policy.Cost
	batch int
	pchan policy.Chain
	rng   *rand.Rand
	seed  uint64

	now     float64
	seq     uint64
	ev      evHeap
	phase   int
	workers []policy.Worker
	cores   map[string][]*dpmodel.Core
	coreOf  []*dpmodel.Core // all cores, worker-major, for advancing
	insts   []*inst         // by creation (ID order)
	nextID  int
	pending []*flow
	hist    dpmodel.Hist
	epoch   time.Time

	// results
	flows, unserved, moves    int
	unservedPkts              float64
	coresInt                  float64
	coresNow, coresMax        int
	lastT                     float64
	offered, stranded         uint64
	retiredArr, retiredDrop   uint64
	end                       float64
	progress                  io.Writer
	flowSeq, phaseSeq         uint64 // the live flow-arrival and phase-end events
	lmax                      map[int]float64
	phStart                   float64
	lastProgress, wallStarted time.Time
}

func (r *run) push(t float64, k evKind, f *flow, in *inst) {
	r.seq++
	heap.Push(&r.ev, &event{t: t, seq: r.seq, kind: k, f: f, in: in})
}

func seedOf(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// Run simulates one chain of a scenario under one policy. progress (may be nil) gets a line
// every few seconds of wall time.
func Run(sc *Scenario, chain string, cfg policy.Config, tbl *costs.Table, progress io.Writer) (Row, error) {
	var ch ChainSpec
	for _, c := range sc.Chains {
		if c.Name == chain {
			ch = c
		}
	}
	if ch.Name == "" {
		return Row{}, fmt.Errorf("%s: no chain %q", sc.file, chain)
	}
	cost, err := ChainCost(tbl, sc, ch, cfg)
	if err != nil {
		return Row{}, fmt.Errorf("%s: chain %s: %v", sc.file, chain, err)
	}
	batch := cfg.BatchFor(cost, dpmodel.BurstSize)
	pc := policy.Chain{Name: ch.Name, SLOus: ch.SLOus, MaxPps: cost.Rate(batch, dpmodel.BurstSize)}
	if cfg.SLOThresholds {
		prof := ProfileFor(ch.Name, cost, batch, int(math.Round(sc.MeanBytes())), sc.Seed)
		pc.Threshold = cfg.ThresholdFor(&prof, ch.SLOus)
	} else {
		pc.Threshold = cfg.ThresholdFor(nil, ch.SLOus)
	}
	seed := sc.Seed ^ seedOf(sc.Name, ch.Name)
	r := &run{sc: sc, cfg: cfg, ch: ch, cost: cost, batch: batch, pchan: pc, seed: seed,
		rng: rand.New(rand.NewPCG(seed, 0x5eed)), cores: map[string][]*dpmodel.Core{}, progress: progress, lmax: map[int]float64{},
		epoch: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), end: sc.MaxSeconds}
	for w := 0; w < sc.Workers; w++ {
		name := fmt.Sprintf("w%02d", w)
		pw := policy.Worker{Name: name}
		for c := 0; c < sc.Cores; c++ {
			pw.Cores = append(pw.Cores, int32(c))
			core := dpmodel.NewCore(sc.GHz*1e9, seedOf(name, fmt.Sprint(c))^seed, 0)
			r.cores[name] = append(r.cores[name], core)
			r.coreOf = append(r.coreOf, core)
		}
		r.workers = append(r.workers, pw)
	}
	// The pool is deployed before the traffic starts.
	r.pool()
	r.startPhase(0)
	r.push(sc.StatsMs/1e3, evStats, nil, nil)
	r.push(sc.ControlMs/1e3, evControl, nil, nil)
	r.wallStarted, r.lastProgress = time.Now(), time.Now()
	r.loop()
	return r.row(), nil
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
			if e.seq == r.phaseSeq {
				r.startPhase(r.phase + 1)
			}
		case evFlow:
			if e.seq == r.flowSeq {
				r.newFlow()
			}
		case evRule:
			r.ruleIn(e.f)
		case evFlowEnd:
			r.flowEnd(e.f)
		case evStats:
			r.stats()
			r.push(r.now+r.sc.StatsMs/1e3, evStats, nil, nil)
		case evControl:
			r.control()
			r.push(r.now+r.sc.ControlMs/1e3, evControl, nil, nil)
		case evReady:
			if !e.in.removed {
				e.in.p.Ready = true
				r.retry()
			}
		}
		r.alerts()
		if r.progress != nil && time.Since(r.lastProgress) > 3*time.Second {
			r.lastProgress = time.Now()
			fmt.Fprintf(r.progress, "keel-sim: %s/%s/%s: t=%.0f s, %d flows, %d cores, %.1f M packets, wall %.0f s\n",
				r.sc.Name, r.ch.Name, r.cfg.Name, r.now, r.flowsAlive(), r.coresNow, float64(r.offered)/1e6,
				time.Since(r.wallStarted).Seconds())
		}
	}
}

func (r *run) flowsAlive() int {
	n := len(r.pending)
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
		r.now = t
	}
}

func (r *run) countCores() {
	n := 0
	for _, c := range r.coreOf {
		if len(c.Groups()) > 0 {
			n++
		}
	}
	r.coresNow = n
	r.coresMax = max(r.coresMax, n)
}

// --- traffic ---

// startPhase enters phase i at the current time.
func (r *run) startPhase(i int) {
	if i >= len(r.sc.Phases) {
		r.end = r.now
		return
	}
	r.phase = i
	ph := &r.sc.Phases[i]
	r.phStart = r.now // phases that end on a packet count end when they do
	r.phaseSeq = 0
	if ph.DurationS > 0 {
		r.push(r.now+ph.DurationS, evPhase, nil, nil)
		r.phaseSeq = r.seq
	}
	r.scheduleFlow()
}

// scheduleFlow draws the next flow arrival of the current phase by thinning.
func (r *run) scheduleFlow() {
	ph := &r.sc.Phases[r.phase]
	lmax := r.lambdaMax(ph)
	if lmax <= 0 {
		r.flowSeq = 0
		return
	}
	t := r.now
	for {
		t += r.rng.ExpFloat64() / lmax
		if ph.DurationS > 0 && t >= r.phStart+ph.DurationS {
			r.flowSeq = 0
			return
		}
		if r.rng.Float64()*lmax <= r.sc.lambda(ph, t-r.phStart) {
			break
		}
	}
	r.push(t, evFlow, nil, nil)
	r.flowSeq = r.seq
}

func (r *run) lambdaMax(ph *Phase) float64 {
	if m, ok := r.lmax[r.phase]; ok {
		return m
	}
	span := ph.DurationS
	if span <= 0 {
		span = 1
	}
	m := 0.0
	for i := 0; i <= 1000; i++ {
		m = math.Max(m, r.sc.lambda(ph, span*float64(i)/1000))
	}
	r.lmax[r.phase] = m * 1.05
	return m * 1.05
}

func (r *run) newFlow() {
	ph := &r.sc.Phases[r.phase]
	fs := r.sc.Flows
	pps := ph.flowPps
	if fs.RateSigma > 0 {
		pps *= math.Exp(fs.RateSigma*r.rng.NormFloat64() - fs.RateSigma*fs.RateSigma/2)
	}
	f := &flow{start: r.now, end: r.now + r.rng.ExpFloat64()*fs.MeanS, pps: pps}
	r.flows++
	r.push(f.end, evFlowEnd, f, nil)
	if !r.assign(f) {
		r.pending = append(r.pending, f)
	}
	r.scheduleFlow()
}

// --- decisions ---

func (r *run) view() *policy.View {
	v := &policy.View{Chains: map[string]policy.Chain{r.ch.Name: r.pchan}, Workers: r.workers,
		Now: r.epoch.Add(time.Duration(r.now * float64(time.Second)))}
	v.Instances = make([]policy.Instance, 0, len(r.insts))
	for _, in := range r.insts {
		if !in.removed {
			v.Instances = append(v.Instances, in.p)
		}
	}
	return v
}

func (r *run) inst(id string) *inst {
	for _, in := range r.insts {
		if in.p.ID == id && !in.removed {
			return in
		}
	}
	panic("policy named an unknown instance " + id)
}

func (r *run) create(worker string) {
	r.nextID++
	id := fmt.Sprintf("%s/%d", r.ch.Name, r.nextID)
	in := &inst{p: policy.Instance{ID: id, Chain: r.ch.Name, Worker: worker, Core: -1, Ready: r.now == 0}}
	in.g = dpmodel.NewSGroup(id, r.cost, r.batch, r.sc.QueueCap, &r.hist, r.seed^seedOf(id), r.now)
	in.g.QueueHigh = r.cfg.QueueHigh
	r.insts = append(r.insts, in)
	if !in.p.Ready {
		r.push(r.now+r.sc.ColdStartS, evReady, nil, in)
	}
}

func (r *run) pool() {
	pc := r.cfg.Pool(r.view(), r.ch.Name)
	for _, w := range pc.Create {
		r.create(w)
	}
	for _, id := range pc.Remove {
		r.inst(id).removed = true
	}
}

func (r *run) coreOfInst(worker string, core int32) *dpmodel.Core { return r.cores[worker][core] }

func (r *run) attach(in *inst, core int32) {
	c := r.coreOfInst(in.p.Worker, core)
	in.g.Batch = r.cfg.BatchFor(r.cost, dpmodel.BurstSize)
	c.Attach(in.g, r.now, r.sc.MovePauseMs/1e3)
	in.core = c
	in.p.Attached, in.p.Core, in.p.Batch = true, core, in.g.Batch
	in.lastArr, in.lastDrop = in.g.Arrived, in.g.Dropped
	r.countCores()
}

func (r *run) detach(in *inst) {
	in.core.Detach(in.g, r.now)
	if q := in.g.QueueLen(); q > 0 {
		r.stranded += uint64(q) // nothing will serve them
	}
	in.core = nil
	in.p.Attached, in.p.Core, in.p.Overloaded = false, -1, false
	in.p.IdleSince, in.p.RatePps, in.p.FlowsAtStats, in.p.QueueLen, in.p.NewDrops = time.Time{}, 0, 0, 0, 0
	r.countCores()
}

// assign asks the policy for an instance for f; false when there is none now.
func (r *run) assign(f *flow) bool {
	a := r.cfg.Assign(r.view(), r.ch.Name)
	if a.Instance == "" {
		return false
	}
	in := r.inst(a.Instance)
	if a.Attach {
		r.attach(in, a.Core)
	}
	in.p.Flows++
	in.flowsAlive++
	in.p.IdleSince = time.Time{}
	f.in = in
	r.push(r.now+r.sc.TorInstallMs/1e3, evRule, f, nil)
	if a.Attach {
		r.pool() // the pool lost an instance: replenish it now rather than at the next control tick
	}
	return true
}

func (r *run) retry() {
	for len(r.pending) > 0 {
		if !r.assign(r.pending[0]) {
			return
		}
		r.pending = r.pending[1:]
	}
}

// ruleIn: the ToR now forwards f to its instance; the packets the ingress held since the
// flow started arrive together.
func (r *run) ruleIn(f *flow) {
	in := f.in
	until := math.Min(f.end, r.now)
	n := dpmodel.Poisson(r.rng, f.pps*(until-f.start))
	in.g.Inject(r.now, n, f.start, until)
	if !f.ended {
		f.active = true
		in.active++
		in.rate += f.pps
		in.g.SetRate(r.now, in.rate)
	}
}

func (r *run) flowEnd(f *flow) {
	f.ended = true
	in := f.in
	if in == nil {
		for i, p := range r.pending {
			if p == f {
				r.pending = append(r.pending[:i], r.pending[i+1:]...)
				break
			}
		}
		r.unserved++
		r.unservedPkts += f.pps * (f.end - f.start)
		return
	}
	if f.active {
		in.active--
		in.rate -= f.pps
		if in.active == 0 {
			in.rate = 0
		}
		in.g.SetRate(r.now, in.rate)
	}
	in.p.Flows--
	in.flowsAlive--
	if in.p.Flows == 0 {
		in.p.IdleSince = r.epoch.Add(time.Duration(r.now * float64(time.Second)))
	}
}

func (r *run) applyOverload() {
	for _, c := range r.cfg.Overload(r.view()) {
		r.inst(c.Instance).p.Overloaded = c.Overloaded
	}
}

func (r *run) stats() {
	dt := r.sc.StatsMs / 1e3
	var offered uint64
	for _, in := range r.insts {
		offered += in.g.Arrived
		if !in.p.Attached || in.removed {
			continue
		}
		g := in.g
		g.Admit(r.now)
		in.p.RatePps = float64(g.Arrived-in.lastArr) / dt
		in.p.NewDrops = g.Dropped - in.lastDrop
		in.p.QueueLen = g.QueueLen()
		in.p.FlowsAtStats = in.p.Flows
		in.lastArr, in.lastDrop = g.Arrived, g.Dropped
	}
	r.offered = offered
	r.applyOverload()
	r.retry()
	if ph := r.sc.Phases[r.phase]; ph.Packets > 0 && float64(r.offered) >= ph.Packets {
		r.startPhase(r.phase + 1)
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
	r.pool()
	for _, m := range r.cfg.Repack(r.view()) {
		in := r.inst(m.Instance)
		in.core.Detach(in.g, r.now)
		c := r.coreOfInst(m.Worker, m.To)
		c.Attach(in.g, r.now, r.sc.MovePauseMs/1e3)
		in.core, in.p.Core = c, m.To
		r.moves++
	}
	r.countCores()
	r.retry()
}

func (r *run) row() Row {
	var arr, drop uint64
	for _, in := range r.insts {
		arr += in.g.Arrived
		drop += in.g.Dropped
	}
	row := Row{Scenario: r.sc.Name, Policy: r.cfg.Name, Chain: r.ch.Name, SLOus: r.ch.SLOus,
		P99us: round(r.hist.Quantile(0.99)*1e6, 2), P50us: round(r.hist.Quantile(0.5)*1e6, 2),
		MaxUs: round(r.hist.Max()*1e6, 1), Loss: drop + r.stranded + uint64(math.Round(r.unservedPkts)),
		Flows: r.flows, Packets: arr + uint64(math.Round(r.unservedPkts)), Unserved: r.unserved,
		CoresMax: r.coresMax, Threshold: r.pchan.Threshold, Batch: r.batch, MaxPps: math.Round(r.pchan.MaxPps),
		Moves: r.moves, Instances: r.nextID, SimSeconds: round(r.now, 3)}
	if r.now > 0 {
		row.CoresAvg = round(r.coresInt/r.now, 3)
	}
	row.MeetsSLO = r.ch.SLOus <= 0 || row.P99us <= r.ch.SLOus
	return row
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// RunAll runs every chain of every scenario under every policy, jobs at a time, and returns
// the rows in scenario, chain, policy order.
func RunAll(scs []*Scenario, cfgs []policy.Config, tbl *costs.Table, jobs int, progress io.Writer) ([]Row, error) {
	type job struct {
		i   int
		sc  *Scenario
		ch  string
		cfg policy.Config
	}
	var js []job
	for _, sc := range scs {
		for _, ch := range sc.Chains {
			for _, cfg := range cfgs {
				js = append(js, job{len(js), sc, ch.Name, cfg})
			}
		}
	}
	rows := make([]Row, len(js))
	errs := make([]error, len(js))
	work := make(chan job)
	var wg sync.WaitGroup
	for w := 0; w < max(1, jobs); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				t0 := time.Now()
				rows[j.i], errs[j.i] = Run(j.sc, j.ch, j.cfg, tbl, progress)
				if progress != nil && errs[j.i] == nil {
					fmt.Fprintf(progress, "keel-sim: %s/%s/%s done: %.1f s simulated in %.1f s\n",
						j.sc.Name, j.ch, j.cfg.Name, rows[j.i].SimSeconds, time.Since(t0).Seconds())
				}
			}
		}()
	}
	for _, j := range js {
		work <- j
	}
	close(work)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rows, nil
}
