/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/packet.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace keel {
namespace {

/* Ethernet + IPv4 (20 B) + UDP (8 B) + |payload| bytes, with checksums. */
std::vector<uint8_t> Udp(size_t payload, uint8_t proto = kProtoUdp) {
  std::vector<uint8_t> b(14 + 20 + 8 + payload, 0);
  b[12] = 0x08;
  uint8_t* ip = b.data() + 14;
  ip[0] = 0x45;
  uint16_t total = htons(static_cast<uint16_t>(28 + payload));
  std::memcpy(ip + 2, &total, 2);
  ip[8] = 64;
  ip[9] = proto;
  uint32_t src = htonl(0xc6120001), dst = htonl(0xc6130002);
  std::memcpy(ip + 12, &src, 4);
  std::memcpy(ip + 16, &dst, 4);
  uint8_t* udp = ip + 20;
  uint16_t sp = htons(1234), dp = htons(80), ul = htons(static_cast<uint16_t>(8 + payload));
  std::memcpy(udp, &sp, 2);
  std::memcpy(udp + 2, &dp, 2);
  std::memcpy(udp + 4, &ul, 2);
  for (size_t i = 0; i < payload; i++) udp[8 + i] = static_cast<uint8_t>(i);
  return b;
}

Packet View(std::vector<uint8_t>& b, uint16_t headroom = 0) {
  Packet p;
  p.Reset(b.data(), headroom, static_cast<uint16_t>(b.size() - headroom),
          static_cast<uint16_t>(b.size()));
  return p;
}

TEST(Packet, ParsesUdpAndBoundsPayloadByIpTotalLength) {
  auto b = Udp(10);
  b.resize(b.size() + 6, 0xee); /* Ethernet trailer after the IP packet */
  Packet p = View(b);
  ASSERT_NE(p.ipv4(), nullptr);
  ASSERT_NE(p.udp(), nullptr);
  EXPECT_EQ(p.tcp(), nullptr);
  EXPECT_EQ(p.l3_offset(), 14);
  EXPECT_EQ(p.l4_offset(), 34);
  uint16_t len;
  uint8_t* pl = p.payload(&len);
  EXPECT_EQ(len, 10);
  EXPECT_EQ(pl, b.data() + 42);
  FlowKey k;
  ASSERT_TRUE(p.GetFlowKey(&k));
  EXPECT_EQ(k.src_ip, 0xc6120001u);
  EXPECT_EQ(k.dst_port, 80);
  EXPECT_EQ(k.proto, kProtoUdp);
  EXPECT_EQ(k.Reverse().Reverse(), k);
}

TEST(Packet, ParsesOneVlanTag) {
  auto b = Udp(4);
  uint8_t tag[4] = {0x81, 0x00, 0x00, 0x07};
  b.insert(b.begin() + 12, tag, tag + 4);
  Packet p = View(b);
  ASSERT_NE(p.vlan(), nullptr);
  EXPECT_EQ(ntohs(p.vlan()->tci), 7);
  EXPECT_EQ(p.l3_offset(), 18);
  EXPECT_NE(p.udp(), nullptr);
}

TEST(Packet, ClassifiesMalformedPackets) {
  std::vector<uint8_t> runt(10, 0);
  EXPECT_EQ(View(runt).malformed(), Malformed::kTruncatedEth);
  EXPECT_EQ(View(runt).eth(), nullptr);

  std::vector<uint8_t> vlan(16, 0);
  vlan[12] = 0x81;
  EXPECT_EQ(View(vlan).malformed(), Malformed::kTruncatedVlan);

  auto cut = Udp(0);
  cut.resize(14 + 12);
  EXPECT_EQ(View(cut).malformed(), Malformed::kBadIpv4);

  auto long_total = Udp(4);
  long_total[14 + 3] += 10; /* total length beyond the frame */
  EXPECT_EQ(View(long_total).malformed(), Malformed::kBadIpv4);
  EXPECT_EQ(View(long_total).ipv4(), nullptr);

  auto bad_ihl = Udp(4);
  bad_ihl[14] = 0x44;
  EXPECT_EQ(View(bad_ihl).malformed(), Malformed::kBadIpv4);

  auto short_l4 = Udp(0);
  short_l4.resize(14 + 20 + 4);
  uint16_t total = htons(24);
  std::memcpy(short_l4.data() + 16, &total, 2);
  EXPECT_EQ(View(short_l4).malformed(), Malformed::kTruncatedL4);
  EXPECT_EQ(View(short_l4).udp(), nullptr);

  auto arp = Udp(0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  Packet p = View(arp);
  EXPECT_EQ(p.malformed(), Malformed::kNone);
  EXPECT_EQ(p.ipv4(), nullptr);
  FlowKey k;
  EXPECT_FALSE(p.GetFlowKey(&k));
}

TEST(Packet, NonFirstFragmentHasNoL4Header) {
  auto b = Udp(16);
  b[14 + 7] = 0x10; /* fragment offset 16 x 8 bytes */
  Packet p = View(b);
  EXPECT_NE(p.ipv4(), nullptr);
  EXPECT_EQ(p.udp(), nullptr);
  uint16_t len;
  EXPECT_EQ(p.payload(&len), nullptr);
  EXPECT_EQ(len, 0);
}

TEST(Packet, PrependAdjAppendTrimRespectRoom) {
  std::vector<uint8_t> b(64, 0);
  Packet p;
  p.Reset(b.data(), 8, 40, 64);
  EXPECT_EQ(p.tailroom(), 16);
  EXPECT_FALSE(p.Prepend(9));
  EXPECT_TRUE(p.Prepend(8));
  EXPECT_EQ(p.data(), b.data());
  EXPECT_EQ(p.len(), 48);
  EXPECT_FALSE(p.Append(17));
  EXPECT_TRUE(p.Append(16));
  EXPECT_EQ(p.len(), 64);
  EXPECT_FALSE(p.Trim(65));
  EXPECT_TRUE(p.Trim(4));
  EXPECT_FALSE(p.Adj(61));
  EXPECT_TRUE(p.Adj(60));
  EXPECT_EQ(p.len(), 0);
  EXPECT_EQ(p.eth(), nullptr);
}

TEST(Checksum, FullAndIncrementalAgree) {
  auto b = Udp(33);
  Packet p = View(b);
  Ipv4Hdr* ip = p.ipv4();
  Ipv4UpdateChecksum(ip);
  EXPECT_EQ(Checksum(ip, 20), 0);
  L4UpdateChecksum(&p);
  uint16_t full_udp = p.udp()->checksum;
  EXPECT_NE(full_udp, 0);

  uint32_t old_src = ip->src, new_src = htonl(0xc6120063);
  uint16_t ip_csum = ip->checksum, udp_csum = p.udp()->checksum;
  ChecksumReplace32(&ip_csum, old_src, new_src);
  ChecksumReplace32(&udp_csum, old_src, new_src);
  uint16_t old_port = p.udp()->src_port, new_port = htons(40000);
  ChecksumReplace16(&udp_csum, old_port, new_port);
  ip->src = new_src;
  p.udp()->src_port = new_port;
  ip->checksum = ip_csum;
  p.udp()->checksum = udp_csum;

  EXPECT_EQ(Checksum(ip, 20), 0);
  L4UpdateChecksum(&p);
  EXPECT_EQ(p.udp()->checksum, udp_csum);
}

}  // namespace
}  // namespace keel
