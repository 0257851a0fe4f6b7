// SPDX-License-Identifier: Apache-2.0

// Package reconcile computes what keel-agent must do to turn the chain instances it runs
// into the ones the gateway wants: a pure function of desired and actual state, so the
// controller's decisions are unit-tested without Docker, OVS or coopsched.
package reconcile

import (
	"fmt"
	"sort"
	"time"
)

// GroupState is the coopsched sgroup of an instance as Status reports it.
type GroupState int

// The sgroup states; GroupNone: coopsched has no group of that id (not yet registered).
const (
	GroupNone GroupState = iota
	GroupDetached
	GroupAttached
	GroupDetaching
	GroupCutOff
	GroupFailed
	GroupFinished // every NF thread exited cleanly (a chain that closed on purpose)
)

func (g GroupState) String() string {
	return [...]string{"none", "detached", "attached", "detaching", "cut-off", "failed", "finished"}[g]
}

// Desired is a chain instance as the gateway wants it on this worker.
type Desired struct {
	ID      string
	Tenant  string
	Members int    // NF containers, one per server-placed NF
	Spec    string // hash of everything that defines its containers and VF
	Core    int32  // >= 0: attached on that core; -1: pooled (detached)
	Batch   uint32 // > 0: coopsched SetBatch
}

// Container is one NF container of an instance as the runtime reports it.
type Container struct {
	Position int
	Spec     string // the com.keel.spec label
	Running  bool
	Why      string // when not running: exit code, OOM kill or runtime error
}

// Actual is what exists on the worker for one instance id.
type Actual struct {
	ID         string
	Containers []Container
	Created    time.Time // the oldest container's creation
	VF         bool      // its VF exists and is wired (OVS port + netdev, or SR-IOV VF)
	Group      GroupState
	GroupCore  int32
	GroupBatch uint32
	Dir        bool // its pktbuf or secrets directory exists
}

// Exists reports whether anything of the instance but its directory exists.
func (a *Actual) Exists() bool {
	return len(a.Containers) > 0 || a.VF || a.Group != GroupNone
}

// Kind says what an action does.
type Kind int

// The actions, each idempotent.
const (
	// Create builds the instance: directory, containers, VF (the group forms by itself).
	Create Kind = iota
	// Replace tears the instance down and creates it again at once (its spec changed).
	Replace
	// Fail tears a broken instance down keeping its NF state; Create follows after a backoff.
	Fail
	// Remove tears the instance down and deletes its NF state: the gateway no longer wants it.
	Remove
	// Attach lets the detached sgroup run on Core.
	Attach
	// Detach stops the sgroup at a batch boundary.
	Detach
	// SetBatch sets the bursts per turn.
	SetBatch
)

func (k Kind) String() string {
	return [...]string{"create", "replace", "fail", "remove", "attach", "detach", "set-batch"}[k]
}

// Slow reports whether the action starts or stops containers (run off the control loop).
func (k Kind) Slow() bool { return k <= Remove }

// Action is one step toward the desired state.
type Action struct {
	Kind   Kind
	ID     string
	Core   int32
	Batch  uint32
	Reason string
}

func (a Action) String() string {
	s := a.Kind.String() + " " + a.ID
	switch a.Kind {
	case Attach:
		s += fmt.Sprintf(" core %d", a.Core)
	case SetBatch:
		s += fmt.Sprintf(" batch %d", a.Batch)
	}
	if a.Reason != "" {
		s += ": " + a.Reason
	}
	return s
}

// Input is everything Diff looks at.
type Input struct {
	Now     time.Time
	Synced  bool // the gateway's snapshot is complete: what it does not name may go
	Desired map[string]Desired
	Actual  map[string]Actual
	// Busy instances have a slow action in flight: Diff leaves them alone.
	Busy map[string]bool
	// NotBefore holds failed instances that may not be rebuilt before the given time (their
	// NF state is kept for the rebuild; one no longer desired is removed, state and all).
	NotBefore map[string]time.Time
	// RegisterTimeout bounds how long containers may run before their sgroup forms.
	RegisterTimeout time.Duration
}

// Diff returns the actions that move the actual state toward the desired one, at most one
// slow action per instance, in instance id order.
func Diff(in Input) []Action {
	ids := map[string]bool{}
	for id := range in.Desired {
		ids[id] = true
	}
	for id := range in.Actual {
		ids[id] = true
	}
	for id := range in.NotBefore {
		ids[id] = true
	}
	sorted := make([]string, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Strings(sorted)
	var out []Action
	for _, id := range sorted {
		if in.Busy[id] {
			continue
		}
		d, want := in.Desired[id]
		a, have := in.Actual[id]
		switch {
		case !want:
			// A failed instance awaiting its rebuild has nothing on the worker, but its NF
			// state stays in Redis for the rebuild to carry on with (NAT mappings): once it
			// is no longer desired, Remove deletes that too.
			_, failed := in.NotBefore[id]
			if in.Synced && (have && (a.Exists() || a.Dir) || failed) {
				out = append(out, Action{Kind: Remove, ID: id, Reason: "not desired"})
			}
		case !have || !a.Exists():
			if t, ok := in.NotBefore[id]; ok && in.Now.Before(t) {
				continue
			}
			out = append(out, Action{Kind: Create, ID: id})
		default:
			out = append(out, diffOne(in, d, a)...)
		}
	}
	return out
}

func diffOne(in Input, d Desired, a Actual) []Action {
	for _, c := range a.Containers {
		if c.Spec != d.Spec {
			return []Action{{Kind: Replace, ID: d.ID, Reason: "spec changed"}}
		}
	}
	if why := Broken(d, a, in.Now, in.RegisterTimeout); why != "" {
		return []Action{{Kind: Fail, ID: d.ID, Reason: why}}
	}
	if a.Group != GroupDetached && a.Group != GroupAttached {
		return nil // still forming, or detaching
	}
	var out []Action
	if d.Batch > 0 && d.Batch != a.GroupBatch {
		out = append(out, Action{Kind: SetBatch, ID: d.ID, Batch: d.Batch})
	}
	switch {
	case d.Core < 0 && a.Group == GroupAttached:
		out = append(out, Action{Kind: Detach, ID: d.ID, Reason: "pooled"})
	case d.Core >= 0 && a.Group == GroupAttached && a.GroupCore != d.Core:
		out = append(out, Action{Kind: Detach, ID: d.ID, Reason: fmt.Sprintf("moves from core %d to %d", a.GroupCore, d.Core)})
	case d.Core >= 0 && a.Group == GroupDetached:
		out = append(out, Action{Kind: Attach, ID: d.ID, Core: d.Core})
	}
	return out
}

// Broken returns why an existing instance cannot work and must be rebuilt, or "".
func Broken(d Desired, a Actual, now time.Time, registerTimeout time.Duration) string {
	seen := map[int]bool{}
	for _, c := range a.Containers {
		if !c.Running {
			return fmt.Sprintf("NF container %d: %s", c.Position, c.Why)
		}
		seen[c.Position] = true
	}
	for k := 0; k < d.Members; k++ {
		if !seen[k] {
			return fmt.Sprintf("NF container %d is missing", k)
		}
	}
	if len(a.Containers) > d.Members {
		return fmt.Sprintf("%d NF containers for %d NFs", len(a.Containers), d.Members)
	}
	if !a.VF {
		return "its VF is missing"
	}
	switch a.Group {
	case GroupFailed:
		return "coopsched: an NF thread exited"
	case GroupCutOff:
		return "coopsched: the watchdog cut the chain off (an NF held the core too long)"
	case GroupFinished:
		return "coopsched: the chain's NFs exited (cleanly, but the instance should be running)"
	case GroupNone:
		if registerTimeout > 0 && !a.Created.IsZero() && now.Sub(a.Created) > registerTimeout {
			return fmt.Sprintf("the NFs did not register with coopsched within %s", registerTimeout)
		}
	}
	return ""
}

// Phase is what the agent reports for a desired instance: starting, ready or failed.
func Phase(d Desired, a Actual, failed bool) string {
	switch {
	case failed && !a.Exists():
		return "failed"
	case a.Exists() && (a.Group == GroupDetached || a.Group == GroupAttached || a.Group == GroupDetaching) &&
		Broken(d, a, time.Time{}, 0) == "":
		return "ready"
	default:
		return "starting"
	}
}

// Backoff is the delay before the n-th consecutive rebuild of a failed instance:
// 1 s doubling up to 60 s, so a missing image never crash-loops.
func Backoff(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := time.Second
	for i := 1; i < n && d < time.Minute; i++ {
		d *= 2
	}
	if d > time.Minute {
		d = time.Minute
	}
	return d
}
