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
   * flow order; |now| is the TSC. */
  uint16_t Receive(uint16_t port, rte_mbuf** out, uint16_t n, uint64_t now);
  /* The same for packets already received (|in|, |k| of them): what
   * Receive does after rte_eth_rx_burst. Packets may come out later. */
  void Feed(rte_mbuf** in, uint16_t k, uint64_t now);
  /* Up to |n| packets of those fed, in order. */
  uint16_t Take(rte_mbuf** out, uint16_t n);

  /* True if one of |m|'s |k| packets carries the mark. */
  static bool AnyMarked(rte_mbuf* const* m, uint16_t k);
  /* True once a marked frame came: the instance is behind keel-ingress. */
  bool armed() const { return armed_.load(std::memory_order_relaxed); }

  const HandoverTable& table() const { return table_; }
  nlohmann::json ToJson() const;

 private:
  void Classify(rte_mbuf* m, uint64_t now);
  void Push(rte_mbuf* m);
  void PushReleased(uint32_t n);

  HandoverTable table_;
  std::vector<rte_mbuf*> ring_;
  uint32_t head_ = 0, count_ = 0;
  std::vector<HandoverTable::Packet> released_;
  Counter ring_full_; /* cannot happen (the ring has room for every packet held); counted if it did */
  std::atomic<bool> armed_{false};
};

}  // namespace keel

#endif  // KEEL_HANDOVER_RX_H_
