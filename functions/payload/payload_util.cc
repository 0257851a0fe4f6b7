/* SPDX-License-Identifier: Apache-2.0 */
#include "payload/payload_util.h"

namespace keel {

/* More-fragments flag and fragment offset of Ipv4Hdr::frag_off. */
constexpr uint16_t kIpv4FragMask = 0x3fff;

uint8_t* PayloadGet(Packet* pkt, uint16_t* len) {
  *len = 0;
  const Ipv4Hdr* ip = pkt->ipv4();
  if (!ip || (ntohs(ip->frag_off) & kIpv4FragMask) != 0) return nullptr;
  return pkt->payload(len);
}

bool PayloadFits(Packet* pkt, uint32_t new_len) {
  uint16_t old_len;
  uint8_t* payload = pkt->payload(&old_len);
  if (!payload) return false;
  uint32_t start = static_cast<uint32_t>(payload - pkt->data());
  return start - pkt->l3_offset() + new_len <= UINT16_MAX &&
         start + new_len <= uint32_t{pkt->len()} + pkt->tailroom();
}

uint8_t* PayloadResize(Packet* pkt, uint16_t new_len) {
  if (!PayloadFits(pkt, new_len)) return nullptr;
  uint16_t old_len;
  uint8_t* payload = pkt->payload(&old_len);
  Ipv4Hdr* ip = pkt->ipv4();
  uint32_t start = static_cast<uint32_t>(payload - pkt->data());
  uint32_t ip_len = start - pkt->l3_offset() + new_len;
  uint32_t frame_len = start + new_len;
  if (frame_len > pkt->len()) {
    pkt->Append(static_cast<uint16_t>(frame_len - pkt->len()));
  } else {
    pkt->Trim(static_cast<uint16_t>(pkt->len() - frame_len));
  }
  uint16_t old_total = ip->total_length;
  ip->total_length = htons(static_cast<uint16_t>(ip_len));
  ChecksumReplace16(&ip->checksum, old_total, ip->total_length);
  if (ip->proto == kProtoUdp) {
    auto* udp = reinterpret_cast<UdpHdr*>(pkt->data() + start - sizeof(UdpHdr));
    udp->length = htons(static_cast<uint16_t>(sizeof(UdpHdr) + new_len));
  }
  return payload;
}

void PayloadUpdateChecksum(Packet* pkt) {
  if (UdpHdr* udp = pkt->udp(); udp && udp->checksum == 0) return;
  L4UpdateChecksum(pkt);
}

}  // namespace keel
