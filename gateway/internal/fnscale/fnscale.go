// SPDX-License-Identifier: Apache-2.0

// Package fnscale is OpenFaaS's autoscaling of normal functions as keel applies it: the
// com.openfaas.scale.* labels read into a Spec, the replicas a measured load asks for, the
// step of an AlertManager alert (OpenFaaS CE's /system/alert), and the stabilisation that
// keeps a function from flapping. It is pure: keel's controller measures and applies.
//
// The labels and their defaults follow OpenFaaS (docs.openfaas.com/architecture/autoscaling):
//
//	com.openfaas.scale.min                lower bound under load (default 1)
//	com.openfaas.scale.max                upper bound (default 20); = min disables scaling
//	com.openfaas.scale.type               rps | capacity | cpu (default rps)
//	com.openfaas.scale.target             load per replica (default: Defaults.Target of the type)
//	com.openfaas.scale.target-proportion  fraction of the target to aim at (default 0.90)
//	com.openfaas.scale.zero               true: scale to zero after zero-duration idle (default false)
//	com.openfaas.scale.zero-duration      idle time before zero, a Go duration (default 15m)
//	com.openfaas.scale.factor             CE's alert step, % of max (default 20; 0: alerts do not scale)
//
// One difference, on purpose: keel's default rps target is 5 requests/s per replica, the
// threshold of OpenFaaS CE's APIHighInvocationRate alert, not OpenFaaS Pro's 50 (CE users,
// and OpenFaaS's own certifier, expect a function to scale out at that rate).
package fnscale

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The labels.
const (
	LabelMin          = "com.openfaas.scale.min"
	LabelMax          = "com.openfaas.scale.max"
	LabelType         = "com.openfaas.scale.type"
	LabelTarget       = "com.openfaas.scale.target"
	LabelProportion   = "com.openfaas.scale.target-proportion"
	LabelZero         = "com.openfaas.scale.zero"
	LabelZeroDuration = "com.openfaas.scale.zero-duration"
	LabelFactor       = "com.openfaas.scale.factor"
)

// Type is what a function scales on.
type Type string

const (
	RPS      Type = "rps"      // completed requests per second, per replica
	Capacity Type = "capacity" // requests in flight, per replica
	CPU      Type = "cpu"      // CPU use in millicores, per replica
)

// Defaults are the values of labels a function does not set.
type Defaults struct {
	Min, Max uint64
	// Target is the per-replica target of each type.
	Target       map[Type]float64
	Proportion   float64
	ZeroDuration time.Duration
	Factor       uint64
}

// OpenFaaS returns OpenFaaS's defaults, with keel's rps target (see the package comment).
func OpenFaaS() Defaults {
	return Defaults{Min: 1, Max: 20, Target: map[Type]float64{RPS: 5, Capacity: 50, CPU: 500},
		Proportion: 0.90, ZeroDuration: 15 * time.Minute, Factor: 20}
}

// Spec is how one function scales.
type Spec struct {
	Min, Max     uint64
	Type         Type
	Target       float64 // per replica, in Type's unit
	Proportion   float64
	Zero         bool
	ZeroDuration time.Duration
	Factor       uint64
}

// Fixed tells whether the function does not scale with load (min = max).
func (s Spec) Fixed() bool { return s.Min == s.Max }

// Error is a label with a value keel cannot use; the message names the label.
type Error struct {
	Label, Value, Want string
}

func (e *Error) Error() string {
	return fmt.Sprintf("labels.%s: %q: %s", e.Label, e.Value, e.Want)
}

// Parse reads a function's scaling labels; labels it does not set take d's values.
func Parse(labels map[string]string, d Defaults) (Spec, error) {
	s := Spec{Min: d.Min, Max: d.Max, Type: RPS, Proportion: d.Proportion, ZeroDuration: d.ZeroDuration, Factor: d.Factor}
	get := func(key string) (string, bool) {
		v, ok := labels[key]
		return strings.TrimSpace(v), ok
	}
	count := func(key string, dst *uint64) error {
		if v, ok := get(key); ok {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil || n < 1 {
				want := "expected a whole number of replicas, at least 1"
				if key == LabelMin && v == "0" {
					want += " (to scale to zero when idle, set " + LabelZero + "=true)"
				}
				return &Error{key, v, want}
			}
			*dst = n
		}
		return nil
	}
	if err := count(LabelMin, &s.Min); err != nil {
		return s, err
	}
	if err := count(LabelMax, &s.Max); err != nil {
		return s, err
	}
	if s.Min > s.Max {
		if _, set := labels[LabelMax]; set {
			return s, &Error{LabelMin, labels[LabelMin], fmt.Sprintf("is above %s=%d", LabelMax, s.Max)}
		}
		s.Max = s.Min // a min above the default max raises the max
	}
	if v, ok := get(LabelType); ok {
		switch t := Type(v); t {
		case RPS, Capacity, CPU:
			s.Type = t
		default:
			return s, &Error{LabelType, v, "expected rps, capacity or cpu"}
		}
	}
	s.Target = d.Target[s.Type]
	if v, ok := get(LabelTarget); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			return s, &Error{LabelTarget, v, fmt.Sprintf("expected a positive load per replica (%s)", s.Type.Unit())}
		}
		s.Target = f
	}
	if v, ok := get(LabelProportion); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 1) {
			return s, &Error{LabelProportion, v, "expected a fraction of the target in (0, 1], e.g. 0.9"}
		}
		s.Proportion = f
	}
	if v, ok := get(LabelZero); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return s, &Error{LabelZero, v, "expected true or false"}
		}
		s.Zero = b
	}
	if v, ok := get(LabelZeroDuration); ok {
		dur, err := time.ParseDuration(v)
		if err != nil || dur <= 0 {
			return s, &Error{LabelZeroDuration, v, "expected a positive duration, e.g. 5m or 30s"}
		}
		s.ZeroDuration = dur
	}
	if v, ok := get(LabelFactor); ok {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n > 100 {
			return s, &Error{LabelFactor, v, "expected a percentage of the maximum replicas, 0 to 100"}
		}
		s.Factor = n
	}
	return s, nil
}

// Unit is what a load of the type is measured in.
func (t Type) Unit() string {
	switch t {
	case Capacity:
		return "requests in flight per replica"
	case CPU:
		return "millicores per replica"
	}
	return "requests per second per replica"
}

// Desired is the replicas a total load (in the Spec's Type unit, over all replicas) asks for:
// enough that each carries at most Proportion of its Target, within [Min, Max]. This is
// OpenFaaS Pro's rule, ceil(load / (target × proportion)).
func (s Spec) Desired(load float64) uint64 {
	n := uint64(0)
	if load > 0 {
		n = uint64(math.Ceil(load / (s.Target * s.Proportion)))
	}
	return max(s.Min, min(s.Max, n))
}

// Alert is the replicas after an AlertManager notification of status "firing" or
// "resolved" for a function at current replicas: OpenFaaS CE's rule, firing adds Factor % of
// Max (at least one replica) up to Max; resolved goes back to Min. Factor 0 or a fixed Spec
// leaves the replicas as they are.
func (s Spec) Alert(status string, current uint64) uint64 {
	if s.Factor == 0 || s.Fixed() {
		return current
	}
	if status != "firing" {
		return s.Min
	}
	step := max(uint64(1), uint64(math.Ceil(float64(s.Max)*float64(s.Factor)/100)))
	return max(s.Min, min(s.Max, current+step))
}

// Stabilizer keeps scale-down from following every dip: it applies the highest
// recommendation of the last Window (scale-up is immediate). Kubernetes' HPA does the same
// (its downscale stabilisation window).
type Stabilizer struct {
	Window time.Duration
	recs   []rec
}

type rec struct {
	at time.Time
	n  uint64
}

// Next records the recommendation n at now and returns what to apply.
func (st *Stabilizer) Next(now time.Time, n uint64) uint64 {
	keep := st.recs[:0]
	for _, r := range st.recs {
		if now.Sub(r.at) < st.Window {
			keep = append(keep, r)
		}
	}
	st.recs = append(keep, rec{now, n})
	out := uint64(0)
	for _, r := range st.recs {
		out = max(out, r.n)
	}
	return out
}

// Reset forgets the recommendations (after replicas were set by hand, from zero or by alert).
func (st *Stabilizer) Reset() { st.recs = st.recs[:0] }
