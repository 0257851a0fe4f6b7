/* SPDX-License-Identifier: Apache-2.0 */
#include "parser.h"

#include <gtest/gtest.h>

#include "frames.h"

namespace keel::ingress {
namespace {

using testing::Ipv4Frame;
using testing::UdpFrame;

ParseResult Parse(const std::vector<uint8_t>& f, FlowKey* key = nullptr) {
  FlowKey k;
  return ParseFrame(f.data(), f.size(), key ? key : &k);
}

TEST(Parser, UdpFiveTuple) {
  FlowKey k;
  ASSERT_EQ(Parse(UdpFrame(1234, 5001), &k), ParseResult::kOk);
  EXPECT_EQ(Ipv4String(k.src_ip), "198.18.0.1");
  EXPECT_EQ(Ipv4String(k.dst_ip), "198.19.0.1");
  EXPECT_EQ(k.src_port, 1234);
  EXPECT_EQ(k.dst_port, 5001);
  EXPECT_EQ(k.proto, 17);
}

TEST(Parser, TcpFiveTuple) {
  FlowKey k;
  ASSERT_EQ(Parse(Ipv4Frame(6, 40000, 80), &k), ParseResult::kOk);
  EXPECT_EQ(k.src_port, 40000);
  EXPECT_EQ(k.dst_port, 80);
  EXPECT_EQ(k.proto, 6);
}

TEST(Parser, IcmpHasNoPorts) {
  FlowKey k;
  ASSERT_EQ(Parse(Ipv4Frame(1, 0, 0, 8), &k), ParseResult::kOk);
  EXPECT_EQ(k.proto, 1);
  EXPECT_EQ(k.src_port, 0);
}

TEST(Parser, LooksThroughVlanTags) {
  auto f = UdpFrame(7, 9);
  const uint8_t tag[] = {0x81, 0x00, 0x00, 0x0a};
  f.insert(f.begin() + 12, tag, tag + 4);
  FlowKey k;
  ASSERT_EQ(Parse(f, &k), ParseResult::kOk);
  EXPECT_EQ(k.src_port, 7);
}

TEST(Parser, EveryTruncationIsTruncated) {
  auto tcp = Ipv4Frame(6, 1, 2, 0);
  /* Every prefix shorter than Ethernet + IPv4 + TCP headers: not one crash, always truncated. */
  for (size_t n = 0; n < tcp.size(); n++) {
    std::vector<uint8_t> cut(tcp.begin(), tcp.begin() + static_cast<long>(n));
    EXPECT_EQ(Parse(cut), ParseResult::kTruncated) << n << " bytes";
  }
  auto udp = Ipv4Frame(17, 1, 2, 0);
  udp.resize(14 + 20 + 7);
  EXPECT_EQ(Parse(udp), ParseResult::kTruncated);
}

TEST(Parser, IhlBelowFiveOrPastTheFrame) {
  auto f = UdpFrame(1);
  f[14] = 0x44;
  EXPECT_EQ(Parse(f), ParseResult::kBadIhl);
  f[14] = 0x4f; /* 60 bytes of header in a frame with 24 bytes after 20 */
  EXPECT_EQ(Parse(f), ParseResult::kBadIhl);
}

TEST(Parser, TotalLengthMustCoverTheHeadersAndFitTheFrame) {
  auto f = UdpFrame(1);
  f[16] = f[17] = 0; /* total length 0 */
  EXPECT_EQ(Parse(f), ParseResult::kBadIhl);
  f[17] = 24; /* the IPv4 header and half a UDP header */
  EXPECT_EQ(Parse(f), ParseResult::kTruncated);
  f[16] = 0x05; /* 1280 bytes in a 58-byte frame */
  EXPECT_EQ(Parse(f), ParseResult::kTruncated);
  auto padded = UdpFrame(1);
  padded.resize(padded.size() + 6, 0); /* Ethernet padding after the datagram */
  EXPECT_EQ(Parse(padded), ParseResult::kOk);
}

TEST(Parser, IpOptionsMoveThePorts) {
  auto f = Ipv4Frame(17, 1111, 2222);
  f[14] = 0x46;
  const uint8_t nop[] = {1, 1, 1, 0};
  f.insert(f.begin() + 34, nop, nop + 4);
  FlowKey k;
  ASSERT_EQ(Parse(f, &k), ParseResult::kOk);
  EXPECT_EQ(k.src_port, 1111);
  EXPECT_EQ(k.dst_port, 2222);
}

TEST(Parser, FragmentsAreDropped) {
  auto first = UdpFrame(1);
  first[20] = 0x20; /* more fragments */
  EXPECT_EQ(Parse(first), ParseResult::kFragment);
  auto later = UdpFrame(1);
  later[21] = 0x10; /* offset 16 */
  EXPECT_EQ(Parse(later), ParseResult::kFragment);
  auto df = UdpFrame(1);
  df[20] = 0x40; /* don't fragment: a whole datagram */
  EXPECT_EQ(Parse(df), ParseResult::kOk);
}

TEST(Parser, NonIpv4) {
  auto arp = UdpFrame(1);
  arp[12] = 0x08, arp[13] = 0x06;
  EXPECT_EQ(Parse(arp), ParseResult::kNotIpv4);
  auto v6 = UdpFrame(1);
  v6[12] = 0x86, v6[13] = 0xdd;
  EXPECT_EQ(Parse(v6), ParseResult::kNotIpv4);
  auto version6 = UdpFrame(1);
  version6[14] = 0x65;
  EXPECT_EQ(Parse(version6), ParseResult::kNotIpv4);
}

TEST(Parser, UnknownEthertype) {
  auto f = UdpFrame(1);
  f[12] = 0x88, f[13] = 0xb5;
  EXPECT_EQ(Parse(f), ParseResult::kUnknownEthertype);
}

}  // namespace
}  // namespace keel::ingress
