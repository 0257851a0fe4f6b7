// SPDX-License-Identifier: Apache-2.0

package policy

import "time"

// Kind is what a controller decision did. Metrics label their counter with it and the UI
// shows it as it is: a bounded set, never parsed.
type Kind string

// Decision kinds.
const (
	KindAttach    Kind = "attach"    // an idle instance took a core for a new flow
	KindPredeploy Kind = "predeploy" // one more idle instance in the pool
	KindDetach    Kind = "detach"    // an instance without flows gave its core back
	KindRemove    Kind = "remove"    // an instance went (pool too large, or drained)
	KindOverload  Kind = "overload"  // an instance takes no new flows
	KindClear     Kind = "clear"     // an overloaded instance takes new flows again
	KindPack      Kind = "pack"      // an instance moved to another core of its worker
	KindBatch     Kind = "batch"     // an instance's bursts per turn changed
	KindFunction  Kind = "function"  // a normal function's replicas changed; Chain is the function
	KindThreshold Kind = "threshold" // a chain's overload threshold moved with its measured p99
	KindFlowMove  Kind = "flow_move" // flows moved to another instance with their state
)

// Reason is why a decision was made: a bounded set (the label of
// keel_gateway_scale_decisions_total), one or more per Kind.
type Reason string

// Decision reasons, by the kind they go with.
const (
	ReasonNoInstanceUnderThreshold Reason = "no_instance_under_threshold" // attach
	ReasonColdStart                Reason = "cold_start"                  // attach: no idle instance was ready
	ReasonPoolBelowMin             Reason = "pool_below_min"              // predeploy
	ReasonNoFlows                  Reason = "no_flows"                    // detach
	ReasonFlowsMoved               Reason = "flows_moved"                 // detach: its flows moved to other instances
	ReasonPoolAboveMax             Reason = "pool_above_max"              // remove
	ReasonDrained                  Reason = "drained"                     // remove: a draining instance's flows ended
	ReasonDrainTimeout             Reason = "drain_timeout"               // remove: its drain time was up
	ReasonLoad                     Reason = "load"                        // overload: load ≥ threshold
	ReasonQueue                    Reason = "queue"                       // overload: NIC queue ≥ QueueHigh
	ReasonDrops                    Reason = "drops"                       // overload: packets dropped
	ReasonSharedCore               Reason = "shared_core"                 // overload: its shared core is full
	ReasonMeasuredP99              Reason = "measured_p99"                // overload, threshold: measured server p99 over budget
	ReasonMeasuredP99Under         Reason = "measured_p99_under"          // threshold: measured server p99 well under budget
	ReasonBelowThreshold           Reason = "below_threshold"             // clear
	ReasonDetached                 Reason = "detached"                    // clear: the instance left its core
	ReasonMove                     Reason = "move"                        // pack
	ReasonMeasuredCycles           Reason = "measured_cycles"             // batch
	ReasonScaleUp                  Reason = "scale_up"                    // function
	ReasonScaleDown                Reason = "scale_down"                  // function
	ReasonScaleToZero              Reason = "scale_to_zero"               // function
	ReasonAlert                    Reason = "alert"                       // function: AlertManager asked
	ReasonScaleIn                  Reason = "scale_in"                    // flow_move: emptying an instance to give its core back
	ReasonRelieve                  Reason = "relieve"                     // flow_move: shedding an overloaded instance's heaviest flows
	ReasonOperator                 Reason = "operator"                    // flow_move: an operator asked (POST /system/keel/moves)
)

// Decision is one thing the controller did, for the log, the operator's event list (the
// UI) and the keel_gateway_scale_decisions_total counter.
type Decision struct {
	Time     time.Time `json:"time"`
	Kind     Kind      `json:"kind"`
	Reason   Reason    `json:"reason"`
	Chain    string    `json:"chain"`
	Instance string    `json:"instance"`
	Worker   string    `json:"worker,omitempty"`
	Core     int32     `json:"core"`
	Text     string    `json:"text"` // the log line
}
