/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>

#include "payload/payload_testing.h"

namespace keel {
namespace {

std::vector<uint8_t> WithTags(std::vector<uint8_t> frame, std::vector<uint8_t> tags) {
  frame.insert(frame.begin() + 12, tags.begin(), tags.end());
  return frame;
}

TEST(Detunnel, PopsTheTag) {
  auto nf = MakeNf("detunnel", "{}");
  TestPacket plain = UdpPacket("198.18.0.1", "198.18.1.2", 1000, 2000, "hello");
  L4Spec s;
  s.src_ip = "198.18.0.1";
  s.dst_ip = "198.18.1.2";
  s.src_port = 1000;
  s.dst_port = 2000;
  s.payload = "hello";
  s.vlan = 123;
  RunResult r = RunBatch(nf.get(), {BuildPacket(s)});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], plain.bytes());
  EXPECT_TRUE(ChecksumsValid(r.out[0]));
}

TEST(Detunnel, PopsOnlyTheOuterTagOfQinQ) {
  auto nf = MakeNf("detunnel", "{}");
  std::vector<uint8_t> plain = TcpPacket("198.18.0.1", "198.18.1.2", 1, 2, "x").bytes();
  std::vector<uint8_t> outer = {0x81, 0x00, 0x00, 0x05}, inner = {0x81, 0x00, 0x00, 0x06};
  std::vector<uint8_t> both = outer;
  both.insert(both.end(), inner.begin(), inner.end());
  RunResult r = RunBatch(nf.get(), {TestPacket(WithTags(plain, both))});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], WithTags(plain, inner));
}

TEST(Detunnel, UntaggedFramesPassUnchanged) {
  auto nf = MakeNf("detunnel", "{}");
  std::vector<uint8_t> ip = UdpPacket("198.18.0.1", "198.18.1.2", 1, 2, "x").bytes();
  std::vector<uint8_t> arp(14, 0xaa);
  arp[12] = 0x08;
  arp[13] = 0x06;
  for (const auto& in : {ip, arp}) {
    RunResult r = RunTight(nf.get(), in, 0);
    ASSERT_EQ(r.out.size(), 1u);
    EXPECT_EQ(r.out[0], in);
  }
}

TEST(Detunnel, PopsTagOfMinimalTaggedFrame) {
  auto nf = MakeNf("detunnel", "{}");
  std::vector<uint8_t> in(18, 0x11);
  in[12] = 0x81;
  in[13] = 0x00;
  in[16] = 0x88;
  in[17] = 0xb5;
  std::vector<uint8_t> want(in.begin(), in.begin() + 12);
  want.push_back(0x88);
  want.push_back(0xb5);
  RunResult r = RunTight(nf.get(), in, 0);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], want);
}

TEST(Detunnel, DropsTruncatedTagsAndRunts) {
  auto nf = MakeNf("detunnel", "{}");
  std::vector<uint8_t> tag_only(14, 0);
  tag_only[12] = 0x81;
  std::vector<uint8_t> truncated = tag_only;
  truncated.resize(17, 0);
  for (const auto& in : {tag_only, truncated, std::vector<uint8_t>(13, 0),
                         std::vector<uint8_t>()}) {
    RunResult r = RunTight(nf.get(), in, 0);
    EXPECT_EQ(r.out.size(), 0u) << in.size();
    EXPECT_EQ(r.dropped, 1) << in.size();
  }
}

TEST(Detunnel, RejectsConfigFields) {
  EXPECT_THROW_MSG(MakeNf("detunnel", R"({"vlan":1})"), "detunnel.vlan: unknown field");
  EXPECT_THROW_MSG(MakeNf("detunnel", "[]"), "detunnel: expected an object, got array");
}

}  // namespace
}  // namespace keel
