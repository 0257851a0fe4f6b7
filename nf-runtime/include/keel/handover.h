/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Position 0's order-preserving handover of new flows (issue 34).
 *
 * A new flow's first packets reach the instance through keel-ingress, which
 * holds them while the gateway assigns the flow, then sends them marked
 * (inband.h). Once the flow's own ToR rule is in, its packets come direct,
 * in tens of µs, while those still passing through the ingress arrive later:
 * without care the direct ones overtake them. OpenNF's order-preserving move
 * (SIGCOMM'14 §5.1.2) fixes this with a marker from the old path and a hold
 * on the new one; here the ingress is the old path and position 0 the
 * destination:
 *
 *  - a flow that had a packet via the ingress and no MARKER yet is "in
 *    handover": its direct packets are held, in arrival order. So is a flow
 *    whose first packet here came direct: every flow's first packets go
 *    through the ingress, so they are still on their way (measured: the ToR
 *    served the flow's new rule and the source's port before the packets
 *    queued on the ingress' port, on a core it shares with everything);
 *  - the flow's MARKER (the ingress' last frame for it) releases them, right
 *    behind everything that came via the ingress;
 *  - a MARKER that never comes (a lost frame, a failed install, an ingress
 *    restart) releases them after |timeout| and is counted;
 *  - holds are bounded per flow and in all, and the table has a fixed
 *    number of flows: a flow that would exceed a bound has its held packets
 *    released at once, followed by the packet (order given up, nothing
 *    lost), and the reason is counted.
 *
 * Direct packets of flows whose marker came pass, for a parse of the 5-tuple
 * and one bucket's lookup (the table must know a flow to tell "already
 * handed over" from "overtook its first packets"). A flow is forgotten once
 * it was quiet for |forget| (longer than the ToR rule's idle timeout: after
 * that its next packet goes through the ingress again) or, the table being
 * full, when it is the least recently seen of its bucket; a forgotten flow
 * that is still live costs its next direct packet one timeout (counted).
 *
 * The table is free of DPDK (packets are opaque pointers, time is passed
 * in, in any unit); HandoverRx (engine.h's receive side) feeds it mbufs.
 * Single-threaded; the counters may be read from any thread.
 */
#ifndef KEEL_HANDOVER_H_
#define KEEL_HANDOVER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "keel/inband.h"
#include "keel/monitor.h"

namespace keel {

struct HandoverConfig {
  uint32_t max_flows = 16384;    /* flows in the table (rounded up to a power of two x kWays) */
  uint32_t hold_per_flow = 64;   /* direct packets one flow may have held */
  uint32_t hold_max = 512;       /* direct packets held in all */
  uint64_t timeout = 0;          /* a flow's hold ends this long after it began, marker or not */
  uint64_t forget = 0;           /* an entry untouched this long is dropped from the table */
};

/* Everything the handover counts; each has its own counter (drop_reason.h's style). */
enum class HandoverCount {
  kViaIngress,      /* packets that came via the ingress (marked) */
  kMarkers,         /* markers that ended a flow's handover */
  kHeld,            /* direct packets held */
  kReleasedMarker,  /* held packets released by their flow's marker */
  kReleasedTimeout, /* held packets released by a timeout */
  kReleasedGiveUp,  /* held packets released because a bound was hit */
  kTimeout,         /* flows whose marker did not come within the timeout */
  kOverflowFlow,    /* flows that hit hold_per_flow */
  kOverflowTotal,   /* flows that found hold_max reached */
  kTableFull,       /* flows in handover with no room in the table (their packets pass) */
  kMarkerUnknown,   /* markers for a flow the table did not have in handover */
  kLateViaIngress,  /* marked packets of a flow after its marker */
  kMalformed,       /* in-band frames dropped: truncated, bad length */
  kBadVersion,      /* in-band frames of a version this side does not speak */
  kUnknownType,     /* in-band frames of a type this side does not know */
  kDirectFirst,     /* flows whose first packet here came direct, ahead of all via the ingress */
  kMoveFrames,      /* well-formed EXPORT_STATE / IMPORT_STATE frames passed on to the chain */
  kReleasedMove,    /* held packets released ahead of their flow's move frame */
  kCount,
};

/* The counter label of |c|, e.g. "marker_timeout". */
const char* HandoverCountName(HandoverCount c);

/* The 5-tuple of a frame (Ethernet, up to two VLAN tags, IPv4, TCP/UDP
 * ports) as keel-ingress keys flows; false if it is no IPv4 packet or an
 * IPv4 fragment other than the first. */
bool ParseFlowId(const uint8_t* frame, size_t len, inband::FlowId* f);

class HandoverTable {
 public:
  using Packet = void*;
  static constexpr uint32_t kWays = 8;

  explicit HandoverTable(const HandoverConfig& cfg);

  /* True while some flow is in handover (direct packets need a lookup). */
  bool active() const { return in_handover_ > 0; }

  /* A packet of |f| that came via the ingress (its mark already taken off):
   * it passes, and the flow is in handover unless its marker came. */
  void OnViaIngress(const inband::FlowId& f, uint64_t now);
  /* A direct packet |p| of |f| (held if |f| is in handover or new here):
   * true if the table holds it now. False: the
   * caller passes |p| on, after the packets appended to |*out| (held ones a
   * bound made the flow give up). |*out| has room for hold_per_flow more. */
  bool OnDirect(const inband::FlowId& f, Packet p, uint64_t now, Packet* out, uint32_t* nout);
  /* The flow's marker: its held packets, in arrival order, go to |*out|
   * (room for hold_per_flow more). */
  void OnMarker(const inband::FlowId& f, uint64_t now, Packet* out, uint32_t* nout);
  /* A move frame of |f| (EXPORT_STATE at the flow's source, IMPORT_STATE at
   * its destination) passes position 0: the packets the flow has held go to
   * |*out| (room for hold_per_flow more), to pass ahead of the frame, and
   * the table forgets the flow. At the source no packet of it may reach the
   * NFs after the export (they would find no state and make new); at the
   * destination its next packets are a new flow's: the held ones come via
   * the ingress, then its marker, and its direct packets wait for that
   * marker, even where the flow had finished a handover before (it may come
   * back to an instance it left). */
  void OnMove(const inband::FlowId& f, Packet* out, uint32_t* nout);
  /* Ends the holds older than the timeout (their packets to |*out|, room
   * for hold_max more) and forgets entries untouched for |forget|. Cheap
   * when nothing is due: call it every receive. */
  void Poll(uint64_t now, Packet* out, uint32_t* nout);

  void Count(HandoverCount c, uint64_t n = 1) { counts_[static_cast<size_t>(c)].Add(n); }
  uint64_t count(HandoverCount c) const { return counts_[static_cast<size_t>(c)].Get(); }
  uint32_t held() const { return held_; }
  uint32_t in_handover() const { return in_handover_; }

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  enum class State : uint8_t { kFree, kHandover, kDone };
  struct Entry {
    inband::FlowId key;
    State state = State::kFree;
    uint32_t head = kNil, tail = kNil, count = 0;
    uint64_t hold_since = 0; /* the first held packet's time (count > 0) */
    uint64_t touched = 0;
  };

  Entry* Find(const inband::FlowId& f);
  /* A free entry for |f|, or one that may be reused (done, or in handover
   * with nothing held; the least recently touched); null if none. */
  Entry* Claim(const inband::FlowId& f);
  void SetState(Entry* e, State s);
  void Release(Entry* e, Packet* out, uint32_t* nout);
  void Free(Entry* e);

  HandoverConfig cfg_;
  uint32_t buckets_;
  std::vector<Entry> entries_;  /* buckets_ x kWays */
  std::vector<Packet> slot_pkt_;
  std::vector<uint32_t> next_;  /* next slot of the same flow, or of the free list */
  uint32_t free_ = kNil;
  uint32_t held_ = 0;
  uint32_t in_handover_ = 0;
  uint32_t used_ = 0;           /* entries not free */
  uint64_t next_poll_ = 0;
  Counter counts_[static_cast<size_t>(HandoverCount::kCount)];
};

}  // namespace keel

#endif  // KEEL_HANDOVER_H_
