/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/sojourn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace keel {
namespace {

TEST(LatencyHist, BucketsTileTheValuesWithoutGapsAndStayNarrow) {
  EXPECT_EQ(LatencyHist::Lower(0), 0u);
  for (int b = 0; b + 1 < LatencyHist::kBuckets; b++) {
    ASSERT_EQ(LatencyHist::Upper(b) + 1, LatencyHist::Lower(b + 1)) << "bucket " << b;
    ASSERT_EQ(LatencyHist::Bucket(LatencyHist::Lower(b)), b);
    ASSERT_EQ(LatencyHist::Bucket(LatencyHist::Upper(b)), b);
    /* No bucket wider than 1/64 of its lower edge: the 1.6 % bound. */
    const double width = static_cast<double>(LatencyHist::Upper(b) - LatencyHist::Lower(b) + 1);
    ASSERT_LE(width, std::max(1.0, static_cast<double>(LatencyHist::Lower(b)) / 64.0)) << "bucket " << b;
  }
}

TEST(LatencyHist, QuantilesWithinTwoPercentOfASortedReference) {
  std::mt19937_64 rng(32);
  /* Log-uniform from 100 cycles to 10^8 (40 ns .. 40 ms at 2.6 GHz), plus a
   * heavy tail: the spread a chain's sojourn has between idle and stalled. */
  std::uniform_real_distribution<double> exp10(2.0, 8.0);
  std::vector<uint64_t> ref;
  LatencyHist h;
  for (int i = 0; i < 200000; i++) {
    uint64_t v = static_cast<uint64_t>(std::pow(10.0, exp10(rng)));
    if (i % 1000 == 0) v *= 50;
    ref.push_back(v);
    h.Record(v);
  }
  std::sort(ref.begin(), ref.end());
  EXPECT_EQ(h.count(), ref.size());
  EXPECT_EQ(h.max(), ref.back());
  for (double q : {0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0}) {
    const uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(ref.size())));
    const double truth = static_cast<double>(ref[rank - 1]);
    const double got = static_cast<double>(h.Quantile(q));
    EXPECT_GE(got, truth) << "q " << q << ": a quantile is never under-reported";
    EXPECT_LE(got, truth * 1.02) << "q " << q;
  }
}

TEST(LatencyHist, BurstsOfEqualSojournCountEachPacket) {
  LatencyHist h;
  h.RecordN(1000, 31);
  h.Record(500000);
  EXPECT_EQ(h.count(), 32u);
  EXPECT_EQ(h.sum(), 31u * 1000 + 500000);
  EXPECT_LE(h.Quantile(0.5), 1000u * 1.02);
  EXPECT_GE(h.Quantile(0.5), 1000u);
  EXPECT_EQ(h.Quantile(1.0), 500000u);
  EXPECT_EQ(LatencyHist().Quantile(0.99), 0u) << "empty";
}

TEST(LatencyHist, FixedMemoryWhateverItRecords) {
  LatencyHist h;
  const size_t size = sizeof(h);
  h.Record(0);
  h.Record(UINT64_MAX); /* beyond the last octave: the last bucket */
  h.Record(uint64_t{1} << 50);
  EXPECT_EQ(LatencyHist::Bucket(UINT64_MAX), LatencyHist::kBuckets - 1);
  EXPECT_EQ(h.bucket_count(LatencyHist::kBuckets - 1), 2u);
  EXPECT_EQ(h.Quantile(1.0), UINT64_MAX);
  EXPECT_EQ(sizeof(h), size);
  EXPECT_LE(size, 17u * 1024) << "a histogram per instance stays small";
}

TEST(LatencyHist, JsonCarriesEveryPacket) {
  LatencyHist h;
  for (uint64_t v = 1; v < 100000; v += 7) h.Record(v);
  Json j = h.ToJson();
  EXPECT_EQ(j["unit"], "tsc_cycles");
  EXPECT_EQ(j["sub_bucket_bits"], LatencyHist::kSubBits);
  uint64_t n = 0;
  int last = -1;
  for (const auto& b : j["buckets"]) {
    EXPECT_GT(b[0].get<int>(), last) << "ascending, non-empty only";
    EXPECT_GT(b[1].get<uint64_t>(), 0u);
    last = b[0].get<int>();
    n += b[1].get<uint64_t>();
  }
  EXPECT_EQ(n, h.count());
}

}  // namespace
}  // namespace keel
