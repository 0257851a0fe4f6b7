// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// SLOLoop closes the loop on measured latency (issue 32). Galleon sets a chain's overload
// threshold open loop, from a profile of the chain's p99 against load (§5.2, §7.2.1); keel
// starts from the same model and corrects it with what it measures:
//
//   - Each chain's p99 SLO is split into a network budget (the ToR hops and links, the same
//     for every chain of the rack: NetworkBudgetUs) and a server budget, the rest (at least
//     MinServerShare of the SLO). An instance whose measured server sojourn p99 over the last
//     window is over the server budget counts as overloaded, whatever the model says of its
//     load (policy.Overload, ReasonMeasuredP99): it takes no new flows, so the next one
//     attaches another instance.
//   - The chain's threshold is the model's times a factor, 1 for a new chain: multiplied by
//     Decrease while the worst measured p99 of its attached instances is over the budget,
//     raised by Increase while it is under Under × the budget, never above 1: the model's
//     threshold is the ceiling. (Flows stay on their instance, so a threshold set too high
//     costs latency for as long as the flows it let in last; raised past the model, keel-sim's
//     Galleon scenario took chain2 from p99 81 µs to 162 µs against its 100 µs SLO.) Between
//     the two it stays. Each change holds for Hold, a few measurement windows, so one
//     window's figure moves it at most once (with the dead band, the hysteresis that keeps
//     instances from attaching and detaching in turn).
//   - A figure over the budget acts (mark, cut) only once the chain has been over it for
//     Confirm, two windows in a row: one window's p99 is a few hundred packets' tail, and a
//     chain whose p99 sits just under its budget has single windows over it (keel-sim's
//     random-12: t4, p99 41 µs against 50, took 4 % more cores acting on such windows). Until
//     then an instance's figure counts as the budget itself.
//   - A chain without a measurement (no attached instance reported a window yet) keeps its
//     factor: the model's threshold for a new chain.
//   - Only while the chain has a ready idle instance that could be attached (Attachable) does
//     a measurement over the budget act
//     (mark, cut): otherwise the next flow would wait for a cold start, and lose packets
//     doing so, for the sake of one window's figure. Meanwhile an instance's figure counts
//     as the budget itself, which neither marks nor clears it. (make demo on this machine,
//     without this: pools drained by latency marks, cold starts, and loss.)
//
// The measured figure is position 0's (InstanceStats.p99_us): a tenant's first NF runs in
// that process and could lie about it. A lie costs the tenant itself: too high, and its chain
// gets more of its own instances (its pool and faas-cli scale bound them); too low, and its
// own SLO goes unmet; another chain's decisions never read it.
type SLOLoop struct {
	NetworkBudgetUs float64
	MinServerShare  float64
	Decrease        float64
	Increase        float64
	Under           float64
	MinFactor       float64
	Hold            time.Duration
	Confirm         time.Duration
	// Attachable says whether a ready idle instance could be attached now (policy.Config's
	// CanAttach); nil: any could. An instance that cannot (no core for it: on one managed
	// core, packing's rules) gives a measured overload nowhere to send the next flow, which
	// would then be refused.
	Attachable func(v *policy.View, in *policy.Instance) bool

	chains map[string]*sloChain
}

// sloChain is one chain's state in the loop.
type sloChain struct {
	factor    float64
	changed   time.Time
	overSince time.Time // since when its worst measured p99 has been over the budget (zero: it is not)
}

// NewSLOLoop is keel's loop for a rack whose network takes networkBudgetUs of every SLO.
func NewSLOLoop(networkBudgetUs float64) *SLOLoop {
	return &SLOLoop{NetworkBudgetUs: networkBudgetUs, MinServerShare: 0.1, Decrease: 0.8, Increase: 0.05, Under: 0.5,
		MinFactor: 0.2, Hold: 10 * time.Second, Confirm: 5 * time.Second}
}

// ServerBudget is the server's share of a p99 SLO of sloUs (0: no SLO, no budget).
func (l *SLOLoop) ServerBudget(sloUs float64) float64 {
	if sloUs <= 0 {
		return 0
	}
	return math.Max(sloUs-l.NetworkBudgetUs, l.MinServerShare*sloUs)
}

// ThresholdChange is one chain's threshold moved by the loop.
type ThresholdChange struct {
	Chain      string
	From, To   float64 // thresholds, fractions of a core
	Reason     policy.Reason
	MeasuredUs float64 // the worst measured p99 of its instances
	BudgetUs   float64
}

// Apply adapts each chain of v to its instances' measured p99 (at most once per Hold) and
// sets its server budget and threshold in v; the model's threshold is what v holds on entry
// (the chain's Model). It returns the thresholds that moved now, in chain order. Chains no
// longer in v are forgotten.
func (l *SLOLoop) Apply(v *policy.View, now time.Time) []ThresholdChange {
	if l.chains == nil {
		l.chains = map[string]*sloChain{}
	}
	worst, spare := map[string]float64{}, map[string]bool{}
	for i := range v.Instances {
		in := &v.Instances[i]
		if in.Attached && in.SojournP99us > worst[in.Chain] {
			worst[in.Chain] = in.SojournP99us
		}
		if !in.Attached && in.Ready && !in.Draining && (l.Attachable == nil || l.Attachable(v, in)) {
			spare[in.Chain] = true
		}
	}
	for name := range l.chains {
		if _, ok := v.Chains[name]; !ok {
			delete(l.chains, name)
		}
	}
	names := make([]string, 0, len(v.Chains))
	for name := range v.Chains {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []ThresholdChange
	acts := map[string]bool{} // over the budget for Confirm, with a spare to take the next flow
	for _, name := range names {
		ch := v.Chains[name]
		st := l.chains[name]
		if st == nil {
			st = &sloChain{factor: 1}
			l.chains[name] = st
		}
		model := ch.Threshold
		ch.ServerBudgetUs = l.ServerBudget(ch.SLOus)
		from := model * st.factor
		p99, budget := worst[name], ch.ServerBudgetUs
		switch {
		case p99 <= budget || budget <= 0:
			st.overSince = time.Time{}
		case st.overSince.IsZero():
			st.overSince = now
		}
		acts[name] = spare[name] && !st.overSince.IsZero() && now.Sub(st.overSince) >= l.Confirm
		if p99 > 0 && budget > 0 && now.Sub(st.changed) >= l.Hold {
			var reason policy.Reason
			switch {
			case p99 > budget && st.factor > l.MinFactor && acts[name]:
				st.factor, reason = math.Max(l.MinFactor, st.factor*l.Decrease), policy.ReasonMeasuredP99
			case p99 < l.Under*budget && st.factor < 1:
				st.factor, reason = math.Min(1, st.factor+l.Increase), policy.ReasonMeasuredP99Under
			}
			if reason != "" {
				st.changed = now
				out = append(out, ThresholdChange{Chain: name, From: from, To: model * st.factor, Reason: reason,
					MeasuredUs: p99, BudgetUs: budget})
			}
		}
		ch.Threshold = model * st.factor
		v.Chains[name] = ch
	}
	for i := range v.Instances {
		in := &v.Instances[i]
		if budget := v.Chains[in.Chain].ServerBudgetUs; in.SojournP99us > budget && budget > 0 && !acts[in.Chain] {
			in.SojournP99us = budget
		}
	}
	return out
}

// Text is the change as the decision log says it.
func (c ThresholdChange) Text() string {
	dir := "lowered"
	if c.To > c.From {
		dir = "raised"
	}
	return fmt.Sprintf("threshold: chain %s %s from %.2f to %.2f of a core (measured server p99 %.1f µs, server budget %.1f µs)",
		c.Chain, dir, c.From, c.To, c.MeasuredUs, c.BudgetUs)
}

// applySLO runs the SLO loop on a view the controller just read (s.mu held) and records
// each threshold it moved.
func (s *Controller) applySLO(v *policy.View) {
	if s.SLO == nil {
		return
	}
	if s.SLO.Attachable == nil {
		s.SLO.Attachable = s.Policy.CanAttach
	}
	for _, c := range s.SLO.Apply(v, v.Now) {
		s.decide(policy.Decision{Kind: policy.KindThreshold, Reason: c.Reason, Chain: c.Chain, Core: -1}, "%s", c.Text())
	}
}
