/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The lcore's flows in setup and the packets it holds for them.
 *
 * A flow is Pending from its first packet until the control thread's
 * decision: its packets are held, in order, up to |hold_per_flow| per flow
 * and |hold_max| in all (one pool of slots, so one busy flow cannot stall
 * the others beyond its own share). On success the held packets are
 * released in order and the flow is Forwarding (with the VLAN the decision
 * gave, which its packets are tagged with on the way out): later packets
 * that still reach the ingress go straight back out, until the flow has been quiet for
 * |retire_ns|. A forwarding flow with an instance gets a handover marker
 * (inband.h) once its own ToR rule is in (Installed) and it has been quiet
 * at the ingress for the quiet time (MarkerState): then nothing more of it
 * is expected here. On failure or after |hold_timeout_ns| the held packets are
 * dropped and the flow backs off for |retry_backoff_ns|, dropping its
 * packets, before a new packet may start a new setup.
 *
 * Single-threaded and free of DPDK and gRPC: time is passed in, packets are
 * opaque pointers the table never touches.
 */
#ifndef KEEL_INGRESS_FLOW_TABLE_H_
#define KEEL_INGRESS_FLOW_TABLE_H_

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "drop_reason.h"
#include "parser.h"

struct rte_mbuf;

namespace keel::ingress {

using Packet = rte_mbuf*;

struct FlowTableConfig {
  uint32_t hold_per_flow = 64;
  uint32_t hold_max = 16384;
  uint32_t max_flows = 65536;
  uint64_t hold_timeout_ns = 2'000'000'000;
  uint64_t retry_backoff_ns = 200'000'000;
  uint64_t retire_ns = 2'000'000'000;
};

/* What to do with one packet of a flow. */
enum class Verdict {
  kUnknown,  /* no flow: classify it (and Start it if a chain serves it) */
  kHeld,     /* the table holds it */
  kForward,  /* send it back out now */
  kDrop,     /* drop it, counting |reason| */
};

struct PacketVerdict {
  Verdict verdict;
  DropReason reason;
  uint16_t vlan = 0;  /* kForward: the VLAN to tag the packet with (0: none) */
  bool after_marker = false;  /* kForward: the flow's marker went already (the packet is late) */
};

/* Whether a flow's handover marker may go. */
enum class MarkerDue {
  kWait,  /* not yet: the flow had a packet here within the quiet time */
  kDue,   /* send it now (the table records that it went) */
  kGone,  /* no marker: the flow retired, failed or was set up again */
};

/* How a decision applied to its flow. */
enum class Resolution {
  kReleased,  /* success: the flow's held packets are to be sent, in order */
  kFailed,    /* failure: the flow's held packets are to be dropped */
  kStale,     /* the flow timed out or retired before the decision came */
};

class FlowTable {
 public:
  explicit FlowTable(const FlowTableConfig& cfg);

  /* A packet of flow |key| at time |now|: held, forwarded, dropped, or
   * kUnknown when the table has no (or no longer a) setup for the flow. */
  PacketVerdict OnPacket(const FlowKey& key, Packet pkt, uint64_t now);

  /* Starts the setup of flow |key| with its first packet |pkt|. Returns the
   * setup's request id, or 0 if the table is full (then |pkt| is not taken).
   * |*first| says what became of |pkt| (held, or dropped buffer_full). */
  uint64_t Start(const FlowKey& key, Packet pkt, uint64_t now, PacketVerdict* first);

  /* Applies the decision for setup |req_id| of flow |key|: |failure| is the
   * reason it failed, or DropReason::kCount for success (then the flow's
   * packets are sent tagged with |vlan|, 0 for none). Appends the flow's
   * held packets to |*packets| (to send on kReleased, to drop on kFailed)
   * and sets |*since| to when the setup started. */
  Resolution Resolve(const FlowKey& key, uint64_t req_id, DropReason failure, uint16_t vlan, uint64_t now,
                     std::vector<Packet>* packets, uint64_t* since);

  /* The flow's own rule (setup |req_id|) is in: true if it is forwarding
   * to an instance, so a marker is to follow (MarkerState says when). */
  bool Installed(const FlowKey& key, uint64_t req_id, uint64_t now);
  /* Whether setup |req_id|'s marker may go at |now|: once the flow's rule
   * is in and no packet of it came for |quiet_ns|; |*vlan| is its instance's. */
  MarkerDue MarkerState(const FlowKey& key, uint64_t req_id, uint64_t now, uint64_t quiet_ns, uint16_t* vlan);

  /* Whether flow |key| is in the middle of its setup: held, or forwarding
   * to an instance before its marker went (its own rule or its marker is
   * on the way). Such a flow cannot move yet. */
  bool Settling(const FlowKey& key) const;
  /* Makes flow |key| forwarding to |vlan| under a new setup (a moved flow's
   * packets go to its new instance), replacing what the table had of it;
   * |installed|: its own rule is in already. Returns the setup's request id
   * (for Installed and MarkerState). */
  uint64_t Adopt(const FlowKey& key, uint16_t vlan, bool installed, uint64_t now);

  /* Times out setups older than hold_timeout_ns (their packets are appended
   * to |*timed_out|, to drop as kTimeout) and forgets quiet forwarding flows
   * and flows whose backoff is over. */
  void Expire(uint64_t now, std::vector<Packet>* timed_out);

  /* Packets held now, and the most held at once. */
  uint32_t held() const { return held_; }
  uint32_t held_max() const { return held_peak_; }
  size_t flows() const { return flows_.size(); }

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  enum class State : uint8_t { kPending, kForwarding, kBackoff };
  struct Flow {
    State state;
    DropReason failure;    /* why it backs off */
    uint16_t vlan;         /* forwarding: the tag its packets leave with */
    bool marker_sent;      /* forwarding: its handover marker went */
    uint64_t installed;    /* forwarding: when its own rule was confirmed (0: not yet) */
    uint64_t req_id;
    uint64_t since;        /* setup start (pending), last packet (forwarding), failure (backoff) */
    uint32_t head, tail;   /* held packets, a list through next_ */
    uint32_t count;
  };

  PacketVerdict Hold(Flow* f, Packet pkt);
  void TakeHeld(Flow* f, std::vector<Packet>* out);
  void Fail(Flow* f, DropReason why, uint64_t now, std::vector<Packet>* out);

  FlowTableConfig cfg_;
  std::unordered_map<FlowKey, Flow, FlowKeyHash> flows_;
  std::vector<Packet> slot_pkt_;
  std::vector<uint32_t> next_;  /* next slot of the same flow, or of the free list */
  uint32_t free_ = kNil;
  uint32_t held_ = 0;
  uint32_t held_peak_ = 0;
  uint64_t next_req_ = 1;
};

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_FLOW_TABLE_H_
