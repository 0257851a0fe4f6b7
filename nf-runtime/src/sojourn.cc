/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/sojourn.h"

#include <cmath>

namespace keel {

uint64_t LatencyHist::Lower(int b) {
  if (b < static_cast<int>(kSub)) return static_cast<uint64_t>(b);
  const int shift = b / static_cast<int>(kSub) - 1;
  return (kSub + static_cast<uint64_t>(b) % kSub) << shift;
}

uint64_t LatencyHist::Upper(int b) {
  if (b == kBuckets - 1) return UINT64_MAX;
  return Lower(b + 1) - 1;
}

uint64_t LatencyHist::Quantile(double q) const {
  /* The rank of the packet sought: ceil(q * n), at least the first. */
  uint64_t n = 0;
  for (int b = 0; b < kBuckets; b++) n += bucket_count(b);
  if (n == 0) return 0;
  const double want = std::ceil(q * static_cast<double>(n));
  const uint64_t rank = want < 1 ? 1 : static_cast<uint64_t>(want);
  uint64_t acc = 0;
  for (int b = 0; b < kBuckets; b++) {
    acc += bucket_count(b);
    if (acc >= rank) return Upper(b) < max() ? Upper(b) : max();
  }
  return max();
}

Json LatencyHist::ToJson() const {
  Json buckets = Json::array();
  for (int b = 0; b < kBuckets; b++)
    if (uint64_t c = bucket_count(b)) buckets.push_back({b, c});
  return {{"unit", "tsc_cycles"}, {"sub_bucket_bits", kSubBits}, {"count", count()},
          {"sum", sum()},         {"max", max()},                {"buckets", buckets}};
}

}  // namespace keel
