/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ingress's lcore loop: receive a burst, parse, look the flow up,
 * classify new flows against the chains' filters, hold the packets of
 * flows in setup and send them back out, in order, once the control thread
 * says where they go: tagged with their instance's VLAN (the ToR's
 * per-instance reinject rule steers them), or, for a chain that runs on the
 * switch only, untagged behind the flow's stage-1 rule. It never blocks:
 * everything that waits (gRPC) happens on the control side, reached through
 * the Channel.
 *
 * Order across the switch-over (issue 34): every packet the ingress sends to
 * an instance carries the in-band mark (keel/inband.h: an inner 802.1Q tag
 * under the instance VLAN), and once the flow's own rule is in and the flow
 * has been quiet here for the marker quiet time, a MARKER frame follows its
 * last packet on the same path. The instance's position 0 holds the flow's
 * direct packets until then (nf-runtime handover.h). A chain that runs on
 * the switch only has no position 0 to hold anything: its packets the
 * ingress re-injects untagged behind the stage-1 rule may still be overtaken
 * by the flow's first packets on its stage-2 rule (the window is the
 * ingress' receive queue and nap, up to 200 µs while flows are set up).
 *
 * Flow moves (issue 37, flow_mover.h): the lcore holds a moving flow's
 * packets, sends the EXPORT_STATE and IMPORT_STATE frames the way it sends
 * markers (marked, pushed with the instance's VLAN), takes the frames that
 * come back from the instances (marked, EtherType 0x88B5), and releases the
 * held packets as a new flow's: marked, then the marker. Rules and reports
 * are the control thread's (kMoveRemoveRule, kMoveInstall, kMoveResult).
 */
#ifndef KEEL_INGRESS_DATAPLANE_H_
#define KEEL_INGRESS_DATAPLANE_H_

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <vector>

struct rte_mempool;

#include "channel.h"
#include "filter_set.h"
#include "flow_mover.h"
#include "flow_table.h"
#include "stats.h"

namespace keel::ingress {

/* The VLAN the ingress tags its normal path (flows of no chain) with; the ToR
 * pops it and sends the frame to its egress (keel-torctl, rules.py
 * NORMAL_VLAN). Frames tagged with an instance's VLAN go to that instance;
 * frames tagged with a switch-only chain's reinject VLAN (kChainReinject,
 * channel.h) go through that chain's switch NFs to the egress (rules.py
 * chain_reinject_rule); untagged frames from the ingress are re-injected
 * packets of switch-only flows of a chain without one, each matched by its
 * flow's own stage-1 rule: a software ToR never caches one wide "from the
 * ingress -> egress" entry that a new flow's first packets could take before
 * its rule is seen. */
constexpr uint16_t kNormalPathVlan = 4094;

struct DataPlaneConfig {
  uint16_t port = 0;
  bool no_chain_forward = true;   /* --no-chain forward (else drop) */
  uint32_t idle_sleep_max_us = 2000;
  /* The port's own sockets (keel/port_wake.h): a frame in their ring ends a nap.
   * Empty: the naps stay short while flows are set up. */
  std::vector<int> wake_fds;
  /* A flow's marker goes once its rule is in and no packet of it reached
   * the ingress for this long (its last ones were in the receive queue or
   * came on an OpenFlow cache entry the switch had not revalidated yet).
   * At 2 ms, 45 of 1000 flows at 100 new flows/s still had a packet reach
   * the ingress after their marker (bench/flow_setup.py, 2 ms between a
   * flow's packets): the quiet time must outlast the gap between packets. */
  uint32_t marker_quiet_us = 10000;
  rte_mempool* pool = nullptr;  /* where marker and move frames come from */
  FlowTableConfig table;
  MoverConfig mover;  /* its quiet_ns is marker_quiet_us's */
};

class DataPlane {
 public:
  DataPlane(const DataPlaneConfig& cfg, Channel* channel, IngressCounters* counters);
  ~DataPlane();

  /* Runs the loop on the calling lcore until |stop| is set. */
  void Run(const std::atomic<bool>& stop);

 private:
  bool DrainControl(uint64_t now);
  void ApplyDecision(const Msg& m, uint64_t now);
  void SwapFilters(FilterSet* next);
  /* Sends |m| to the control thread, or keeps it for FlushBacklog if the
   * ring is full (messages that must not be lost: releases, filter sets). */
  void SendControl(const Msg& m);
  void FlushBacklog();
  void HandlePacket(rte_mbuf* m, uint64_t now);
  void StartFlow(const FlowKey& key, int chain, rte_mbuf* m, uint64_t now);
  /* Sends |m| tagged with |vlan| (kNormalPathVlan: the normal path; 0: untagged). */
  void SendTagged(rte_mbuf* m, uint16_t vlan);
  /* Puts the in-band mark into |m| (keel/inband.h); false without headroom. */
  bool InsertMark(rte_mbuf* m);
  /* Sends the markers that are due (DataPlaneConfig::marker_quiet_us), quiet measured up to
   * |seen_until|: a time by which every frame that had reached the port was read. */
  void SendMarkers(uint64_t seen_until);
  void SendMarker(const FlowKey& key, uint64_t req, uint16_t vlan);
  /* A control message about a move (kMoveBegin, kMoveRuleRemoved, kMoveInstalled). */
  void MoveMsg(const Msg& m, uint64_t now);
  /* A marked in-band frame that came back from an instance: a move's, or dropped and counted.
   * False (|m| untouched) if |m| is no in-band frame. */
  bool HandleInband(rte_mbuf* m, uint64_t now);
  /* Carries out what the mover asked for (flow_mover.h MoveAction). */
  void ApplyMoves(uint64_t now);
  void SendStateFrame(const MoveAction& a);
  /* Sends a marked in-band frame of |len| bytes that |write| fills (false: it could not),
   * pushed with the instance VLAN |vlan|; counts it in |sent|, or in |unsent| when no mbuf
   * or no room was left for it (the instance's side times out). */
  template <class Write>
  void SendInband(size_t len, uint16_t vlan, Write write, Counter* sent, Counter* unsent);
  void Send(rte_mbuf* m) { tx_.push_back(m); }
  void FlushTx();
  void Drop(rte_mbuf* m, DropReason why);
  void DropAll(std::vector<Packet>* pkts, DropReason why);
  void PublishGauges();
  void IdleSleep();
  /* Counts what the kernel dropped at the port's sockets since the last call (their ring
   * was full) as port_ring_full. */
  void CountRingDrops();

  DataPlaneConfig cfg_;
  Channel* channel_;
  IngressCounters* counters_;
  FlowTable table_;
  FlowMover mover_;
  MoveActions moves_;                /* the mover's actions not carried out yet */
  FilterSet* filters_ = nullptr;
  std::vector<Msg> backlog_;         /* SendControl messages the ring had no room for yet */
  std::vector<rte_mbuf*> tx_;
  std::vector<Packet> scratch_;
  struct PendingMarker {
    FlowKey key;
    uint64_t req;
  };
  std::vector<PendingMarker> markers_;  /* installed flows whose marker has not gone yet */
  bool woke_control_ = false;        /* a message went to the control thread this round */
  uint32_t idle_us_ = 0;
  uint64_t next_expire_ = 0;
  uint64_t next_ring_stats_ = 0;
  /* The last read that emptied the port's ring began at this time: every frame that had
   * reached the port by then has been seen. A flow is quiet (its marker may go) only by
   * this clock: after a stall the ring holds more than one read, and a flow's packet
   * behind the first read must not find its marker gone ahead of it. */
  uint64_t seen_until_ = 0;
  std::vector<pollfd> wake_;         /* the control eventfd, then cfg_.wake_fds */
  bool port_woke_ = false;           /* the last nap ended by a port socket, nothing came in since */
};

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_DATAPLANE_H_
