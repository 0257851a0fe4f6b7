/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/handover_rx.h"

#include <rte_ethdev.h>

#include <cstring>

#include "keel/batch.h"

namespace keel {

HandoverRx::HandoverRx(const HandoverConfig& cfg)
    : table_(cfg), ring_(kMaxBurst + cfg.hold_max + cfg.hold_per_flow), released_(cfg.hold_max + cfg.hold_per_flow) {
  static_assert(kMaxBurst <= 32, "Take reports move frames in a 32-bit mask");
}

HandoverRx::~HandoverRx() {
  while (count_) {
    rte_pktmbuf_free(ring_[head_]);
    head_ = (head_ + 1) % static_cast<uint32_t>(ring_.size());
    count_--;
  }
  /* Packets still held belong to the port's pool; the port is closed after the engine. */
}

void HandoverRx::Push(rte_mbuf* m) {
  if (count_ == ring_.size()) {
    ring_full_.Add(1);
    rte_pktmbuf_free(m);
    return;
  }
  ring_[(head_ + count_) % ring_.size()] = m;
  count_++;
}

void HandoverRx::PushMove(rte_mbuf* m) {
  const uint32_t at = (head_ + count_) % static_cast<uint32_t>(ring_.size());
  const uint32_t before = count_;
  Push(m);
  /* Its ring index names it until Take hands it out: nothing else goes there before. */
  if (count_ > before) moves_.push_back(at);
}

void HandoverRx::PushReleased(uint32_t n) {
  for (uint32_t i = 0; i < n; i++) Push(static_cast<rte_mbuf*>(released_[i]));
}

uint16_t HandoverRx::Take(rte_mbuf** out, uint16_t n, uint32_t* moves) {
  uint16_t k = 0;
  *moves = 0;
  if (moves_.empty()) {
    while (k < n && count_) {
      out[k++] = ring_[head_];
      head_ = (head_ + 1) % static_cast<uint32_t>(ring_.size());
      count_--;
    }
    return k;
  }
  while (k < n && count_) {
    if (!moves_.empty() && moves_.front() == head_) { /* move frames leave in the order they came */
      *moves |= 1u << k;
      moves_.pop_front();
    }
    out[k++] = ring_[head_];
    head_ = (head_ + 1) % static_cast<uint32_t>(ring_.size());
    count_--;
  }
  return k;
}

void HandoverRx::PassMove(rte_mbuf* m, const uint8_t* payload, size_t len) {
  inband::Type type;
  size_t body_len;
  switch (inband::ParseMove(payload, len, &type, &body_len)) {
    case inband::Malformed::kNone:
      break;
    case inband::Malformed::kVersion:
      table_.Count(HandoverCount::kBadVersion);
      rte_pktmbuf_free(m);
      return;
    default:
      table_.Count(HandoverCount::kMalformed);
      rte_pktmbuf_free(m);
      return;
  }
  /* It leaves the instance marked, as it came: the mark goes back in front
   * of the EtherType (into the room taking it off left, or the headroom). */
  auto* d = m->nb_segs == 1 ? reinterpret_cast<uint8_t*>(rte_pktmbuf_prepend(m, inband::kTagLen)) : nullptr;
  if (!d) {
    table_.Count(HandoverCount::kMalformed);
    rte_pktmbuf_free(m);
    return;
  }
  std::memmove(d, d + inband::kTagLen, inband::kMacs);
  inband::Put16(d + inband::kMacs, inband::kTpidVlan);
  inband::Put16(d + inband::kMacs + 2, inband::kMarkVid);
  table_.Count(HandoverCount::kMoveFrames);
  /* What the flow has held here goes first (HandoverTable::OnMove). */
  inband::FlowId f;
  if (inband::MoveFlowId(payload + inband::kHeaderLen, body_len, &f)) {
    uint32_t n = 0;
    table_.OnMove(f, released_.data(), &n);
    PushReleased(n);
  }
  PushMove(m);
}

void HandoverRx::Classify(rte_mbuf* m, uint64_t now) {
  uint8_t* d = rte_pktmbuf_mtod(m, uint8_t*);
  size_t len = rte_pktmbuf_data_len(m);
  bool marked = false;
  if ((m->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED) && (m->vlan_tci & 0x0FFF) == inband::kMarkVid) {
    /* A kernel socket took the outer tag off and reported it beside the frame. */
    m->ol_flags &= ~(RTE_MBUF_F_RX_VLAN_STRIPPED | RTE_MBUF_F_RX_VLAN);
    marked = true;
  } else if (const size_t at = inband::MarkOffset(d, len)) {
    std::memmove(d + inband::kTagLen, d, at);
    rte_pktmbuf_adj(m, inband::kTagLen);
    d += inband::kTagLen;
    len -= inband::kTagLen;
    marked = true;
  }
  inband::FlowId f;
  uint32_t n = 0;
  if (marked && len >= inband::kMacs + 2 && inband::Get16(d + inband::kMacs) == inband::kEtherType) {
    const uint8_t* p = d + inband::kMacs + 2;
    const size_t plen = len - inband::kMacs - 2;
    if (plen >= inband::kHeaderLen && inband::IsMoveType(p[1])) return PassMove(m, p, plen);
    uint64_t seq;
    switch (inband::ParseMarker(p, plen, &f, &seq)) {
      case inband::Malformed::kNone:
        table_.OnMarker(f, now, released_.data(), &n);
        PushReleased(n);
        break;
      case inband::Malformed::kVersion:
        table_.Count(HandoverCount::kBadVersion);
        break;
      case inband::Malformed::kUnknownType:
        table_.Count(HandoverCount::kUnknownType);
        break;
      default:
        table_.Count(HandoverCount::kMalformed);
    }
    rte_pktmbuf_free(m); /* an in-band frame never reaches an NF or the wire */
    return;
  }
  if (marked) {
    if (ParseFlowId(d, len, &f)) table_.OnViaIngress(f, now);
  } else if (ParseFlowId(d, len, &f)) {
    if (table_.OnDirect(f, m, now, released_.data(), &n)) return;
    PushReleased(n);
  }
  Push(m);
}

bool HandoverRx::AnyMarked(rte_mbuf* const* m, uint16_t k) {
  for (uint16_t i = 0; i < k; i++) {
    if (((m[i]->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED) && (m[i]->vlan_tci & 0x0FFF) == inband::kMarkVid) ||
        inband::IsMarked(rte_pktmbuf_mtod(m[i], const uint8_t*), rte_pktmbuf_data_len(m[i])))
      return true;
  }
  return false;
}

void HandoverRx::Feed(rte_mbuf** in, uint16_t k, uint64_t now) {
  if (!armed_.load(std::memory_order_relaxed)) {
    if (!AnyMarked(in, k)) {
      for (uint16_t i = 0; i < k; i++) Push(in[i]);
      return;
    }
    armed_.store(true, std::memory_order_relaxed);
  }
  for (uint16_t i = 0; i < k; i++) Classify(in[i], now);
}

uint16_t HandoverRx::Receive(uint16_t port, rte_mbuf** out, uint16_t n, uint64_t now, uint32_t* moves) {
  uint32_t timed_out = 0;
  table_.Poll(now, released_.data(), &timed_out);
  PushReleased(timed_out);
  if (count_) return Take(out, n, moves);
  const uint16_t k = rte_eth_rx_burst(port, 0, out, n);
  /* Not behind keel-ingress (yet): nothing to order; the packets go as they came. */
  if (!armed_.load(std::memory_order_relaxed) && !AnyMarked(out, k)) {
    *moves = 0;
    return k;
  }
  Feed(out, k, now);
  return Take(out, n, moves);
}

nlohmann::json HandoverRx::ToJson() const {
  nlohmann::json j = nlohmann::json::object();
  for (size_t c = 0; c < static_cast<size_t>(HandoverCount::kCount); c++)
    j[HandoverCountName(static_cast<HandoverCount>(c))] = table_.count(static_cast<HandoverCount>(c));
  j["ring_full"] = ring_full_.Get();
  j["behind_ingress"] = armed_.load(std::memory_order_relaxed);
  return j;
}

}  // namespace keel
