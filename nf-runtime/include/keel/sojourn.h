/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The server sojourn of a chain instance's packets (issue 32): how long each
 * packet spent between position 0 receiving it from the instance's VF and
 * position 0 transmitting it (or finding it dropped by an NF) at the end of
 * the chain, in TSC cycles, kept in a log-bucketed histogram.
 *
 * The histogram is HDR-style (Tene's HdrHistogram, as gateway/internal/
 * dpmodel/hist.go models it): values under 2^kSubBits cycles each have a
 * bucket of their own; above, each power of two is split into 2^kSubBits
 * linear sub-buckets, so a bucket is never wider than 1/64 of its lower
 * edge, and a quantile read as its bucket's upper edge is at most 1.6 % above
 * the true value, never below it. Memory is fixed: kBuckets counters, however
 * many packets and however long they waited (beyond 2^kMaxOctave cycles, some
 * 26 s at 2.6 GHz, everything goes to the last bucket).
 *
 * The packet thread is the only writer and only ever adds (plain relaxed
 * stores, no locked instruction); the statistics thread copies it at any
 * time. Counts are cumulative, like a Prometheus histogram: keel-agent takes
 * a window as the difference of two statistics files (agent/internal/
 * nfstats/sojourn.go), so nothing ever resets what the packet thread writes.
 */
#ifndef KEEL_SOJOURN_H_
#define KEEL_SOJOURN_H_

#include <cstdint>

#include "keel/config.h"

namespace keel {

class LatencyHist {
 public:
  static constexpr int kSubBits = 6;
  static constexpr uint64_t kSub = uint64_t{1} << kSubBits;
  static constexpr int kMaxOctave = 36; /* the highest bit of the largest value kept apart */
  static constexpr int kBuckets = (kMaxOctave - kSubBits + 2) * static_cast<int>(kSub);

  /* The bucket of |v| cycles. */
  static int Bucket(uint64_t v) {
    if (v < kSub) return static_cast<int>(v);
    const int msb = 63 - __builtin_clzll(v);
    if (msb > kMaxOctave) return kBuckets - 1;
    const int shift = msb - kSubBits;
    return (shift + 1) * static_cast<int>(kSub) + static_cast<int>((v >> shift) & (kSub - 1));
  }
  /* The smallest and the largest value bucket |b| holds. */
  static uint64_t Lower(int b);
  static uint64_t Upper(int b);

  /* Records one packet of sojourn |v| cycles; |n| packets of the same. */
  void Record(uint64_t v) { RecordN(v, 1); }
  void RecordN(uint64_t v, uint64_t n) {
    Bump(&counts_[Bucket(v)], n);
    Bump(&count_, n);
    Bump(&sum_, v * n);
    if (v > __atomic_load_n(&max_, __ATOMIC_RELAXED)) __atomic_store_n(&max_, v, __ATOMIC_RELAXED);
  }

  /* Records |n| packets that left at TSC |now|, received at |rx_tsc|[i]:
   * the totals are summed in registers and written once. */
  void RecordBurst(uint64_t now, const uint64_t* rx_tsc, int n) {
    uint64_t sum = 0, top = 0;
    for (int i = 0; i < n; i++) {
      const uint64_t v = now - rx_tsc[i];
      Bump(&counts_[Bucket(v)], 1);
      sum += v;
      top = v > top ? v : top;
    }
    Bump(&count_, static_cast<uint64_t>(n));
    Bump(&sum_, sum);
    if (top > __atomic_load_n(&max_, __ATOMIC_RELAXED)) __atomic_store_n(&max_, top, __ATOMIC_RELAXED);
  }

  uint64_t count() const { return __atomic_load_n(&count_, __ATOMIC_RELAXED); }
  uint64_t sum() const { return __atomic_load_n(&sum_, __ATOMIC_RELAXED); }
  uint64_t max() const { return __atomic_load_n(&max_, __ATOMIC_RELAXED); }
  uint64_t bucket_count(int b) const { return __atomic_load_n(&counts_[b], __ATOMIC_RELAXED); }

  /* The q-quantile (0 < q <= 1) in cycles: the upper edge of the bucket of
   * the ceil(q * count)-th smallest packet, at most max; 0 when empty. */
  uint64_t Quantile(double q) const;

  /* {"unit": "tsc_cycles", "sub_bucket_bits", "count", "sum", "max",
   * "buckets": [[bucket, count], ...] (non-empty ones, ascending)}: the schema
   * keel-agent reads (agent/internal/nfstats/sojourn.go). */
  Json ToJson() const;

 private:
  static void Bump(uint64_t* w, uint64_t n) {
    __atomic_store_n(w, __atomic_load_n(w, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
  }

  uint64_t counts_[kBuckets] = {};
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t max_ = 0;
};
static_assert(sizeof(LatencyHist) == (LatencyHist::kBuckets + 3) * sizeof(uint64_t),
              "fixed memory: one word a bucket and three");

}  // namespace keel

#endif  // KEEL_SOJOURN_H_
