// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"fmt"

	"github.com/keel-nfv/keel/gateway/internal/policy"
	"sync"
	"time"
)

// decisionLog keeps the latest decisions.
type decisionLog struct {
	mu   sync.Mutex
	ring []policy.Decision
	next int
	full bool
}

// DecisionsKept is how many decisions Decisions returns at most.
const DecisionsKept = 256

func (l *decisionLog) add(d policy.Decision) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ring == nil {
		l.ring = make([]policy.Decision, DecisionsKept)
	}
	l.ring[l.next] = d
	l.next = (l.next + 1) % len(l.ring)
	l.full = l.full || l.next == 0
}

func (l *decisionLog) all() []policy.Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.full {
		return append([]policy.Decision(nil), l.ring[:l.next]...)
	}
	return append(append([]policy.Decision(nil), l.ring[l.next:]...), l.ring[:l.next]...)
}

// Decisions returns the controller's latest decisions, oldest first.
func (s *Controller) Decisions() []policy.Decision { return s.decisions.all() }

// decide records a decision: one log line (KIND-WORD: text), the event list, and OnDecision.
func (s *Controller) decide(d policy.Decision, format string, args ...any) {
	d.Time = time.Now().UTC()
	d.Text = fmt.Sprintf(format, args...)
	s.Record(d)
}

// Record keeps a decision made with its text (the function scaler's): log line, event list, OnDecision.
func (s *Controller) Record(d policy.Decision) {
	s.decisions.add(d)
	s.logf("%s", d.Text)
	if s.OnDecision != nil {
		s.OnDecision(d)
	}
}
