/* SPDX-License-Identifier: Apache-2.0 */
#include "testing/nf_test.h"

#include <arpa/inet.h>

#include <cstring>

namespace keel {

uint32_t Ip(const std::string& dotted) {
  in_addr a;
  if (inet_pton(AF_INET, dotted.c_str(), &a) != 1) ADD_FAILURE() << "bad address " << dotted;
  return ntohl(a.s_addr);
}

TestPacket BuildPacket(const L4Spec& s) {
  std::vector<uint8_t> b;
  auto put8 = [&](uint8_t v) { b.push_back(v); };
  auto put16 = [&](uint16_t v) { put8(v >> 8); put8(v & 0xff); };
  auto put32 = [&](uint32_t v) { put16(v >> 16); put16(v & 0xffff); };
  const uint8_t dst[6] = {2, 0, 0, 0, 0, 2}, src[6] = {2, 0, 0, 0, 0, 1};
  b.insert(b.end(), dst, dst + 6);
  b.insert(b.end(), src, src + 6);
  if (s.vlan >= 0) {
    put16(kEtherTypeVlan);
    put16(static_cast<uint16_t>(s.vlan));
  }
  put16(kEtherTypeIpv4);
  size_t l3 = b.size();
  size_t l4_hdr = s.proto == kProtoTcp ? 20 : s.proto == kProtoUdp ? 8 : 8;
  uint16_t total = static_cast<uint16_t>(20 + l4_hdr + s.payload.size());
  put8(0x45); put8(0); put16(total); put16(1); put16(0x4000); put8(s.ttl); put8(s.proto);
  put16(0); put32(Ip(s.src_ip)); put32(Ip(s.dst_ip));
  if (s.proto == kProtoTcp) {
    put16(s.src_port); put16(s.dst_port); put32(1); put32(0);
    put8(0x50); put8(s.tcp_flags); put16(65535); put16(0); put16(0);
  } else if (s.proto == kProtoUdp) {
    put16(s.src_port); put16(s.dst_port); put16(static_cast<uint16_t>(8 + s.payload.size())); put16(0);
  } else {
    put8(8); put8(0); put16(0); put32(0); /* ICMP echo request */
  }
  b.insert(b.end(), s.payload.begin(), s.payload.end());
  TestPacket t(std::move(b));
  Packet p = View(&t.bytes());
  Ipv4UpdateChecksum(reinterpret_cast<Ipv4Hdr*>(t.bytes().data() + l3));
  if (s.proto == kProtoTcp || s.proto == kProtoUdp) {
    L4UpdateChecksum(&p);
  } else {
    auto* icmp = t.bytes().data() + l3 + 20;
    uint16_t c = Checksum(icmp, 8 + s.payload.size());
    std::memcpy(icmp + 2, &c, 2);
  }
  return t;
}

TestPacket UdpPacket(const std::string& src, const std::string& dst, uint16_t sport,
                     uint16_t dport, const std::string& payload) {
  L4Spec s;
  s.src_ip = src; s.dst_ip = dst; s.src_port = sport; s.dst_port = dport; s.payload = payload;
  return BuildPacket(s);
}

TestPacket TcpPacket(const std::string& src, const std::string& dst, uint16_t sport,
                     uint16_t dport, const std::string& payload) {
  L4Spec s;
  s.src_ip = src; s.dst_ip = dst; s.proto = kProtoTcp; s.src_port = sport; s.dst_port = dport;
  s.payload = payload;
  return BuildPacket(s);
}

Packet View(std::vector<uint8_t>* bytes) {
  Packet p;
  p.Reset(bytes->data(), 0, static_cast<uint16_t>(bytes->size()),
          static_cast<uint16_t>(bytes->size()));
  return p;
}

RunResult RunChain(const std::vector<NF*>& nfs, const std::vector<TestPacket>& pkts) {
  EXPECT_LE(pkts.size(), static_cast<size_t>(kMaxBurst));
  std::vector<std::vector<uint8_t>> slots(pkts.size(), std::vector<uint8_t>(kTestSlot));
  std::vector<Packet> views(pkts.size());
  PacketBatch batch;
  for (size_t i = 0; i < pkts.size(); i++) {
    const auto& b = pkts[i].bytes();
    std::memcpy(slots[i].data() + kTestHeadroom, b.data(), b.size());
    views[i].Reset(slots[i].data(), kTestHeadroom, static_cast<uint16_t>(b.size()), kTestSlot);
    batch.Add(&views[i]);
  }
  RunResult r;
  for (NF* nf : nfs) {
    nf->ProcessBatch(&batch);
    r.dropped += batch.RemoveDropped();
  }
  for (Packet* p : batch) r.out.emplace_back(p->data(), p->data() + p->len());
  return r;
}

RunResult RunBatch(NF* nf, const std::vector<TestPacket>& pkts) { return RunChain({nf}, pkts); }

MoveFrame MoveFlow(const MoveChain& from, const MoveChain& to, const FlowKey& flow, std::string* err) {
  MoveFrame f;
  f.flow = f.cur = flow;
  uint8_t buf[kMoveFrameMax];
  size_t len = EncodeMoveFrame(f, buf, sizeof buf);
  auto through = [&](const MoveChain& chain) {
    for (size_t i = 0; i < chain.nfs.size(); i++)
      EXPECT_TRUE(MoveAt(chain.nfs[i], MovePosition{static_cast<uint8_t>(i), NfId(chain.names[i])}, buf, &len, err))
          << *err;
    EXPECT_TRUE(DecodeMoveFrame(buf, len, &f, err)) << *err;
  };
  through(from);
  if (f.status != MoveStatus::kOk) return f;
  f.kind = MoveKind::kImport; /* the ingress turns it around */
  len = EncodeMoveFrame(f, buf, sizeof buf);
  through(to);
  return f;
}

FlowKey TestFlow(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport, uint8_t proto) {
  FlowKey k;
  k.src_ip = Ip(src);
  k.dst_ip = Ip(dst);
  k.src_port = sport;
  k.dst_port = dport;
  k.proto = proto;
  return k;
}

bool ChecksumsValid(const std::vector<uint8_t>& bytes) {
  std::vector<uint8_t> copy = bytes;
  Packet p = View(&copy);
  Ipv4Hdr* ip = p.ipv4();
  if (!ip) return false;
  if (Checksum(ip, (ip->version_ihl & 0x0f) * 4) != 0) return false;
  if (!p.l4_offset()) return true;
  uint8_t* l4 = p.data() + p.l4_offset();
  uint8_t* csum = l4 + (ip->proto == kProtoTcp ? offsetof(TcpHdr, checksum) : offsetof(UdpHdr, checksum));
  uint16_t have = Load16(csum);
  L4UpdateChecksum(&p);
  return Load16(csum) == have;
}

}  // namespace keel
