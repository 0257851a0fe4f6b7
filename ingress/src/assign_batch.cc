/* SPDX-License-Identifier: Apache-2.0 */
#include "assign_batch.h"

#include <algorithm>
#include <cmath>

namespace keel::ingress {

void AssignBatcher::Add(PendingFlow f, uint64_t now) {
  if (now > recent_at_) recent_ *= std::exp(-static_cast<double>(now - recent_at_) / kRateTauNs);
  recent_at_ = std::max(recent_at_, now);
  recent_ += 1;
  if (waiting_.empty()) {
    const bool quiet = !taken_ || now - last_take_ >= cfg_.window_ns;
    const bool slow = recent_ * 1e9 / kRateTauNs < cfg_.busy_rate;
    due_ = quiet || slow ? now : now + cfg_.window_ns;
  }
  if (f.since == 0) f.since = now;
  waiting_.push_back(std::move(f));
}

bool AssignBatcher::Retry(PendingFlow f, uint64_t now) {
  if (f.attempt >= cfg_.max_attempts) return false;
  /* Ahead of the new flows: it has waited longest. */
  waiting_.push_front(std::move(f));
  due_ = std::min(due_ ? due_ : now, now);
  return true;
}

bool AssignBatcher::Due(uint64_t now) const {
  return !waiting_.empty() && (waiting_.size() >= cfg_.max_flows || now >= due_);
}

uint64_t AssignBatcher::Deadline() const { return waiting_.empty() ? 0 : due_; }

std::vector<PendingFlow> AssignBatcher::Take(uint64_t now, size_t most, std::vector<PendingFlow>* late) {
  std::vector<PendingFlow> batch;
  most = std::min(most, cfg_.max_flows);
  while (!waiting_.empty() && batch.size() < most) {
    PendingFlow f = std::move(waiting_.front());
    waiting_.pop_front();
    if (f.attempt == 0 && now - f.since > cfg_.patience_ns) {
      late->push_back(std::move(f));
      continue;
    }
    f.attempt++;
    batch.push_back(std::move(f));
  }
  /* What is left (a burst beyond the batch) is due at once. */
  due_ = waiting_.empty() ? 0 : now;
  last_take_ = now;
  taken_ = true;
  return batch;
}

}  // namespace keel::ingress
