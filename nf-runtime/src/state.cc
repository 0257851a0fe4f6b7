/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/state.h"

#include <chrono>
#include <cstring>

namespace keel {

static constexpr size_t kMaxAsked = 1 << 16;
/* Idle flows Advance evicts at most per call, so a batch never waits long. */
static constexpr size_t kEvictPerAdvance = 32;

FlowState::FlowState()
    : now_ms_(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count())) {}

void FlowState::Touch(Entry* e) {
  e->used_ms = now_ms_;
  lru_.splice(lru_.begin(), lru_, e->lru);
}

size_t FlowState::EvictIdle(size_t max) {
  if (limits_.idle_timeout_ms == 0) return 0;
  size_t n = 0;
  while (n < max && !lru_.empty()) {
    auto it = table_.find(lru_.back());
    if (now_ms_ - it->second.used_ms < limits_.idle_timeout_ms) break;
    if (mirrored_) removed_.push_back(it->first);
    table_.erase(it);
    lru_.pop_back();
    n++;
  }
  evictions_.Add(n);
  flows_.Set(table_.size());
  return n;
}

void FlowState::Advance(uint64_t now_ms) {
  if (now_ms > now_ms_) now_ms_ = now_ms;
  EvictIdle(kEvictPerAdvance);
}

FlowState::Entry* FlowState::Insert(const FlowKey& flow) {
  auto it = table_.find(flow);
  if (it != table_.end()) {
    Touch(&it->second);
    return &it->second;
  }
  if (table_.size() >= limits_.capacity && EvictIdle(1) == 0) {
    refusals_.Add(1);
    return nullptr;
  }
  lru_.push_front(flow);
  Entry& e = table_[flow];
  e.used_ms = now_ms_;
  e.lru = lru_.begin();
  flows_.Set(table_.size());
  return &e;
}

bool FlowState::Read(const FlowKey& flow, void* val, size_t len) {
  auto it = table_.find(flow);
  if (it != table_.end()) {
    Touch(&it->second);
    size_t n = len < it->second.len ? len : it->second.len;
    std::memcpy(val, it->second.data, n);
    return true;
  }
  /* Galleon §4.2: pull the state of an unknown flow from the store. The
   * request is asked once per flow and answered by a later Sync(). */
  if (mirrored_ && asked_.insert(flow).second) pulls_.push_back(flow);
  return false;
}

void FlowState::MarkDirty(const FlowKey& flow, Entry* e) {
  if (!mirrored_ || e->dirty) return;
  e->dirty = true;
  dirty_keys_.push_back(flow);
}

bool FlowState::Update(const FlowKey& flow, const void* val, size_t len) {
  if (len > kMaxStateValue) len = kMaxStateValue;
  Entry* e = Insert(flow);
  if (!e) return false;
  e->len = static_cast<uint8_t>(len);
  std::memcpy(e->data, val, len);
  MarkDirty(flow, e);
  return true;
}

void FlowState::Remove(const FlowKey& flow) {
  auto it = table_.find(flow);
  if (it == table_.end()) return;
  lru_.erase(it->second.lru);
  table_.erase(it);
  flows_.Set(table_.size());
  if (mirrored_) removed_.push_back(flow);
}

bool FlowState::Peek(const FlowKey& flow, StateRecord* out) const {
  auto it = table_.find(flow);
  if (it == table_.end()) return false;
  out->key = flow;
  out->len = it->second.len;
  std::memcpy(out->data, it->second.data, it->second.len);
  return true;
}

bool FlowState::Take(const FlowKey& flow, StateRecord* out) {
  if (!Peek(flow, out)) return false;
  Remove(flow);
  return true;
}

bool FlowState::Preload(const StateRecord& rec) {
  Entry* e = Insert(rec.key);
  if (!e) return false;
  e->len = rec.len;
  e->dirty = false;
  std::memcpy(e->data, rec.data, rec.len);
  return true;
}

void FlowState::Sync(bool wait) {
  if (!mirrored_) return;
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  if (wait)
    lock.lock();
  else if (!lock.try_lock())
    return;
  for (const FlowKey& k : dirty_keys_) {
    auto it = table_.find(k);
    if (it == table_.end() || !it->second.dirty) continue;
    it->second.dirty = false;
    StateRecord& r = out_.emplace_back();
    r.key = k;
    r.len = it->second.len;
    std::memcpy(r.data, it->second.data, r.len);
  }
  dirty_keys_.clear();
  for (const FlowKey& k : removed_) {
    if (table_.count(k)) continue; /* re-created since: its update is queued */
    StateRecord& r = out_.emplace_back();
    r.key = k;
    r.len = 0;
  }
  removed_.clear();
  out_pulls_.insert(out_pulls_.end(), pulls_.begin(), pulls_.end());
  pulls_.clear();
  /* A pulled value only fills a flow still unknown here: local updates made
   * since the request are newer than the store's copy. */
  for (const StateRecord& r : in_) {
    if (!r.len) continue;
    asked_.erase(r.key);
    if (table_.count(r.key)) continue;
    if (Entry* e = Insert(r.key)) {
      e->len = r.len;
      std::memcpy(e->data, r.data, r.len);
    }
  }
  /* Flows the store did not know stay in asked_ so they are not asked again;
   * bound that memory. */
  if (asked_.size() > kMaxAsked) asked_.clear();
  in_.clear();
}

void FlowState::Exchange(std::vector<StateRecord>* dirty, std::vector<FlowKey>* pulls,
                         std::vector<StateRecord>* pulled) {
  std::lock_guard<std::mutex> lock(mu_);
  dirty->insert(dirty->end(), out_.begin(), out_.end());
  out_.clear();
  pulls->insert(pulls->end(), out_pulls_.begin(), out_pulls_.end());
  out_pulls_.clear();
  in_.insert(in_.end(), pulled->begin(), pulled->end());
  pulled->clear();
}

}  // namespace keel
