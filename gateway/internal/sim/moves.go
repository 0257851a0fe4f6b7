// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"math"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/dpmodel"
	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// sloWindowS is the window over which keel-sim checks a chain's p99 against its SLO when
// flows move: a window with a move whose p99 misses the SLO is a move's SLO miss.
const sloWindowS = 10.0

// flowMoves runs the controller's move policy (policy.PlanMoves, the code keel-gateway runs
// with a Mover) and applies its plan. A moved flow's packets stop reaching its instance at
// once and are held at the ingress for the scenario's flow_move_pause_ms; then they reach
// the new instance together, in order (moveDone), and the flow's rate feeds it from then on.
// The source serves what its queue holds. An emptied instance gives its core back once its
// queue has drained (emptied). Each moved flow costs flow_move_cpu_us of the control core.
func (r *run) flowMoves() {
	v := r.view()
	flows := map[string][]policy.FlowRate{}
	movable := map[string]bool{}
	for _, c := range r.chains {
		movable[c.spec.Name] = !c.spec.Pinned
	}
	for _, in := range r.insts {
		if in.removed || !in.p.Attached {
			continue
		}
		for f := range in.live {
			if f.active && !f.moving {
				// The rate is the controller's: it knows no per-flow rate, PlanMoves shares
				// the instance's measured rate among its flows.
				flows[in.p.ID] = append(flows[in.p.ID], policy.FlowRate{Key: f.key})
			}
		}
	}
	plan := r.cfg.PlanMoves(v, flows, movable, &r.mh)
	r.mh.Track(plan) // the instances it empties over several plans take no new flows (view)
	if len(plan.Moves) == 0 {
		return
	}
	// The control core moves the flows one after another: the i-th flow of the round is done
	// i × flow_move_cpu_us after the first, so the held packets of the round reach their
	// new instances spread out, not all at once.
	pause, cpu := r.sc.FlowMovePauseMs/1e3, r.sc.FlowMoveCPUus/1e6
	done := r.now + pause
	for _, m := range plan.Moves {
		src, dst := r.inst(m.From), r.inst(m.To)
		for _, key := range m.Flows {
			f := r.flowByKey[key]
			if f == nil || f.in != src {
				panic("policy moved flow " + key + " from " + m.From + ", where it is not")
			}
			r.feed(f, false)
			src.p.Flows--
			src.flowsAlive--
			delete(src.live, f)
			dst.p.Flows++
			dst.flowsAlive++
			dst.live[f] = true
			dst.p.IdleSince = time.Time{}
			// Until a stats report after its last flow's release, its queue and rate hold the
			// released packets: it settles (policy.Instance.Settling).
			dst.settleUntil = math.Max(dst.settleUntil, done+cpu+r.sc.StatsMs/1e3)
			f.in, f.moving, f.heldFrom = dst, true, r.now
			done += cpu
			r.push(done, evMoveDone, f, nil, nil)
			f.c.flowMoves++
			f.c.movedInWin = true
			r.controlBusy += cpu
		}
		if src.p.Flows == 0 {
			src.p.IdleSince = r.epoch.Add(time.Duration(r.now * float64(time.Second)))
		}
	}
	r.mh.Record(r.cfg.Moves, plan.Moves, v.Now)
	for _, id := range plan.Detach {
		r.push(done+1e-3, evDetach, nil, r.inst(id), nil)
	}
}

// moveDone releases a moved flow's held packets to its new instance.
func (r *run) moveDone(f *flow) {
	f.moving = false
	in := f.in
	until := math.Min(f.end, r.now)
	if until > f.heldFrom {
		in.g.InjectHeld(r.now, dpmodel.Poisson(f.c.mrng, f.pps*(until-f.heldFrom)), f.heldFrom, until)
	}
	r.feed(f, true)
}

// emptied detaches an instance the moves emptied, once its queue is served (no packet is
// stranded); a flow assigned to it meanwhile keeps it.
func (r *run) emptied(in *inst) {
	if in.removed || !in.p.Attached || in.p.Flows > 0 {
		return
	}
	if in.g.Admit(r.now); in.g.QueueLen() > 0 {
		r.push(r.now+1e-3, evDetach, nil, in, nil)
		return
	}
	r.detach(in)
}

// sloWindows closes each chain's SLO window every sloWindowS: a window with a flow move
// whose p99 is over the chain's SLO counts as a miss.
func (r *run) sloWindows() {
	for _, c := range r.chains {
		if r.now-c.winStart < sloWindowS {
			continue
		}
		if c.movedInWin && c.spec.SLOus > 0 {
			w := c.hist.Since(&c.snap)
			if w.Quantile(0.99)*1e6 > c.spec.SLOus {
				c.sloMisses++
			}
		}
		c.snap, c.winStart, c.movedInWin = c.hist, r.now, false
	}
}
