/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/handover.h"

namespace keel {

namespace {

uint64_t Hash(const inband::FlowId& f) {
  uint64_t a = (uint64_t{f.src_ip} << 32) | f.dst_ip;
  uint64_t b = (uint64_t{f.src_port} << 24) | (uint64_t{f.dst_port} << 8) | f.proto;
  uint64_t h = (a ^ (b * 0xC2B2AE3D27D4EB4Full)) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

uint32_t PowerOfTwoAtLeast(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

const char* HandoverCountName(HandoverCount c) {
  static const char* const kNames[] = {
      "via_ingress",      "markers",          "held",           "released_marker", "released_timeout",
      "released_give_up", "marker_timeout",   "overflow_flow",  "overflow_total",  "table_full",
      "marker_unknown",   "late_via_ingress", "inband_malformed", "inband_version", "inband_unknown_type",
      "direct_first",     "move_frames",      "released_move"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(HandoverCount::kCount));
  return kNames[static_cast<size_t>(c)];
}

bool ParseFlowId(const uint8_t* frame, size_t len, inband::FlowId* f) {
  size_t off = inband::kMacs;
  if (len < off + 2) return false;
  uint16_t type = inband::Get16(frame + off);
  for (int tags = 0; tags < 2 && (type == 0x8100 || type == 0x88A8); tags++) {
    off += inband::kTagLen;
    if (len < off + 2) return false;
    type = inband::Get16(frame + off);
  }
  off += 2;
  if (type != 0x0800 || len < off + 20) return false;
  const uint8_t* ip = frame + off;
  const size_t ihl = size_t{ip[0] & 0x0Fu} * 4;
  if ((ip[0] >> 4) != 4 || ihl < 20 || len < off + ihl) return false;
  if (inband::Get16(ip + 6) & 0x1FFF) return false; /* not the first fragment: no ports */
  f->proto = ip[9];
  f->src_ip = inband::Get32(ip + 12);
  f->dst_ip = inband::Get32(ip + 16);
  f->src_port = f->dst_port = 0;
  if (f->proto == 6 || f->proto == 17) {
    if (len < off + ihl + 4) return false;
    f->src_port = inband::Get16(ip + ihl);
    f->dst_port = inband::Get16(ip + ihl + 2);
  }
  return true;
}

HandoverTable::HandoverTable(const HandoverConfig& cfg)
    : cfg_(cfg),
      buckets_(PowerOfTwoAtLeast((cfg.max_flows + kWays - 1) / kWays)),
      entries_(size_t{buckets_} * kWays),
      slot_pkt_(cfg.hold_max),
      next_(cfg.hold_max) {
  for (uint32_t i = 0; i < cfg.hold_max; i++) next_[i] = i + 1 < cfg.hold_max ? i + 1 : kNil;
  free_ = cfg.hold_max ? 0 : kNil;
}

HandoverTable::Entry* HandoverTable::Find(const inband::FlowId& f) {
  Entry* b = &entries_[(Hash(f) & (buckets_ - 1)) * kWays];
  for (uint32_t i = 0; i < kWays; i++)
    if (b[i].state != State::kFree && b[i].key == f) return &b[i];
  return nullptr;
}

HandoverTable::Entry* HandoverTable::Claim(const inband::FlowId& f) {
  Entry* b = &entries_[(Hash(f) & (buckets_ - 1)) * kWays];
  Entry* victim = nullptr;
  for (uint32_t i = 0; i < kWays; i++) {
    if (b[i].state == State::kFree) {
      victim = &b[i];
      break;
    }
    /* A flow with packets held keeps its entry; any other may go. */
    if (b[i].count == 0 && (!victim || b[i].touched < victim->touched)) victim = &b[i];
  }
  if (!victim) return nullptr;
  if (victim->state != State::kFree) Free(victim);
  victim->key = f;
  used_++;
  return victim;
}

void HandoverTable::SetState(Entry* e, State s) {
  if (e->state == State::kHandover) in_handover_--;
  if (s == State::kHandover) in_handover_++;
  e->state = s;
}

void HandoverTable::Free(Entry* e) {
  SetState(e, State::kFree);
  used_--;
}

void HandoverTable::Release(Entry* e, Packet* out, uint32_t* nout) {
  for (uint32_t s = e->head; s != kNil;) {
    const uint32_t n = next_[s];
    out[(*nout)++] = slot_pkt_[s];
    next_[s] = free_;
    free_ = s;
    s = n;
  }
  held_ -= e->count;
  e->head = e->tail = kNil;
  e->count = 0;
}

void HandoverTable::OnViaIngress(const inband::FlowId& f, uint64_t now) {
  Count(HandoverCount::kViaIngress);
  Entry* e = Find(f);
  if (!e) {
    e = Claim(f);
    if (!e) return Count(HandoverCount::kTableFull);
    SetState(e, State::kHandover);
  } else if (e->state == State::kDone) {
    /* The ingress had it after its marker (an OpenFlow cache entry the ToR
     * had not revalidated yet): it is late already; holding the direct
     * packets again would not put it back in its place. */
    Count(HandoverCount::kLateViaIngress);
  }
  e->touched = now;
}

bool HandoverTable::OnDirect(const inband::FlowId& f, Packet p, uint64_t now, Packet* out, uint32_t* nout) {
  Entry* e = Find(f);
  if (!e) {
    /* Every flow reaches an instance through the ingress first (no flow has a
     * rule of its own before its setup there): a direct packet of a flow not
     * seen yet overtook all of them (the ToR served the flow's rule and the
     * source's port before the ingress' port). */
    e = Claim(f);
    if (!e) {
      Count(HandoverCount::kTableFull);
      return false;
    }
    SetState(e, State::kHandover);
    Count(HandoverCount::kDirectFirst);
  }
  e->touched = now;
  if (e->state != State::kHandover) return false;
  if (e->count >= cfg_.hold_per_flow || free_ == kNil) {
    Count(e->count >= cfg_.hold_per_flow ? HandoverCount::kOverflowFlow : HandoverCount::kOverflowTotal);
    Count(HandoverCount::kReleasedGiveUp, e->count);
    Release(e, out, nout);
    SetState(e, State::kDone);
    return false;
  }
  const uint32_t s = free_;
  free_ = next_[s];
  slot_pkt_[s] = p;
  next_[s] = kNil;
  if (e->tail == kNil) {
    e->head = s;
    e->hold_since = now;
  } else {
    next_[e->tail] = s;
  }
  e->tail = s;
  e->count++;
  held_++;
  Count(HandoverCount::kHeld);
  return true;
}

void HandoverTable::OnMarker(const inband::FlowId& f, uint64_t now, Packet* out, uint32_t* nout) {
  Entry* e = Find(f);
  if (!e || e->state != State::kHandover) return Count(HandoverCount::kMarkerUnknown);
  Count(HandoverCount::kMarkers);
  Count(HandoverCount::kReleasedMarker, e->count);
  Release(e, out, nout);
  SetState(e, State::kDone);
  e->touched = now;
}

void HandoverTable::OnMove(const inband::FlowId& f, Packet* out, uint32_t* nout) {
  Entry* e = Find(f);
  if (!e) return;
  Count(HandoverCount::kReleasedMove, e->count);
  Release(e, out, nout);
  Free(e);
}

void HandoverTable::Poll(uint64_t now, Packet* out, uint32_t* nout) {
  if (used_ == 0 || now < next_poll_) return;
  /* A quarter of the timeout between scans: a hold ends within 1.25 x timeout. */
  next_poll_ = now + (cfg_.timeout / 4 ? cfg_.timeout / 4 : 1);
  for (Entry& e : entries_) {
    if (e.state == State::kFree) continue;
    if (e.count && now - e.hold_since >= cfg_.timeout) {
      Count(HandoverCount::kTimeout);
      Count(HandoverCount::kReleasedTimeout, e.count);
      Release(&e, out, nout);
      SetState(&e, State::kDone);
      e.touched = now;
    } else if (e.count == 0 && now - e.touched >= cfg_.forget) {
      Free(&e);
    }
  }
}

}  // namespace keel
