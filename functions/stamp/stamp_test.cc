/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>

#include <chrono>

#include "testing/nf_test.h"

namespace keel {
namespace {

TEST(Stamp, ChainOfThreeStampsInOrder) {
  auto s0 = MakeNf("stamp", R"({"index":0})");
  auto s1 = MakeNf("stamp", R"({"index":1})");
  auto s2 = MakeNf("stamp", R"({"index":2})");
  RunResult r = RunChain({s0.get(), s1.get(), s2.get()},
                         {UdpPacket("198.18.0.1", "198.19.0.1", 1, 2, "xxxxxx")});
  ASSERT_EQ(r.out.size(), 1u);
  const auto& b = r.out[0];
  EXPECT_EQ(std::vector<uint8_t>(b.end() - 6, b.end() - 3), (std::vector<uint8_t>{0, 1, 2}));
  EXPECT_EQ(s2->Stats()["out_of_order"], 0);
}

TEST(Stamp, SkippedPredecessorIsCaughtAndDropped) {
  auto s0 = MakeNf("stamp", R"({"index":0})");
  auto s2 = MakeNf("stamp", R"({"index":2})");
  RunResult r = RunChain({s0.get(), s2.get()}, {UdpPacket("198.18.0.1", "198.19.0.1", 1, 2, "xxxxxx")});
  EXPECT_EQ(r.out.size(), 0u);
  EXPECT_EQ(s2->Stats()["out_of_order"], 1);
}

TEST(Stamp, ShortPayloadPassesAndBadIndexIsRejected) {
  auto s = MakeNf("stamp", R"({"index":5})");
  RunResult r = RunBatch(s.get(), {UdpPacket("198.18.0.1", "198.19.0.1", 1, 2, "ab")});
  EXPECT_EQ(r.out.size(), 1u);
  EXPECT_THROW_MSG(MakeNf("stamp", R"({"index":256})"), "stamp.index: 256 is out of range");
}

TEST(Stamp, StallHoldsEveryBatchAndIsBounded) {
  auto s = MakeNf("stamp", R"({"index":0,"stall_ns":2000000})");
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = RunBatch(s.get(), {UdpPacket("198.18.0.1", "198.19.0.1", 1, 2, "xxxxxx")});
  EXPECT_EQ(r.out.size(), 1u);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2));
  EXPECT_THROW_MSG(MakeNf("stamp", R"({"index":0,"stall_ns":20000000})"), "stamp.stall_ns: 20000000 is out of range");
}

TEST(Stamp, StallWithoutIndexLeavesPacketsAsTheyCame) {
  auto s = MakeNf("stamp", R"({"stall_ns":1000})");
  auto in = UdpPacket("198.18.0.1", "198.19.0.1", 1, 2, "KEELxx");
  RunResult r = RunBatch(s.get(), {in});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], in.bytes());
  EXPECT_EQ(s->Stats()["stamped"], 0);
  EXPECT_THROW_MSG(MakeNf("stamp", "{}"), "stamp.index");
}

}  // namespace
}  // namespace keel
