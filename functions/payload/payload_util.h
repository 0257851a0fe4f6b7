/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TCP/UDP payload of an IPv4 packet, for NFs that rewrite it (encrypt,
 * decrypt, chacha, dedup, rededup): find it, resize it, and bring the IPv4
 * total length, UDP length and checksums back in line afterwards.
 *
 * The payload ends at the IPv4 total length; Ethernet trailer bytes after it
 * (minimum-frame padding) are not payload and a resize cuts them off.
 */
#ifndef KEEL_FUNCTIONS_PAYLOAD_PAYLOAD_UTIL_H_
#define KEEL_FUNCTIONS_PAYLOAD_PAYLOAD_UTIL_H_

#include <cstdint>

#include "keel/packet.h"

namespace keel {

/* Returns the TCP/UDP payload of |pkt| and its length in |*len|, or nullptr
 * (|*len| 0) for non-IPv4 packets, other protocols and IP fragments, whose
 * payload is not a whole datagram. An empty payload is not nullptr. */
uint8_t* PayloadGet(Packet* pkt, uint16_t* len);

/* True if the payload of |pkt| (which PayloadGet accepted) can be made
 * |new_len| bytes long: the frame fits in the buffer and the IPv4 packet in
 * 65535 bytes. */
bool PayloadFits(Packet* pkt, uint32_t new_len);

/* Makes the payload of |pkt| (which PayloadGet accepted) |new_len| bytes
 * long, keeping its first bytes in place, and rewrites the IPv4 total length,
 * UDP length and IPv4 checksum. Returns the payload, or nullptr with the
 * packet unchanged if it would not fit in the tailroom or in an IPv4 packet.
 * The caller fills the new bytes and then calls PayloadUpdateChecksum. */
uint8_t* PayloadResize(Packet* pkt, uint16_t new_len);

/* Recomputes the TCP/UDP checksum of |pkt| after its payload changed. A UDP
 * checksum of zero (none, RFC 768) stays zero. */
void PayloadUpdateChecksum(Packet* pkt);

}  // namespace keel

#endif  // KEEL_FUNCTIONS_PAYLOAD_PAYLOAD_UTIL_H_
