/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/packet.h"

#include <cstring>

namespace keel {

FlowKey FlowKey::Reverse() const {
  FlowKey r;
  r.src_ip = dst_ip;
  r.dst_ip = src_ip;
  r.src_port = dst_port;
  r.dst_port = src_port;
  r.proto = proto;
  return r;
}

bool FlowKey::operator==(const FlowKey& o) const {
  return src_ip == o.src_ip && dst_ip == o.dst_ip && src_port == o.src_port &&
         dst_port == o.dst_port && proto == o.proto;
}

size_t FlowKeyHash::operator()(const FlowKey& k) const {
  uint64_t a = (uint64_t{k.src_ip} << 32) | k.dst_ip;
  uint64_t b = (uint64_t{k.src_port} << 24) | (uint64_t{k.dst_port} << 8) | k.proto;
  /* splitmix64's finalizer: every input bit reaches the low bits, so
   * "hash % n" spreads flows that differ in one field only. */
  uint64_t h = a ^ (b * 0x9E3779B97F4A7C15ull);
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  return static_cast<size_t>(h ^ (h >> 31));
}

bool Packet::Prepend(uint16_t n) {
  if (n > off_) return false;
  off_ -= n;
  len_ += n;
  parsed_ = false;
  return true;
}

bool Packet::Adj(uint16_t n) {
  if (n > len_) return false;
  off_ += n;
  len_ -= n;
  parsed_ = false;
  return true;
}

bool Packet::Append(uint16_t n) {
  if (n > tailroom()) return false;
  len_ += n;
  parsed_ = false;
  return true;
}

bool Packet::Trim(uint16_t n) {
  if (n > len_) return false;
  len_ -= n;
  parsed_ = false;
  return true;
}

/* Parses Ethernet, one optional 802.1Q tag, IPv4 and TCP/UDP, checking every
 * length against the bytes present. */
void Packet::Parse() {
  parsed_ = true;
  malformed_ = Malformed::kNone;
  vlan_off_ = l3_off_ = l4_off_ = l3_end_ = 0;
  l4_proto_ = 0;
  const uint8_t* d = data();
  if (len_ < sizeof(EthHdr)) {
    malformed_ = Malformed::kTruncatedEth;
    return;
  }
  uint16_t type = ntohs(reinterpret_cast<const EthHdr*>(d)->ether_type);
  uint16_t off = sizeof(EthHdr);
  if (type == kEtherTypeVlan) {
    if (len_ < off + sizeof(VlanHdr)) {
      malformed_ = Malformed::kTruncatedVlan;
      return;
    }
    vlan_off_ = off;
    type = ntohs(reinterpret_cast<const VlanHdr*>(d + off)->ether_type);
    off += sizeof(VlanHdr);
  }
  if (type != kEtherTypeIpv4) return;
  if (len_ < off + sizeof(Ipv4Hdr)) {
    malformed_ = Malformed::kBadIpv4;
    return;
  }
  const auto* ip = reinterpret_cast<const Ipv4Hdr*>(d + off);
  uint16_t ihl = (ip->version_ihl & 0x0f) * 4;
  uint16_t total = ntohs(ip->total_length);
  if ((ip->version_ihl >> 4) != 4 || ihl < sizeof(Ipv4Hdr) || total < ihl ||
      off + total > len_) {
    malformed_ = Malformed::kBadIpv4;
    return;
  }
  l3_off_ = off;
  l3_end_ = off + total;
  /* Non-first fragments carry no L4 header. */
  if ((ntohs(ip->frag_off) & 0x1fff) != 0) return;
  uint16_t l4 = off + ihl;
  if (ip->proto == kProtoTcp) {
    const auto* tcp = reinterpret_cast<const TcpHdr*>(d + l4);
    if (l4 + sizeof(TcpHdr) > l3_end_ || (tcp->data_off >> 4) * 4 < 20 ||
        l4 + (tcp->data_off >> 4) * 4 > l3_end_) {
      malformed_ = Malformed::kTruncatedL4;
      return;
    }
  } else if (ip->proto == kProtoUdp) {
    if (l4 + sizeof(UdpHdr) > l3_end_) {
      malformed_ = Malformed::kTruncatedL4;
      return;
    }
  } else {
    return;
  }
  l4_off_ = l4;
  l4_proto_ = ip->proto;
}

Malformed Packet::malformed() {
  if (!parsed_) Parse();
  return malformed_;
}

EthHdr* Packet::eth() {
  if (!parsed_) Parse();
  return malformed_ == Malformed::kTruncatedEth ? nullptr : reinterpret_cast<EthHdr*>(data());
}

VlanHdr* Packet::vlan() {
  if (!parsed_) Parse();
  return vlan_off_ ? reinterpret_cast<VlanHdr*>(data() + vlan_off_) : nullptr;
}

Ipv4Hdr* Packet::ipv4() {
  if (!parsed_) Parse();
  return l3_off_ ? reinterpret_cast<Ipv4Hdr*>(data() + l3_off_) : nullptr;
}

TcpHdr* Packet::tcp() {
  if (!parsed_) Parse();
  return l4_proto_ == kProtoTcp ? reinterpret_cast<TcpHdr*>(data() + l4_off_) : nullptr;
}

UdpHdr* Packet::udp() {
  if (!parsed_) Parse();
  return l4_proto_ == kProtoUdp ? reinterpret_cast<UdpHdr*>(data() + l4_off_) : nullptr;
}

uint16_t Packet::l3_offset() {
  if (!parsed_) Parse();
  return l3_off_;
}

uint16_t Packet::l4_offset() {
  if (!parsed_) Parse();
  return l4_off_;
}

uint8_t* Packet::payload(uint16_t* len) {
  if (!parsed_) Parse();
  *len = 0;
  if (!l4_off_) return nullptr;
  uint16_t start = l4_off_;
  if (l4_proto_ == kProtoTcp)
    start += (reinterpret_cast<const TcpHdr*>(data() + l4_off_)->data_off >> 4) * 4;
  else
    start += sizeof(UdpHdr);
  *len = l3_end_ - start;
  return data() + start;
}

bool Packet::GetFlowKey(FlowKey* key) {
  const Ipv4Hdr* ip = ipv4();
  if (!ip) return false;
  *key = FlowKey{};
  key->src_ip = ntohl(ip->src);
  key->dst_ip = ntohl(ip->dst);
  key->proto = ip->proto;
  if (l4_off_) {
    uint16_t ports[2]; /* copied: a packet may start at an odd offset */
    std::memcpy(ports, data() + l4_off_, sizeof ports);
    key->src_port = ntohs(ports[0]);
    key->dst_port = ntohs(ports[1]);
  }
  return true;
}

static uint32_t SumWords(const void* data, size_t len, uint32_t sum) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (len > 1) {
    uint16_t w;
    std::memcpy(&w, p, 2);
    sum += w;
    p += 2;
    len -= 2;
  }
  if (len) {
    uint16_t w = 0;
    std::memcpy(&w, p, 1);
    sum += w;
  }
  return sum;
}

static uint16_t Fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

uint16_t Checksum(const void* data, size_t len, uint32_t initial) {
  return static_cast<uint16_t>(~Fold(SumWords(data, len, initial)));
}

void Ipv4UpdateChecksum(Ipv4Hdr* ip) {
  ip->checksum = 0;
  ip->checksum = Checksum(ip, (ip->version_ihl & 0x0f) * 4);
}

void L4UpdateChecksum(Packet* pkt) {
  Ipv4Hdr* ip = pkt->ipv4();
  uint16_t l4 = pkt->l4_offset();
  if (!ip || !l4) return;
  uint16_t l4_len = ntohs(ip->total_length) - (ip->version_ihl & 0x0f) * 4;
  uint8_t* hdr = pkt->data() + l4;
  uint8_t* csum = hdr + (ip->proto == kProtoTcp ? offsetof(TcpHdr, checksum) : offsetof(UdpHdr, checksum));
  Store16(csum, 0);
  uint32_t sum = 0;
  sum = SumWords(&ip->src, 8, sum);
  sum += htons(ip->proto);
  sum += htons(l4_len);
  uint16_t c = Checksum(hdr, l4_len, sum);
  if (ip->proto == kProtoUdp && c == 0) c = 0xffff; /* RFC 768: 0 means "none" */
  Store16(csum, c);
}

void ChecksumReplace16(void* csum, uint16_t old_val, uint16_t new_val) {
  /* RFC 1624 eq. 3: HC' = ~(~HC + ~m + m'). */
  uint32_t sum = static_cast<uint16_t>(~Load16(csum)) + static_cast<uint16_t>(~old_val) + new_val;
  Store16(csum, static_cast<uint16_t>(~Fold(sum)));
}

void ChecksumReplace32(void* csum, uint32_t old_val, uint32_t new_val) {
  ChecksumReplace16(csum, static_cast<uint16_t>(old_val >> 16), static_cast<uint16_t>(new_val >> 16));
  ChecksumReplace16(csum, static_cast<uint16_t>(old_val), static_cast<uint16_t>(new_val));
}

}  // namespace keel
