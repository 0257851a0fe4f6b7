/* SPDX-License-Identifier: Apache-2.0 */
#include "histogram.h"

#include <algorithm>
#include <cmath>

namespace keel::trafgen {

namespace {

constexpr unsigned kSubBits = 8;
constexpr uint64_t kSub = 1u << kSubBits;  /* exact values below this */
constexpr uint64_t kHalf = kSub / 2;       /* buckets per power of two above */

unsigned BitWidth(uint64_t v) { return v ? 64u - static_cast<unsigned>(__builtin_clzll(v)) : 0; }

}  // namespace

Histogram::Histogram() : counts_(Bucket(kMaxNs) + 1) {}

size_t Histogram::Bucket(uint64_t ns) {
  if (ns < kSub) return ns;
  unsigned shift = BitWidth(ns) - kSubBits;  /* >= 1: keep the top 8 bits */
  uint64_t top = ns >> shift;                /* in [kHalf, kSub) */
  return kSub + (shift - 1) * kHalf + (top - kHalf);
}

uint64_t Histogram::BucketLow(size_t b) {
  if (b < kSub) return b;
  uint64_t shift = (b - kSub) / kHalf + 1;
  uint64_t top = (b - kSub) % kHalf + kHalf;
  return top << shift;
}

uint64_t Histogram::BucketHigh(size_t b) {
  if (b < kSub) return b;
  uint64_t shift = (b - kSub) / kHalf + 1;
  return BucketLow(b) + (uint64_t{1} << shift) - 1;
}

void Histogram::Record(uint64_t ns) {
  ns = std::min(ns, kMaxNs);
  counts_[Bucket(ns)]++;
  count_++;
  max_ = std::max(max_, ns);
}

uint64_t Histogram::Quantile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_))));
  uint64_t seen = 0;
  for (size_t b = 0; b < counts_.size(); b++) {
    seen += counts_[b];
    if (seen >= rank) return std::min(BucketHigh(b), max_);
  }
  return max_;
}

void Histogram::Reset() {
  std::fill(counts_.begin(), counts_.end(), 0);
  count_ = max_ = 0;
}

}  // namespace keel::trafgen
