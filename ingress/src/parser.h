/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ingress's packet parser: Ethernet (up to two VLAN tags) + IPv4 +
 * TCP/UDP ports. It reads only the bytes it is given (an mbuf's first
 * segment) and says why a frame cannot be classified instead of guessing.
 */
#ifndef KEEL_INGRESS_PARSER_H_
#define KEEL_INGRESS_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "keel/inband.h"

namespace keel::ingress {

/* A flow's 5-tuple; addresses and ports in host byte order. The in-band
 * frames name flows the same way (the handover's marker carries it). */
using FlowKey = keel::inband::FlowId;

struct FlowKeyHash {
  size_t operator()(const FlowKey& k) const {
    uint64_t a = (uint64_t{k.src_ip} << 32) | k.dst_ip;
    uint64_t b = (uint64_t{k.src_port} << 24) | (uint64_t{k.dst_port} << 8) | k.proto;
    return std::hash<uint64_t>()(a * 0x9E3779B97F4A7C15ull ^ b);
  }
};

/* Dotted-quad text of a host-order IPv4 address. */
std::string Ipv4String(uint32_t ip);

/* What the parser made of a frame. Everything but kOk is a drop reason. */
enum class ParseResult {
  kOk,
  kTruncated,         /* a header runs past the end of the frame */
  kBadIhl,            /* IHL < 5, or the IPv4 header is longer than the frame */
  kFragment,          /* an IPv4 fragment: only the first has ports, so none is classified */
  kUnknownEthertype,  /* neither IPv4 nor a protocol we know to be non-IPv4 */
  kNotIpv4,           /* ARP, IPv6, ... or an IPv4 EtherType with version != 4 */
};

/* The drop-reason name of |r| (for counters), e.g. "truncated". */
const char* ParseResultName(ParseResult r);

/* Parses the |len| bytes at |frame| into |*key|. Ports are 0 for protocols
 * without them (ICMP, ...). */
ParseResult ParseFrame(const uint8_t* frame, size_t len, FlowKey* key);

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_PARSER_H_
