/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>

#include "testing/nf_test.h"

namespace keel {
namespace {

TEST(MacSwap, SwapsAddressesAndKeepsTheRest) {
  auto nf = MakeNf("macswap", "{}");
  TestPacket pkt = UdpPacket("198.18.0.1", "198.18.1.2", 1000, 2000, "hello");
  std::vector<uint8_t> want = pkt.bytes();
  for (int i = 0; i < 6; i++) std::swap(want[i], want[6 + i]);
  RunResult r = RunBatch(nf.get(), {pkt});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], want);
}

TEST(MacSwap, DropsRuntFrames) {
  auto nf = MakeNf("macswap", "{}");
  RunResult r = RunBatch(nf.get(), {TestPacket(std::vector<uint8_t>(10, 0xab))});
  EXPECT_EQ(r.out.size(), 0u);
  EXPECT_EQ(r.dropped, 1);
}

TEST(MacSwap, RejectsUnknownField) {
  EXPECT_THROW_MSG(MakeNf("macswap", R"({"x":1})"), "macswap.x: unknown field");
}

}  // namespace
}  // namespace keel
