/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/state.h"

#include <cstring>

namespace keel {

static constexpr size_t kMaxAsked = 1 << 16;

bool FlowState::Read(const FlowKey& flow, void* val, size_t len) {
  auto it = table_.find(flow);
  if (it != table_.end()) {
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

void FlowState::Update(const FlowKey& flow, const void* val, size_t len) {
  if (len > kMaxStateValue) len = kMaxStateValue;
  Entry& e = table_.try_emplace(flow, Entry{0, false, {}}).first->second;
  e.len = static_cast<uint8_t>(len);
  std::memcpy(e.data, val, len);
  MarkDirty(flow, &e);
}

void FlowState::Remove(const FlowKey& flow) {
  if (table_.erase(flow) && mirrored_) removed_.push_back(flow);
}

void FlowState::Preload(const StateRecord& rec) {
  Entry& e = table_[rec.key];
  e.len = rec.len;
  e.dirty = false;
  std::memcpy(e.data, rec.data, rec.len);
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
    Entry e{r.len, false, {}};
    std::memcpy(e.data, r.data, r.len);
    table_.try_emplace(r.key, e);
    asked_.erase(r.key);
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
