/* SPDX-License-Identifier: Apache-2.0 */
#include "flow_table.h"

#include <algorithm>

namespace keel::ingress {

FlowTable::FlowTable(const FlowTableConfig& cfg)
    : cfg_(cfg), slot_pkt_(cfg.hold_max), next_(cfg.hold_max) {
  flows_.reserve(cfg.max_flows);
  for (uint32_t i = 0; i < cfg.hold_max; i++) next_[i] = i + 1 < cfg.hold_max ? i + 1 : kNil;
  free_ = cfg.hold_max ? 0 : kNil;
}

PacketVerdict FlowTable::OnPacket(const FlowKey& key, Packet pkt, uint64_t now) {
  auto it = flows_.find(key);
  if (it == flows_.end()) return {Verdict::kUnknown, DropReason::kCount};
  Flow& f = it->second;
  switch (f.state) {
    case State::kPending:
      return Hold(&f, pkt);
    case State::kForwarding:
      f.since = now;
      return {Verdict::kForward, DropReason::kCount, f.vlan, f.marker_sent};
    case State::kBackoff:
      if (now - f.since < cfg_.retry_backoff_ns) return {Verdict::kDrop, f.failure};
      flows_.erase(it);
      return {Verdict::kUnknown, DropReason::kCount};
  }
  return {Verdict::kUnknown, DropReason::kCount};
}

uint64_t FlowTable::Start(const FlowKey& key, Packet pkt, uint64_t now, PacketVerdict* first) {
  if (flows_.size() >= cfg_.max_flows) return 0;
  uint64_t id = next_req_++;
  Flow& f = flows_[key];
  f = Flow{State::kPending, DropReason::kCount, 0, false, 0, id, now, kNil, kNil, 0};
  *first = Hold(&f, pkt);
  return id;
}

Resolution FlowTable::Resolve(const FlowKey& key, uint64_t req_id, DropReason failure, uint16_t vlan,
                              uint64_t now, std::vector<Packet>* packets, uint64_t* since) {
  auto it = flows_.find(key);
  if (it == flows_.end() || it->second.req_id != req_id || it->second.state != State::kPending) {
    return Resolution::kStale;
  }
  Flow& f = it->second;
  *since = f.since;
  if (failure != DropReason::kCount) {
    Fail(&f, failure, now, packets);
    return Resolution::kFailed;
  }
  TakeHeld(&f, packets);
  f.state = State::kForwarding;
  f.vlan = vlan;
  f.since = now;
  return Resolution::kReleased;
}

bool FlowTable::Installed(const FlowKey& key, uint64_t req_id, uint64_t now) {
  auto it = flows_.find(key);
  if (it == flows_.end() || it->second.req_id != req_id || it->second.state != State::kForwarding ||
      it->second.vlan == 0)
    return false;
  it->second.installed = now;
  return true;
}

MarkerDue FlowTable::MarkerState(const FlowKey& key, uint64_t req_id, uint64_t now, uint64_t quiet_ns,
                                 uint16_t* vlan) {
  auto it = flows_.find(key);
  if (it == flows_.end() || it->second.req_id != req_id || it->second.state != State::kForwarding ||
      it->second.marker_sent || it->second.installed == 0)
    return MarkerDue::kGone;
  Flow& f = it->second;
  const uint64_t last = std::max(f.installed, f.since);
  if (now < last || now - last < quiet_ns) return MarkerDue::kWait; /* now may be a read's start, before it */
  f.marker_sent = true;
  *vlan = f.vlan;
  return MarkerDue::kDue;
}

bool FlowTable::Settling(const FlowKey& key) const {
  auto it = flows_.find(key);
  if (it == flows_.end()) return false;
  const Flow& f = it->second;
  return f.state == State::kPending || (f.state == State::kForwarding && f.vlan != 0 && !f.marker_sent);
}

uint64_t FlowTable::Adopt(const FlowKey& key, uint16_t vlan, bool installed, uint64_t now) {
  uint64_t id = next_req_++;
  Flow& f = flows_[key];
  /* A setup of the flow holds nothing here: a moving flow's packets are the mover's. */
  f = Flow{State::kForwarding, DropReason::kCount, vlan, false, installed ? now : 0, id, now, kNil, kNil, 0};
  return id;
}

void FlowTable::Expire(uint64_t now, std::vector<Packet>* timed_out) {
  for (auto it = flows_.begin(); it != flows_.end();) {
    Flow& f = it->second;
    uint64_t age = now - f.since;
    bool forget = (f.state == State::kForwarding && age >= cfg_.retire_ns) ||
                  (f.state == State::kBackoff && age >= cfg_.retry_backoff_ns);
    if (f.state == State::kPending && age >= cfg_.hold_timeout_ns) Fail(&f, DropReason::kTimeout, now, timed_out);
    it = forget ? flows_.erase(it) : std::next(it);
  }
}

PacketVerdict FlowTable::Hold(Flow* f, Packet pkt) {
  if (f->count >= cfg_.hold_per_flow || free_ == kNil) return {Verdict::kDrop, DropReason::kBufferFull};
  uint32_t s = free_;
  free_ = next_[s];
  slot_pkt_[s] = pkt;
  next_[s] = kNil;
  if (f->tail == kNil) {
    f->head = s;
  } else {
    next_[f->tail] = s;
  }
  f->tail = s;
  f->count++;
  if (++held_ > held_peak_) held_peak_ = held_;
  return {Verdict::kHeld, DropReason::kCount};
}

void FlowTable::TakeHeld(Flow* f, std::vector<Packet>* out) {
  for (uint32_t s = f->head; s != kNil;) {
    uint32_t n = next_[s];
    out->push_back(slot_pkt_[s]);
    next_[s] = free_;
    free_ = s;
    s = n;
  }
  held_ -= f->count;
  f->head = f->tail = kNil;
  f->count = 0;
}

void FlowTable::Fail(Flow* f, DropReason why, uint64_t now, std::vector<Packet>* out) {
  TakeHeld(f, out);
  f->state = State::kBackoff;
  f->failure = why;
  f->since = now;
}

}  // namespace keel::ingress
