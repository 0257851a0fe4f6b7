/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The lcore <-> control-thread messages: two rte_rings of fixed-size
 * messages, so the lcore never blocks or allocates to talk to the control
 * side, and an eventfd that wakes the control thread (which sleeps in
 * poll instead of polling the ring).
 */
#ifndef KEEL_INGRESS_CHANNEL_H_
#define KEEL_INGRESS_CHANNEL_H_

#include <cstdint>
#include <string>

#include "drop_reason.h"
#include "flow_mover.h"
#include "parser.h"

struct rte_ring;

namespace keel::ingress {

class FilterSet;

/* Or'ed into a decision's VLAN: the chain's reinject VLAN of a switch-only flow.
 * Its packets are tagged without the in-band mark (they go to no instance's
 * position 0, and the chain's switch NFs must see them as they came) and get no
 * handover marker. */
constexpr uint16_t kChainReinject = 0x8000;
constexpr uint16_t kVlanIdMask = 0x0FFF;

struct Msg {
  enum class Kind : uint32_t {
    /* lcore -> control */
    kNewFlow,        /* key, req_id, chain: start AssignFlow (+ stage 1 for a switch-only chain) */
    kReleased,       /* req_id, since_ns: held packets are out, install the flow's rule */
    kAbandoned,      /* req_id: the lcore gave up on the setup; release the flow */
    kFilterSetDone,  /* filters: the lcore no longer uses it, free it */
    kMoveRemoveRule, /* key, move: take the moving flow's rule off the ToR (answer kMoveRuleRemoved) */
    kMoveInstall,    /* key, move, to_destination: the moving flow's rule to D (answer kMoveInstalled),
                      * or back to S for setup req_id (answer kInstalled, its marker follows) */
    kMoveResult,     /* key, move, move_failure (kNone: moved), since_ns: the pause */
    /* control -> lcore */
    kDecision,       /* key, req_id, failure (kCount = success), vlan (0: untagged) */
    kFilterSet,      /* filters: use this set from now on */
    kInstalled,      /* key, req_id: the flow's own rule is in (barrier): send its marker once quiet */
    kMoveBegin,      /* key, move, vlan (S), to_vlan (D): move the flow (flow_mover.h) */
    kMoveRuleRemoved, /* key, ok: the answer to kMoveRemoveRule */
    kMoveInstalled,  /* key, ok: the answer to kMoveInstall to D */
  };
  explicit Msg(Kind k = Kind::kNewFlow) : kind(k) {}

  Kind kind;
  DropReason failure = DropReason::kCount;
  FlowKey key;
  uint64_t req_id = 0;
  /* kDecision: the instance VLAN the flow's packets are tagged with when the
   * ingress sends them back (its instance's reinject rule on the ToR steers
   * them); for a switch-only chain its reinject VLAN | kChainReinject (the
   * chain's reinject rule steers them), or 0 (its stage-1 rule does). */
  uint16_t vlan = 0;
  uint64_t since_ns = 0;  /* kReleased: the flow's first packet (CLOCK_MONOTONIC); kMoveResult: the pause */
  uint32_t move = 0;      /* the control thread's number of a FlowMove */
  uint16_t to_vlan = 0;   /* kMoveBegin: D's VLAN */
  bool ok = false;        /* kMoveRuleRemoved, kMoveInstalled */
  bool to_destination = false;  /* kMoveInstall */
  MoveFailure move_failure = MoveFailure::kNone;
  FilterSet* filters = nullptr;
  char chain[64] = {};  /* chain names are OpenFaaS function names (at most 63 characters) */

  void SetChain(const std::string& name);
};

class Channel {
 public:
  /* Creates the rings (|size| messages each, a power of two). Returns
   * false and sets |*err| on failure. */
  bool Init(unsigned size, std::string* err);
  ~Channel();

  /* lcore side (one producer, one consumer). */
  bool ToControl(const Msg& m);
  bool FromControl(Msg* m);
  /* Wakes the control thread after one or more ToControl calls. */
  void WakeControl();
  /* The descriptor that becomes readable after ToLcore (the lcore naps on it
   * when idle, so a decision ends its nap); DrainLcoreWake resets it. */
  int lcore_wake_fd() const { return lcore_wake_fd_; }
  void DrainLcoreWake();

  /* control side: ToLcore may be called from several threads; it wakes a
   * napping lcore. */
  bool ToLcore(const Msg& m);
  bool FromLcore(Msg* m);
  /* The descriptor that becomes readable after WakeControl; Drain resets it. */
  int wake_fd() const { return wake_fd_; }
  void DrainWake();

 private:
  rte_ring* to_control_ = nullptr;
  rte_ring* to_lcore_ = nullptr;
  int wake_fd_ = -1;
  int lcore_wake_fd_ = -1;
};

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_CHANNEL_H_
