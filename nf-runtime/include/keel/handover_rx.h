/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Position 0's receive with the order-preserving handover (handover.h):
 * takes bursts off the port, takes the ingress' mark off every marked packet
 * (before any NF sees it), consumes the in-band control frames (markers
 * never reach an NF or the wire), holds the direct packets of flows in
 * handover and puts them back in flow order. What it gives the head is what
 * the port would have given, in the order the flows sent it.
 *
 * It sits between the port and ReceiveBurst in Engine::Head, the one receive
 * of keel-nf and keel-chain. Released packets queue in a fixed ring
 * (kMaxBurst + hold_max) that is emptied before the port is polled again.
 * Idle, it costs nothing: a hold's timeout is checked on every receive,
 * which the runtime's own idle backoff keeps calling.
 *
 * A flow move's EXPORT_STATE / IMPORT_STATE frame (inband.h types 2, 3) is
 * not consumed: it keeps its mark and comes out in its place among the
 * packets, flagged (Take's |moves|), for the engine to run through the
 * chain's positions (flow_move.h MoveAt) instead of the NFs.
 *
 * It orders nothing until the first marked frame arrives: an instance that
 * is not behind keel-ingress (keel-chain or keel-nf driven by a generator, a
 * test) never sees one, and its packets pass as they came, for the test for
 * the mark. Behind the ingress every flow's first packets are marked, so the
 * first flow an instance ever gets is the only one whose direct packets
 * could overtake before the handover is armed.
 */
#ifndef KEEL_HANDOVER_RX_H_
#define KEEL_HANDOVER_RX_H_

#include <rte_mbuf.h>

#include <atomic>
#include <deque>
#include <vector>

#include "keel/handover.h"
#include <nlohmann/json.hpp>

namespace keel {

class HandoverRx {
 public:
  /* |cfg|'s times are in TSC cycles. */
  explicit HandoverRx(const HandoverConfig& cfg);
  ~HandoverRx();

  /* Up to |n| (<= kMaxBurst) packets from |port|'s queue 0 into |out|, in
   * flow order; |now| is the TSC. Bit i of |*moves| is set when out[i] is a
   * move frame (marked, type 2 or 3, its in-band header checked). */
  uint16_t Receive(uint16_t port, rte_mbuf** out, uint16_t n, uint64_t now, uint32_t* moves);
  /* The same for packets already received (|in|, |k| of them): what
   * Receive does after rte_eth_rx_burst. Packets may come out later. */
  void Feed(rte_mbuf** in, uint16_t k, uint64_t now);
  /* Up to |n| packets of those fed, in order; |*moves| as for Receive. */
  uint16_t Take(rte_mbuf** out, uint16_t n, uint32_t* moves);
  uint16_t Take(rte_mbuf** out, uint16_t n) {
    uint32_t moves;
    return Take(out, n, &moves);
  }

  /* True if one of |m|'s |k| packets carries the mark. */
  static bool AnyMarked(rte_mbuf* const* m, uint16_t k);
  /* True once a marked frame came: the instance is behind keel-ingress. */
  bool armed() const { return armed_.load(std::memory_order_relaxed); }

  const HandoverTable& table() const { return table_; }
  nlohmann::json ToJson() const;

 private:
  void Classify(rte_mbuf* m, uint64_t now);
  /* A marked in-band frame of a move type, its mark already taken off:
   * passed on, marked again, or dropped and counted. */
  void PassMove(rte_mbuf* m, const uint8_t* payload, size_t len);
  void Push(rte_mbuf* m);
  void PushMove(rte_mbuf* m);
  void PushReleased(uint32_t n);

  HandoverTable table_;
  std::vector<rte_mbuf*> ring_;
  uint32_t head_ = 0, count_ = 0;
  std::deque<uint32_t> moves_; /* the ring indices of the move frames in it, oldest first */
  std::vector<HandoverTable::Packet> released_;
  Counter ring_full_; /* cannot happen (the ring has room for every packet held); counted if it did */
  std::atomic<bool> armed_{false};
};

}  // namespace keel

#endif  // KEEL_HANDOVER_RX_H_
