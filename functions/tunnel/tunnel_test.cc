/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>

#include "payload/payload_testing.h"

namespace keel {
namespace {

/* |frame| with the 4 tag bytes inserted after its MAC addresses. */
std::vector<uint8_t> Tagged(std::vector<uint8_t> frame, std::vector<uint8_t> tag) {
  frame.insert(frame.begin() + 12, tag.begin(), tag.end());
  return frame;
}

TEST(Tunnel, PushesTagAfterMacAddresses) {
  TestPacket in = UdpPacket("198.18.0.1", "198.18.1.2", 1000, 2000, "hello");
  for (auto [vlan, tci] : {std::pair{0, 0x0000}, {100, 0x0064}, {4095, 0x0fff}}) {
    auto nf = MakeNf("tunnel", R"({"vlan":)" + std::to_string(vlan) + "}");
    RunResult r = RunBatch(nf.get(), {in});
    ASSERT_EQ(r.out.size(), 1u);
    EXPECT_EQ(r.out[0], Tagged(in.bytes(), {0x81, 0x00, uint8_t(tci >> 8), uint8_t(tci)}));
  }
}

TEST(Tunnel, OutputParsesAsTaggedIpv4) {
  auto nf = MakeNf("tunnel", R"({"vlan":300})");
  RunResult r = RunBatch(nf.get(), {TcpPacket("198.18.0.1", "198.18.1.2", 1, 2, "x")});
  ASSERT_EQ(r.out.size(), 1u);
  Packet p = View(&r.out[0]);
  ASSERT_NE(p.vlan(), nullptr);
  EXPECT_EQ(ntohs(p.vlan()->tci), 300);
  ASSERT_NE(p.tcp(), nullptr);
  EXPECT_TRUE(ChecksumsValid(r.out[0]));
}

TEST(Tunnel, AddsOuterTagToTaggedFrame) {
  L4Spec s;
  s.src_ip = "198.18.0.1";
  s.dst_ip = "198.18.1.2";
  s.src_port = 1;
  s.dst_port = 2;
  s.vlan = 7;
  TestPacket in = BuildPacket(s);
  auto nf = MakeNf("tunnel", R"({"vlan":9})");
  RunResult r = RunBatch(nf.get(), {in});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], Tagged(in.bytes(), {0x81, 0x00, 0x00, 0x09}));
}

TEST(Tunnel, TagsAnyFrameOfAtLeast14Bytes) {
  std::vector<uint8_t> arp(14, 0xaa);
  arp[12] = 0x08;
  arp[13] = 0x06;
  auto nf = MakeNf("tunnel", R"({"vlan":1})");
  RunResult r = RunTight(nf.get(), arp, 0);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], Tagged(arp, {0x81, 0x00, 0x00, 0x01}));
}

TEST(Tunnel, DropsRuntFrames) {
  auto nf = MakeNf("tunnel", R"({"vlan":1})");
  for (size_t n : {0, 1, 12, 13}) {
    RunResult r = RunTight(nf.get(), std::vector<uint8_t>(n, 0xab), 0);
    EXPECT_EQ(r.out.size(), 0u) << n;
    EXPECT_EQ(r.dropped, 1) << n;
  }
}

TEST(Tunnel, DropsFramesWithoutHeadroom) {
  auto nf = MakeNf("tunnel", R"({"vlan":1})");
  std::vector<uint8_t> in = UdpPacket("198.18.0.1", "198.18.1.2", 1, 2, "x").bytes();
  EXPECT_EQ(RunTight(nf.get(), in, 0, 2).dropped, 1);
  RunResult r = RunTight(nf.get(), in, 0, 4);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], Tagged(in, {0x81, 0x00, 0x00, 0x01}));
}

TEST(Tunnel, DetunnelRestoresTheFrame) {
  auto push = MakeNf("tunnel", R"({"vlan":42})");
  auto pop = MakeNf("detunnel", "{}");
  TestPacket in = TcpPacket("198.18.0.1", "198.18.1.2", 1, 2, "payload");
  RunResult r = RunChain({push.get(), pop.get()}, {in});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], in.bytes());
}

TEST(Tunnel, RejectsBadConfig) {
  EXPECT_THROW_MSG(MakeNf("tunnel", R"({"vlan":4096})"),
                   "tunnel.vlan: 4096 is out of range [0, 4095]");
  EXPECT_THROW_MSG(MakeNf("tunnel", R"({"vlan":-1})"), "tunnel.vlan: -1 is out of range [0, 4095]");
  EXPECT_THROW_MSG(MakeNf("tunnel", R"({"vlan":"7"})"),
                   "tunnel.vlan: expected an integer, got string");
  EXPECT_THROW_MSG(MakeNf("tunnel", R"({"vlan":1.5})"),
                   "tunnel.vlan: expected an integer, got 1.5");
  EXPECT_THROW_MSG(MakeNf("tunnel", "{}"), "tunnel.vlan: missing");
  EXPECT_THROW_MSG(MakeNf("tunnel", R"({"vlan":1,"pcp":3})"), "tunnel.pcp: unknown field");
}

}  // namespace
}  // namespace keel
