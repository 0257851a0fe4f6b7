// SPDX-License-Identifier: Apache-2.0

package control

import (
	"fmt"
	"sync"
	"time"
)

// Decision is one thing the controller did, for the log, the operator's event list and the
// keel_gateway_scale_decisions_total counter.
type Decision struct {
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"`   // attach | predeploy | detach | remove | overload | clear | pack | batch
	Reason   string    `json:"reason"` // bounded: the label of the decision's counter
	Chain    string    `json:"chain"`
	Instance string    `json:"instance"`
	Worker   string    `json:"worker,omitempty"`
	Core     int32     `json:"core"`
	Text     string    `json:"text"` // the log line
}

// Decision kinds and their reasons (bounded sets, for metric labels).
const (
	KindAttach    = "attach"    // reason: no_instance_under_threshold | cold_start
	KindPredeploy = "predeploy" // reason: pool_below_min
	KindDetach    = "detach"    // reason: no_flows
	KindRemove    = "remove"    // reason: pool_above_max | drained | drain_timeout
	KindOverload  = "overload"  // reason: load | queue | drops | shared_core
	KindClear     = "clear"     // reason: below_threshold
	KindPack      = "pack"      // reason: consolidate | split
	KindBatch     = "batch"     // reason: measured_cycles
	// KindFunction is a normal function's replicas changed; Chain is the function.
	KindFunction = "function" // reason: scale_up | scale_down | scale_to_zero | alert
)

// decisionLog keeps the latest decisions.
type decisionLog struct {
	mu   sync.Mutex
	ring []Decision
	next int
	full bool
}

// DecisionsKept is how many decisions Decisions returns at most.
const DecisionsKept = 256

func (l *decisionLog) add(d Decision) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ring == nil {
		l.ring = make([]Decision, DecisionsKept)
	}
	l.ring[l.next] = d
	l.next = (l.next + 1) % len(l.ring)
	l.full = l.full || l.next == 0
}

func (l *decisionLog) all() []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.full {
		return append([]Decision(nil), l.ring[:l.next]...)
	}
	return append(append([]Decision(nil), l.ring[l.next:]...), l.ring[:l.next]...)
}

// Decisions returns the controller's latest decisions, oldest first.
func (s *Server) Decisions() []Decision { return s.decisions.all() }

// decide records a decision: one log line (KIND-WORD: text), the event list, and OnDecision.
func (s *Server) decide(d Decision, format string, args ...any) {
	d.Time = time.Now().UTC()
	d.Text = fmt.Sprintf(format, args...)
	s.Record(d)
}

// Record keeps a decision made with its text (the function scaler's): log line, event list, OnDecision.
func (s *Server) Record(d Decision) {
	s.decisions.add(d)
	s.logf("%s", d.Text)
	if s.OnDecision != nil {
		s.OnDecision(d)
	}
}
