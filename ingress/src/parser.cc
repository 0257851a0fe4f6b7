/* SPDX-License-Identifier: Apache-2.0 */
#include "parser.h"

namespace keel::ingress {

namespace {

constexpr size_t kEthLen = 14;
constexpr size_t kVlanLen = 4;
constexpr uint16_t kEtherIpv4 = 0x0800;
constexpr uint16_t kEtherArp = 0x0806;
constexpr uint16_t kEtherIpv6 = 0x86DD;
constexpr uint16_t kEtherVlan = 0x8100;
constexpr uint16_t kEtherQinQ = 0x88A8;
constexpr uint8_t kProtoTcp = 6;
constexpr uint8_t kProtoUdp = 17;
constexpr uint8_t kProtoSctp = 132;

uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

/* The fixed header length of a protocol with ports, or 0 for one without. */
size_t L4HeaderLen(uint8_t proto) {
  switch (proto) {
    case kProtoTcp: return 20;
    case kProtoUdp: return 8;
    case kProtoSctp: return 12;
    default: return 0;
  }
}

}  // namespace

std::string Ipv4String(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 0xff) + "." +
         std::to_string((ip >> 8) & 0xff) + "." + std::to_string(ip & 0xff);
}

const char* ParseResultName(ParseResult r) {
  switch (r) {
    case ParseResult::kOk: return "ok";
    case ParseResult::kTruncated: return "truncated";
    case ParseResult::kBadIhl: return "bad_ihl";
    case ParseResult::kFragment: return "fragment";
    case ParseResult::kUnknownEthertype: return "unknown_ethertype";
    case ParseResult::kNotIpv4: return "not_ipv4";
  }
  return "unknown";
}

ParseResult ParseFrame(const uint8_t* frame, size_t len, FlowKey* key) {
  if (len < kEthLen) return ParseResult::kTruncated;
  size_t off = 12;
  uint16_t type = Be16(frame + off);
  /* The ToR may hand us tagged frames; look through up to two tags. */
  for (int tags = 0; tags < 2 && (type == kEtherVlan || type == kEtherQinQ); tags++) {
    off += kVlanLen;
    if (len < off + 2) return ParseResult::kTruncated;
    type = Be16(frame + off);
  }
  off += 2;
  if (type == kEtherArp || type == kEtherIpv6) return ParseResult::kNotIpv4;
  if (type != kEtherIpv4) return ParseResult::kUnknownEthertype;

  const uint8_t* ip = frame + off;
  size_t avail = len - off;
  if (avail < 20) return ParseResult::kTruncated;
  if (ip[0] >> 4 != 4) return ParseResult::kNotIpv4;
  size_t ihl = size_t{ip[0] & 0x0fu} * 4;
  if (ihl < 20 || ihl > avail) return ParseResult::kBadIhl;
  /* The datagram's own length: shorter than its header is malformed, longer
   * than what arrived was cut short (Ethernet padding may follow it). */
  size_t total = Be16(ip + 2);
  if (total < ihl) return ParseResult::kBadIhl;
  if (total > avail) return ParseResult::kTruncated;
  uint16_t frag = Be16(ip + 6);
  /* More-fragments set, or a non-zero offset: part of a fragmented datagram. */
  if (frag & 0x3fff) return ParseResult::kFragment;

  key->proto = ip[9];
  key->src_ip = Be32(ip + 12);
  key->dst_ip = Be32(ip + 16);
  key->src_port = key->dst_port = 0;
  if (size_t l4 = L4HeaderLen(key->proto)) {
    if (total < ihl + l4) return ParseResult::kTruncated;
    key->src_port = Be16(ip + ihl);
    key->dst_port = Be16(ip + ihl + 2);
  }
  return ParseResult::kOk;
}

}  // namespace keel::ingress
