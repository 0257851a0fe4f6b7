/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The chain-buffer engine: the three steps of a chain instance's packets
 * around its shared packet buffer (Galleon Fig. 2), written once for
 * keel-nf (member.h: one NF per process, a step per turn under the turn
 * protocol of chain_sched.h) and keel-chain (runner.h: every NF in one
 * process, all three steps in each turn).
 *
 *  - Head: receive up to B bursts, run the head NFs on the NIC's buffers,
 *    then copy the survivors into the chain buffer (the spatial-isolation
 *    copy), or, when the port received them into the chain buffer's own
 *    slots (rx_pool.h), only name their slots in its descriptors; with no
 *    chain buffer, transmit them from the NIC's buffers.
 *  - InPlace: run NFs on the packets in the chain buffer, in place.
 *  - Egress: transmit what the chain buffer holds, from its slots (the
 *    mbufs the port received them in, or DPDK external buffers attached to
 *    the slots) or copied into transmit mbufs, and recycle the slots.
 *
 * The engine also keeps the process's counters and writes the one schema
 * of the statistics files of keel-nf and keel-chain (StatsJson). Position 0
 * measures each packet's server sojourn (sojourn.h): Head stamps the TSC of
 * the receive burst that brought it, Egress (or the head's own transmit in
 * a chain without a buffer) reads it back once the packet left, sent or
 * dropped.
 *
 * A flow move's control frame (inband.h types 2 and 3, issue 37) takes the
 * packets' path without any NF's ProcessBatch seeing it: position 0's
 * receive (handover_rx.h) flags it, and each step runs flow_move.h's MoveAt
 * for each of its NFs on the frame's body instead, in the mbuf at the head
 * or in place in the chain buffer, where its descriptor says it is one
 * (kDescMove); packets ahead of it in the burst pass every NF of the step
 * before it, those behind it after it. Egress (or the head, without a
 * chain buffer) sends it out like a packet, still marked. A frame that is
 * not a move frame is dropped and counted (StatsJson "moves"; each NF's
 * entry counts the exports, imports and failures at its position).
 */
#ifndef KEEL_ENGINE_H_
#define KEEL_ENGINE_H_

#include <rte_mbuf.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "keel/chain.h"
#include "keel/handover_rx.h"
#include "keel/monitor.h"
#include "keel/pktbuf.h"
#include "keel/sojourn.h"
#include "keel/stats_file.h"

namespace keel {

/* The most bursts a turn gathers (B of Galleon eq. 1): the chain buffer
 * holds kMaxBurstsPerTurn x kMaxBurst packets. */
constexpr uint32_t kMaxBurstsPerTurn = 64;

struct EngineOptions {
  int position = 0;              /* this process's place among the chain's processes */
  int of = 1;                    /* the chain's processes (keel-chain: 1) */
  uint16_t rx_port = 0;          /* position 0 only */
  uint16_t tx_port = 0;          /* position 0 only */
  int burst = kMaxBurst;         /* packets per receive burst, 1..kMaxBurst */
  /* Position 0: NFs [0, head_nfs) of the process's chain run on the NIC's
   * buffers; the chain buffer's InPlace step runs the rest. */
  size_t head_nfs = 1;
  /* Position 0: the head copies its survivors into the chain buffer (a
   * chain of several NFs); otherwise it transmits them itself. */
  bool copy_in = false;
  /* With copy_in: the port's pool is the chain buffer's (ChainRxPool), so
   * the head enters each survivor in its own slot instead of copying it,
   * and Egress transmits the same mbuf (or frees it, once the chain is done
   * with it, which gives the slot back to the port). */
  bool rx_zero_copy = false;
  /* Position 0: Egress transmits from the chain buffer's slots instead of
   * copying each packet into a transmit mbuf, while the port lets go of
   * them within a turn. */
  bool egress_zero_copy = false;
  /* InPlace: work on private copies of the packets, from the engine's
   * pool, and copy them back (the EdgeOS/NFVnice baseline). */
  bool copy_each_hop = false;
  /* Position 0: a new flow's direct packets wait at most this long for the
   * ingress' handover marker (handover.h). The marker goes once the ingress
   * learns that the flow's rule is in, which under load is hundreds of ms
   * after the switch began to use it (bench/results/flow_setup.json's
   * install p99: 418 ms at 1000 new flows/s on this machine): a shorter
   * hold lets those flows' direct packets overtake their held ones. */
  uint32_t handover_timeout_ms = 500;
};

class Engine {
 public:
  /* |chain| and |pool| (position 0: the port's mempool; otherwise a
   * private pool for copy_each_hop, or none) outlive the engine. |buf| is
   * the chain's buffer file, or null when there is none (keel-chain without
   * --pktbuf); |cycles| the row of the cycle accounting the engine adds to
   * (KEEL_CYCLES_KINDS words, keel_cycles_kind). */
  Engine(Chain* chain, rte_mempool* pool, PktBuf* buf, uint64_t* cycles, const EngineOptions& opt);

  /* Marks the start of the packet loop (the statistics' "seconds"). */
  void Begin();
  /* Marks its end; the statistics include the NFs' own figures from now. */
  void End();

  /* Position 0: receives up to |bursts| bursts (clamped to 1..kMaxBurstsPerTurn)
   * and takes each through the head NFs, then into the chain buffer or out
   * of the port. Returns the packets received. */
  uint32_t Head(uint32_t bursts);
  /* Runs NFs [first_nf, size) of the chain on every packet in the chain
   * buffer, in place, and marks each as finished by |stage|; a packet the
   * previous stage (|stage| - 1) had not finished counts as an order
   * violation. */
  void InPlace(uint16_t stage, size_t first_nf);
  /* Position 0: transmits what the chain buffer holds and empties it; the
   * next Head fills it from its first slot again. */
  void Egress();
  /* Closes the accounting of a turn that began at TSC |start|: its busy
   * cycles, the turn count, and, if its Head received packets, a batch.
   * Returns the TSC at the end. */
  uint64_t EndTurn(uint64_t start);
  /* True if position 0 has received nothing for more than |cycles| (never
   * when |cycles| is 0). */
  bool IdleLongerThan(uint64_t cycles) const { return cycles && Rdtsc() - last_rx_ > cycles; }

  /* Position 0: each packet's cycles from the receive burst that brought it
   * to the transmit burst that sent it (or the Egress that found it dropped),
   * cumulative since start; the statistics thread may read it. */
  const LatencyHist& sojourn() const { return sojourn_; }
  /* Adds |c| to the cycle accounting's |kind|. */
  void Charge(int kind, uint64_t c) { ChargeCycles(cycles_, kind, c); }
  /* At the start of a turn: |c| cycles passed since the predecessor passed
   * it (KEEL_CYCLES_HANDOFF). Charged always; recorded in the handoff_wait
   * histogram when the chain buffer holds packets, i.e. when the wait was
   * part of some packet's sojourn (an idle group's turns are not); EndTurn
   * then records the turn in turn_busy. */
  void Handoff(uint64_t c) {
    Charge(KEEL_CYCLES_HANDOFF, c);
    carrying_ = buf_ && buf_->used();
    if (carrying_) handoff_wait_.Record(c);
  }

  /* The statistics file (keel-nf --help documents it; keel-chain writes the
   * same). Any thread; the NFs' own figures only once End() was called. */
  Json StatsJson() const;

 private:
  /* Stamps the packets the chain buffer gained since it held |used_before|
   * with |tsc|, the receive burst's. */
  void StampRx(uint32_t used_before, uint64_t tsc);
  /* Head's work on |n| received packets, from the receive burst at TSC
   * |rx_tsc|, from |t| on: the head NFs (or, for one move frame, |move|,
   * MoveAt at each of them), then into the chain buffer or out of the port.
   * Returns the TSC at the end. */
  uint64_t HeadBurst(rte_mbuf** mbufs, uint16_t n, uint64_t rx_tsc, uint64_t t, bool move);
  /* InPlace, with (kMoves) or without a look for move frames. */
  template <bool kMoves>
  void InPlaceBursts(uint16_t stage, size_t first_nf);
  /* Runs NFs [first_nf, size) of the chain over |batch| (InPlace), charging
   * the NFs' cycles from TSC |t0|. */
  void RunNfs(PacketBatch* batch, size_t first_nf, uint64_t t0);
  /* InPlace with move frames among the |n| packets at |views| (bit i of
   * |moves|): the NFs run on the packets between them, MoveThrough on them. */
  void RunAroundMoves(Packet* views, uint32_t n, uint32_t moves, size_t first_nf);
  /* Runs MoveAt for NFs [first_nf, last_nf) of the chain on the move frame
   * in |p|, in place, and sets its length; drops it (counted) if it is not
   * one or the packet has no room for the largest body. */
  void MoveThrough(Packet* p, size_t first_nf, size_t last_nf);
  int AttachOut(PacketBatch* batch, const Packet* views, const uint32_t* slots, rte_mbuf** out);
  /* copy_each_hop: runs NFs [first_nf, size) on private copies of |batch|
   * and copies the results back. */
  void RunOnPrivateCopies(PacketBatch* batch, size_t first_nf);
  /* Before the slots are written again: waits (bounded) for the port to
   * release every slot it transmits from; false if it did not. */
  bool SlotsReleased();
  static void OnTxDone(void* addr, void* opaque);
  /* rx_zero_copy: enters |batch|'s survivors, received in |mbufs|, into the
   * chain buffer by slot; frees the rest. */
  void EnterSlots(rte_mbuf** mbufs, Packet* views, uint16_t n, PacketBatch* batch);
  /* rx_zero_copy: puts the received mbufs of up to |n| packets from the
   * tail in |out| with their final extent, frees dropped ones; returns how
   * many are in |out|. */
  int ReturnHeld(uint32_t n, uint32_t used, rte_mbuf** out);
  /* The chain buffer's slot that |m|'s buffer is, or -1. */
  int64_t SlotOfMbuf(const rte_mbuf* m) const { return buf_->SlotOf(m->buf_addr); }
  /* The slot a held mbuf's descriptor must name; for none (a ring index a
   * hostile NF's head or tail made Egress look at), one no descriptor can
   * name, so View refuses it. */
  uint32_t HeldSlot(const rte_mbuf* m) const {
    return m ? static_cast<uint32_t>(SlotOfMbuf(m)) : PktBuf::kAnySlot - 1;
  }

  Chain* chain_;
  rte_mempool* pool_;
  PktBuf* buf_;
  uint64_t* cycles_;
  EngineOptions opt_;
  PortCounters port_;
  bool tx_chains_ = false; /* the TX port sends multi-segment mbufs */
  Counter order_violations_;
  /* Flow moves' frames dropped here as no move frame (each NF counts the
   * ones it passed: chain.h MoveAt). */
  Counter move_malformed_;
  Counter bursts_per_turn_; /* B of the last Head */
  uint64_t last_rx_ = 0;
  uint32_t turn_received_ = 0; /* packets the current turn's Head received */
  std::atomic<uint64_t> begin_tsc_{0}; /* read by the statistics thread */
  std::atomic<uint64_t> end_tsc_{0};
  /* Zero-copy egress: one shared-info per slot (its reference count and
   * the callback the mbuf's last free calls), and the slots in flight. */
  std::vector<rte_mbuf_ext_shared_info> shinfo_;
  uint32_t in_flight_ = 0;
  bool zero_copy_ = false;
  Counter zero_copy_packets_;
  Counter zero_copy_fallbacks_;
  /* Receiving into the chain buffer: the mbuf position 0 lent the chain at
   * each ring index, in this process's memory only (an NF can rewrite a
   * descriptor, never which buffer goes back to the pool). */
  std::vector<rte_mbuf*> held_;
  bool rx_zero_copy_ = false;
  Counter rx_zero_copy_packets_;
  /* Sojourn: the TSC at which each ring index's packet was received, in
   * this process's memory beside held_ (no NF after position 0 can write
   * it, and no NF touches a cache line more for it); the histogram; and
   * the bound on how long a received packet may have waited in the VF's
   * queue before the poll that found it (the time since the poll before). */
  std::vector<uint64_t> rx_tsc_;
  LatencyHist sojourn_;
  LatencyHist rx_wait_bound_;
  /* Where the sojourn of the packets in flight goes, per position: the waits
   * for its turns (Handoff) and the turns themselves (EndTurn), of the turns
   * that found packets in the chain buffer or put some there. */
  LatencyHist handoff_wait_;
  LatencyHist turn_busy_;
  bool carrying_ = false;
  uint64_t last_poll_ = 0;
  /* Position 0: the order-preserving handover of new flows (handover_rx.h),
   * between the port and the head. */
  std::unique_ptr<HandoverRx> handover_;
};

}  // namespace keel

#endif  // KEEL_ENGINE_H_
