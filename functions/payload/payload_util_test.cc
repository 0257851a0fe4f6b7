/* SPDX-License-Identifier: Apache-2.0 */
#include "payload/payload_util.h"

#include <gtest/gtest.h>

#include <cstring>

#include "payload/payload_testing.h"

namespace keel {
namespace {

constexpr size_t kL3 = sizeof(EthHdr);
constexpr size_t kUdpPayload = kL3 + sizeof(Ipv4Hdr) + sizeof(UdpHdr);
constexpr size_t kTcpPayload = kL3 + sizeof(Ipv4Hdr) + sizeof(TcpHdr);

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

/* A view of |bytes| with |room| bytes of tailroom behind it. */
struct Roomy {
  Roomy(const std::vector<uint8_t>& bytes, uint16_t room) : buf(bytes) {
    buf.resize(bytes.size() + room);
    pkt.Reset(buf.data(), 0, static_cast<uint16_t>(bytes.size()),
              static_cast<uint16_t>(buf.size()));
  }
  std::vector<uint8_t> Out() const { return {pkt.data(), pkt.data() + pkt.len()}; }
  std::vector<uint8_t> buf;
  Packet pkt;
};

void SetFragOff(std::vector<uint8_t>* b, uint16_t frag_off) {
  auto* ip = reinterpret_cast<Ipv4Hdr*>(b->data() + kL3);
  ip->frag_off = htons(frag_off);
  Ipv4UpdateChecksum(ip);
}

TEST(PayloadUtil, GetFindsTcpAndUdpPayloads) {
  std::vector<uint8_t> udp = L4Packet(kProtoUdp, Bytes("hello")).bytes();
  std::vector<uint8_t> tcp = L4Packet(kProtoTcp, Bytes("hi")).bytes();
  std::vector<uint8_t> empty = L4Packet(kProtoUdp, {}).bytes();
  Packet pu = View(&udp), pt = View(&tcp), pe = View(&empty);
  uint16_t len = 99;
  EXPECT_EQ(PayloadGet(&pu, &len), udp.data() + kUdpPayload);
  EXPECT_EQ(len, 5);
  EXPECT_EQ(PayloadGet(&pt, &len), tcp.data() + kTcpPayload);
  EXPECT_EQ(len, 2);
  EXPECT_EQ(PayloadGet(&pe, &len), empty.data() + kUdpPayload);
  EXPECT_EQ(len, 0);
}

TEST(PayloadUtil, GetSkipsNonIpv4OtherProtocolsAndFragments) {
  L4Spec icmp_spec;
  icmp_spec.src_ip = "10.0.0.1";
  icmp_spec.dst_ip = "10.0.0.2";
  icmp_spec.proto = kProtoIcmp;
  icmp_spec.payload = "ping";
  std::vector<uint8_t> icmp = BuildPacket(icmp_spec).bytes();
  std::vector<uint8_t> arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  std::vector<uint8_t> first_frag = L4Packet(kProtoUdp, Bytes("hello")).bytes();
  SetFragOff(&first_frag, 0x2000);
  std::vector<uint8_t> truncated = L4Packet(kProtoUdp, Bytes("hello")).bytes();
  truncated.resize(kUdpPayload - 2);
  for (auto* b : {&icmp, &arp, &first_frag, &truncated}) {
    Packet p = View(b);
    uint16_t len = 99;
    EXPECT_EQ(PayloadGet(&p, &len), nullptr);
    EXPECT_EQ(len, 0);
  }
}

TEST(PayloadUtil, ResizeGrowsAndFixesLengthsAndChecksums) {
  for (uint8_t proto : {kProtoUdp, kProtoTcp}) {
    Roomy r(L4Packet(proto, Bytes("abc")).bytes(), 100);
    uint8_t* payload = PayloadResize(&r.pkt, 10);
    ASSERT_NE(payload, nullptr);
    std::memcpy(payload + 3, "defghij", 7);
    PayloadUpdateChecksum(&r.pkt);
    EXPECT_EQ(r.Out(), L4Packet(proto, Bytes("abcdefghij")).bytes());
  }
}

TEST(PayloadUtil, ResizeShrinks) {
  for (uint8_t proto : {kProtoUdp, kProtoTcp}) {
    Roomy r(L4Packet(proto, Bytes("abcdefghij")).bytes(), 0);
    ASSERT_NE(PayloadResize(&r.pkt, 4), nullptr);
    PayloadUpdateChecksum(&r.pkt);
    EXPECT_EQ(r.Out(), L4Packet(proto, Bytes("abcd")).bytes());
  }
}

TEST(PayloadUtil, ResizeCutsEthernetTrailer) {
  std::vector<uint8_t> padded = L4Packet(kProtoUdp, Bytes("abc")).bytes();
  padded.resize(60, 0);
  Roomy r(padded, 0);
  uint8_t* payload = PayloadResize(&r.pkt, 4);
  ASSERT_NE(payload, nullptr);
  payload[3] = 'd';
  PayloadUpdateChecksum(&r.pkt);
  EXPECT_EQ(r.Out(), L4Packet(kProtoUdp, Bytes("abcd")).bytes());
}

TEST(PayloadUtil, ResizeRefusesWhatDoesNotFit) {
  std::vector<uint8_t> in = L4Packet(kProtoUdp, Bytes("abc")).bytes();
  Roomy r(in, 5);
  EXPECT_TRUE(PayloadFits(&r.pkt, 8));
  EXPECT_FALSE(PayloadFits(&r.pkt, 9));
  EXPECT_EQ(PayloadResize(&r.pkt, 9), nullptr);
  EXPECT_EQ(r.Out(), in);
  EXPECT_NE(PayloadResize(&r.pkt, 8), nullptr);
  EXPECT_EQ(r.pkt.len(), in.size() + 5);
}

TEST(PayloadUtil, ResizeRefusesIpv4PacketsOver65535Bytes) {
  Roomy r(L4Packet(kProtoUdp, Bytes("abc")).bytes(), 0);
  EXPECT_FALSE(PayloadFits(&r.pkt, 65535 - 28 + 1));
}

TEST(PayloadUtil, UpdateChecksumKeepsUdpWithoutChecksum) {
  std::vector<uint8_t> b = L4Packet(kProtoUdp, Bytes("abc")).bytes();
  b[kUdpPayload - 2] = b[kUdpPayload - 1] = 0;
  b[kUdpPayload] = 'x';
  Packet p = View(&b);
  PayloadUpdateChecksum(&p);
  EXPECT_EQ(b[kUdpPayload - 2], 0);
  EXPECT_EQ(b[kUdpPayload - 1], 0);
}

}  // namespace
}  // namespace keel
