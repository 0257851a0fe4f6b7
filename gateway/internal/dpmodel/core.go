// SPDX-License-Identifier: Apache-2.0

// Package dpmodel is a model of keel's data plane on one worker core: the sgroups (chain
// instances) coopsched runs there, each with its bounded NIC queue (VF ring), served in
// turns, round-robin. A turn of an sgroup takes up to B bursts of up to 32 packets from its
// queue and lasts packets × Cost.Cycles(bursts, fill) / Freq (Galleon eq. 1: the NFs, the
// I/O, the copy into the chain buffer and N handoffs per turn for an isolated chain); all
// packets of a turn leave at its end. An idle core waits for the next arrival.
//
// The approximation, to be fast: no packet is an event. A core runs in a tight loop between
// the simulator's control events, one step per turn. At each turn start the packets that
// reached an sgroup's queue since its last look are drawn at once, a Poisson count for the
// interval at the sgroup's current rate (the sum of its flows' rates: Poisson per flow
// aggregate), and stored as one chunk whose arrival times are taken to be evenly spread over
// the interval (in order); latencies of a chunk served by a turn are likewise spread evenly
// over a range. When a core is idle the next arrival is drawn exactly (exponential gap).
// Packet sizes enter only through the mean cost per packet (the costs are linear in size,
// so the mean cycles are right, not their variance). An sgroup with an empty queue costs its
// core nothing (coopsched's empty poll is not modelled).
package dpmodel

import (
	"math"
	"math/rand/v2"

	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// DefaultQueueCap is the VF ring: packets beyond it are lost.
const DefaultQueueCap = 4096

// BurstSize is the NIC's receive burst.
const BurstSize = 32

type chunk struct {
	n    int
	a, b float64 // first and last arrival time
	rel  float64 // > 0: held at the ingress until then (a flow move); the Window counts from it
}

// SGroup is one chain instance attached to a core.
type SGroup struct {
	ID        string
	Cost      policy.Cost
	Batch     int   // bursts per turn
	Cap       int   // NIC queue capacity
	QueueHigh int   // a queue this long sets High (0: never)
	Hist      *Hist // where its packets' latencies go (may be shared)
	Window    *Hist // and, when set, this instance's own (keel-sim's measured sojourn)

	rate        float64 // packets per second arriving now
	last        float64 // arrivals drawn through this time
	q           []chunk
	head        int
	qlen        int
	pausedUntil float64
	rng         *rand.Rand
	core        *Core
	perPkt      float64 // cycles per packet and per turn (from Cost, on first use)
	perTurn     float64

	Arrived, Dropped, Served uint64 // since creation
	QueueMax                 int    // longest queue seen at a turn start
	Turns                    uint64
	// High is set when the queue reaches QueueHigh (HighAt: when first); the simulator
	// clears it when it has reported it.
	High   bool
	HighAt float64
}

// NewSGroup is an sgroup with its own random stream, detached, empty and idle since t.
func NewSGroup(id string, cost policy.Cost, batch, capacity int, hist *Hist, seed uint64, t float64) *SGroup {
	if capacity <= 0 {
		capacity = DefaultQueueCap
	}
	return &SGroup{ID: id, Cost: cost, Batch: max(1, batch), Cap: capacity, Hist: hist, last: t,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Rate is the packets per second arriving now.
func (g *SGroup) Rate() float64 { return g.rate }

// QueueLen is the NIC queue's length after the arrivals drawn so far.
func (g *SGroup) QueueLen() int { return g.qlen }

// Core is where the sgroup is attached (nil: detached).
func (g *SGroup) Core() *Core { return g.core }

// SetRate changes the arrival rate from time t on; the arrivals until t come at the old rate.
// t must not be later than the core's clock (the simulator advances cores first).
func (g *SGroup) SetRate(t, pps float64) {
	g.Admit(t)
	g.rate = math.Max(0, pps)
}

// Inject puts n packets that arrived at times spread over [a, b] (held at the ingress until
// a rule was installed) into the queue at time t ≥ b.
func (g *SGroup) Inject(t float64, n int, a, b float64) {
	g.Admit(t)
	if n <= 0 {
		return
	}
	g.Arrived += uint64(n)
	acc := min(n, g.Cap-g.qlen)
	g.Dropped += uint64(n - acc)
	if acc > 0 {
		g.push(chunk{n: acc, a: a, b: a + (b-a)*float64(acc)/float64(n)}, t)
	}
}

// InjectHeld is Inject for the packets of a moved flow, held at the ingress over [a, b] and
// released at t: their latency (Hist) counts from their arrival, but the instance's own
// measurement (Window: the sojourn from its receive to its transmit) only from t.
func (g *SGroup) InjectHeld(t float64, n int, a, b float64) {
	before := len(g.q)
	g.Inject(t, n, a, b)
	if len(g.q) > before {
		g.q[len(g.q)-1].rel = t
	}
}

// Pause keeps the sgroup from being served until t (a detach/attach in progress); its
// packets wait in its queue.
func (g *SGroup) Pause(until float64) { g.pausedUntil = math.Max(g.pausedUntil, until) }

func (g *SGroup) push(c chunk, t float64) {
	before := g.qlen
	g.q = append(g.q, c)
	g.qlen += c.n
	if g.QueueHigh > 0 && before < g.QueueHigh && g.qlen >= g.QueueHigh && !g.High {
		g.High, g.HighAt = true, t
	}
}

// Admit draws the packets that arrived in (last, t] into the queue; those that find it full
// are lost (the latest of the interval).
func (g *SGroup) Admit(t float64) {
	if t <= g.last {
		return
	}
	dt := t - g.last
	n := Poisson(g.rng, g.rate*dt)
	if n > 0 {
		g.Arrived += uint64(n)
		acc := min(n, g.Cap-g.qlen)
		g.Dropped += uint64(n - acc)
		if acc > 0 {
			step := dt / float64(n)
			g.push(chunk{n: acc, a: g.last + step/2, b: g.last + step*(float64(acc)-0.5)}, t)
		}
	}
	g.last = t
}

// take removes k packets from the head of the queue, recording their latency to dep.
func (g *SGroup) take(k int, dep float64) {
	g.qlen -= k
	g.Served += uint64(k)
	for k > 0 {
		c := &g.q[g.head]
		if c.n <= k {
			g.Hist.AddRange(dep-c.b, dep-c.a, float64(c.n))
			if g.Window != nil && c.rel > 0 {
				g.Window.Add(dep-c.rel, float64(c.n))
			} else if g.Window != nil {
				g.Window.AddRange(dep-c.b, dep-c.a, float64(c.n))
			}
			k -= c.n
			g.head++
			continue
		}
		// the first k of the chunk
		mid := c.a + (c.b-c.a)*float64(k)/float64(c.n)
		g.Hist.AddRange(dep-mid, dep-c.a, float64(k))
		if g.Window != nil && c.rel > 0 {
			g.Window.Add(dep-c.rel, float64(k))
		} else if g.Window != nil {
			g.Window.AddRange(dep-mid, dep-c.a, float64(k))
		}
		c.a, c.n = mid, c.n-k
		k = 0
	}
	if g.head == len(g.q) {
		g.q, g.head = g.q[:0], 0
	} else if g.head > 64 && g.head*2 > len(g.q) {
		g.q = append(g.q[:0], g.q[g.head:]...)
		g.head = 0
	}
}

// Core is one managed core and the sgroups attached to it.
type Core struct {
	FreqHz float64
	T      float64 // the core's clock: the end of its current turn, or the time it idles at
	Busy   float64 // seconds spent in turns
	groups []*SGroup
	rr     int
	rng    *rand.Rand
}

// NewCore is an idle core at time t.
func NewCore(freqHz float64, seed uint64, t float64) *Core {
	return &Core{FreqHz: freqHz, T: t, rng: rand.New(rand.NewPCG(seed, seed^0xd1b54a32d192ed03))}
}

// Groups are the sgroups attached, in turn order.
func (c *Core) Groups() []*SGroup { return c.groups }

// Attach adds g at the end of the turn order at time t (the core's clock), paused until
// t+pause. Its arrivals until t are drawn first (it was wherever it was before).
func (c *Core) Attach(g *SGroup, t, pause float64) {
	g.Admit(t)
	g.core = c
	if pause > 0 {
		g.Pause(t + pause)
	}
	c.groups = append(c.groups, g)
}

// Detach removes g at time t; its queue stays with it.
func (c *Core) Detach(g *SGroup, t float64) {
	g.Admit(t)
	for i, x := range c.groups {
		if x == g {
			c.groups = append(c.groups[:i], c.groups[i+1:]...)
			if c.rr > i {
				c.rr--
			}
			break
		}
	}
	if len(c.groups) > 0 {
		c.rr %= len(c.groups)
	} else {
		c.rr = 0
	}
	g.core = nil
}

// serve runs one turn of g starting at the core's clock.
func (c *Core) serve(g *SGroup) {
	k := min(g.qlen, g.Batch*BurstSize)
	if g.perPkt == 0 {
		// Cost.Cycles(bursts, fill)·k with bursts = ⌈k/32⌉ and fill = k/bursts (≥ 1) is
		// k·(NFs + I/O + copy) + N handoffs: one per NF and turn (TestTurnTime checks it).
		g.perPkt, g.perTurn = g.Cost.Cycles(1, 1), 0
		if g.Cost.Isolated() {
			g.perPkt = g.Cost.SingleCycles() + g.Cost.CopyCycles
			g.perTurn = float64(g.Cost.N()) * g.Cost.HandoffCycles
		}
	}
	s := (float64(k)*g.perPkt + g.perTurn) / c.FreqHz
	dep := c.T + s
	g.take(k, dep)
	g.Turns++
	c.T = dep
	c.Busy += s
}

// RunUntil advances the core to time t: turns, round-robin over the sgroups with packets,
// and idle waits. The last turn may end after t.
func (c *Core) RunUntil(t float64) {
	for c.T < t {
		n := len(c.groups)
		if n == 0 {
			c.T = t
			return
		}
		served := false
		for k := 0; k < n; k++ {
			i := (c.rr + k) % n
			g := c.groups[i]
			if g.pausedUntil > c.T {
				continue
			}
			g.Admit(c.T)
			if g.qlen > g.QueueMax {
				g.QueueMax = g.qlen
			}
			if g.qlen > 0 {
				c.serve(g)
				c.rr = (i + 1) % n
				served = true
				break
			}
		}
		if served {
			continue
		}
		// Idle: every ready sgroup is empty through c.T. Wait for the first arrival of
		// any of them, the end of a pause, or t.
		next, lam := t, 0.0
		for _, g := range c.groups {
			if g.pausedUntil > c.T {
				next = math.Min(next, g.pausedUntil)
				continue
			}
			lam += g.rate
		}
		if lam > 0 {
			ta := c.T + c.rng.ExpFloat64()/lam
			if ta < next {
				u := c.rng.Float64() * lam
				var pick *SGroup
				for _, g := range c.groups {
					if g.pausedUntil > c.T {
						continue
					}
					g.last = ta // no arrival in (c.T, ta) but this one
					if pick == nil && (u < g.rate || g == c.groups[len(c.groups)-1]) {
						pick = g
					}
					u -= g.rate
				}
				if pick == nil { // rounding: the last ready sgroup
					for i := len(c.groups) - 1; i >= 0; i-- {
						if c.groups[i].pausedUntil <= c.T {
							pick = c.groups[i]
							break
						}
					}
				}
				pick.Arrived++
				pick.push(chunk{n: 1, a: ta, b: ta}, ta)
				c.T = ta
				continue
			}
		}
		for _, g := range c.groups {
			if g.pausedUntil <= c.T {
				g.last = math.Max(g.last, next) // none arrived before next
			}
		}
		c.T = next
	}
}

// Poisson draws a Poisson count of mean mu: counting exponential gaps below 10, Hörmann's PTRS
// (transformed rejection with squeeze) above.
func Poisson(r *rand.Rand, mu float64) int {
	if mu <= 0 {
		return 0
	}
	if mu < 10 {
		// unit-rate exponential gaps that fit in mu
		k, s := 0, r.ExpFloat64()
		for s < mu {
			k++
			s += r.ExpFloat64()
		}
		return k
	}
	smu := math.Sqrt(mu)
	b := 0.931 + 2.53*smu
	a := -0.059 + 0.02483*b
	invAlpha := 1.1239 + 1.1328/(b-3.4)
	vr := 0.9277 - 3.6224/(b-2)
	logMu := 0.0 // only the slow path needs it: most draws are accepted by the squeeze
	for {
		u := r.Float64() - 0.5
		v := r.Float64()
		us := 0.5 - math.Abs(u)
		k := math.Floor((2*a/us+b)*u + mu + 0.43)
		if us >= 0.07 && v <= vr {
			return int(k)
		}
		if k < 0 || (us < 0.013 && v > us) {
			continue
		}
		if logMu == 0 {
			logMu = math.Log(mu)
		}
		lg, _ := math.Lgamma(k + 1)
		if math.Log(v)+math.Log(invAlpha)-math.Log(a/(us*us)+b) <= -mu+k*logMu-lg {
			return int(k)
		}
	}
}
