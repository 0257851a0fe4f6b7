/* SPDX-License-Identifier: Apache-2.0 */
/* A log-linear latency histogram in the manner of HdrHistogram: values in
 * nanoseconds, exact below 256 ns, above that 128 buckets per power of two
 * (at most 0.8 % relative error, two significant digits), up to 10 s;
 * larger values count as 10 s. */
#ifndef KEEL_TRAFGEN_HISTOGRAM_H_
#define KEEL_TRAFGEN_HISTOGRAM_H_

#include <cstdint>
#include <cstddef>
#include <vector>

namespace keel::trafgen {

class Histogram {
 public:
  static constexpr uint64_t kMaxNs = 10'000'000'000ull;

  Histogram();
  void Record(uint64_t ns);
  /* The value at quantile |q| (0..1): the highest value of the bucket that
   * holds it, never above the largest value recorded; 0 when empty. */
  uint64_t Quantile(double q) const;
  uint64_t Count() const { return count_; }
  uint64_t Max() const { return max_; }
  void Reset();

  /* The bucket |ns| falls in, and the bucket's value range; for tests. */
  static size_t Bucket(uint64_t ns);
  static uint64_t BucketLow(size_t bucket);
  static uint64_t BucketHigh(size_t bucket);

 private:
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0, max_ = 0;
};

}  // namespace keel::trafgen

#endif  // KEEL_TRAFGEN_HISTOGRAM_H_
