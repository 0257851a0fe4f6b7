/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A packet as a network function sees it: a bounded byte view with headroom
 * and tailroom, plus header accessors that never read out of bounds.
 *
 * The view does not own memory. The runtime points it at a DPDK mbuf (a
 * one-NF chain) or at a slot of the chain's shared packet buffer, and writes
 * the resulting offset and length back after the chain ran.
 */
#ifndef KEEL_PACKET_H_
#define KEEL_PACKET_H_

#include <arpa/inet.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace keel {

constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint16_t kEtherTypeVlan = 0x8100;
constexpr uint8_t kProtoIcmp = 1;
constexpr uint8_t kProtoTcp = 6;
constexpr uint8_t kProtoUdp = 17;

/* Wire formats. Multi-byte fields are in network byte order. */
struct __attribute__((packed)) EthHdr {
  uint8_t dst[6];
  uint8_t src[6];
  uint16_t ether_type;
};

struct __attribute__((packed)) VlanHdr {
  uint16_t tci;
  uint16_t ether_type; /* of what follows the tag */
};

struct __attribute__((packed)) Ipv4Hdr {
  uint8_t version_ihl;
  uint8_t tos;
  uint16_t total_length;
  uint16_t id;
  uint16_t frag_off;
  uint8_t ttl;
  uint8_t proto;
  uint16_t checksum;
  uint32_t src;
  uint32_t dst;
};

struct __attribute__((packed)) TcpHdr {
  uint16_t src_port;
  uint16_t dst_port;
  uint32_t seq;
  uint32_t ack;
  uint8_t data_off; /* upper 4 bits: header length in 32-bit words */
  uint8_t flags;
  uint16_t window;
  uint16_t checksum;
  uint16_t urgent;
};

struct __attribute__((packed)) UdpHdr {
  uint16_t src_port;
  uint16_t dst_port;
  uint16_t length;
  uint16_t checksum;
};

/* The 5-tuple of a packet in host byte order; the key of the state API. */
struct FlowKey {
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint8_t proto = 0;
  uint8_t pad[3] = {0, 0, 0};

  /* Returns the key of the opposite direction of the same connection. */
  FlowKey Reverse() const;
  bool operator==(const FlowKey& o) const;
};
static_assert(sizeof(FlowKey) == 16, "FlowKey is hashed and stored as 16 bytes");

struct FlowKeyHash {
  size_t operator()(const FlowKey& k) const;
};

/* Why the runtime dropped a packet before any NF saw it. */
enum class Malformed : uint8_t {
  kNone = 0,
  kTruncatedEth,   /* shorter than an Ethernet header */
  kTruncatedVlan,  /* VLAN ethertype without a full tag */
  kBadIpv4,        /* IPv4 header truncated, IHL < 5, version != 4 or total length out of bounds */
  kTruncatedL4,    /* TCP/UDP header does not fit in the IPv4 payload */
};

/*
 * A mutable view of one packet. Header accessors parse lazily and return
 * nullptr when the layer is absent or does not fit inside the packet.
 */
class Packet {
 public:
  Packet() = default;

  /* Points the view at |len| bytes starting |headroom| bytes into |buf|,
   * which holds |capacity| bytes in all. */
  void Reset(uint8_t* buf, uint16_t headroom, uint16_t len, uint16_t capacity) {
    buf_ = buf;
    off_ = headroom;
    len_ = len;
    cap_ = capacity;
    drop_ = false;
    parsed_ = false;
  }

  uint8_t* data() { return buf_ + off_; }
  const uint8_t* data() const { return buf_ + off_; }
  uint16_t len() const { return len_; }
  uint16_t headroom() const { return off_; }
  uint16_t tailroom() const { return cap_ - off_ - len_; }

  /* Grows the packet at the front by |n| bytes; false if there is no room. */
  bool Prepend(uint16_t n);
  /* Removes |n| bytes from the front; false if the packet is shorter. */
  bool Adj(uint16_t n);
  /* Grows the packet at the end by |n| bytes; false if there is no room. */
  bool Append(uint16_t n);
  /* Removes |n| bytes from the end; false if the packet is shorter. */
  bool Trim(uint16_t n);

  /* Marks the packet to be dropped after the current NF returns. */
  void Drop() { drop_ = true; }
  bool dropped() const { return drop_; }

  EthHdr* eth();
  /* The first 802.1Q tag, or nullptr if the frame is untagged. */
  VlanHdr* vlan();
  /* The IPv4 header, or nullptr if the packet is not a well-formed IPv4 packet. */
  Ipv4Hdr* ipv4();
  TcpHdr* tcp();
  UdpHdr* udp();
  /* The L4 payload (after the TCP/UDP header) bounded by the IPv4 total
   * length; nullptr with |*len| = 0 if there is no TCP/UDP header. */
  uint8_t* payload(uint16_t* len);
  /* Offset of the IPv4 header from data(), or 0 if there is none. */
  uint16_t l3_offset();
  /* Offset of the L4 header from data(), or 0 if there is none. */
  uint16_t l4_offset();

  /* Fills |key| from the IPv4/TCP/UDP headers; false for non-IPv4 packets. */
  bool GetFlowKey(FlowKey* key);

  /* Why the packet is malformed, or kNone. */
  Malformed malformed();

  /* Forces the next accessor call to re-parse (after the NF moved headers). */
  void Invalidate() { parsed_ = false; }

 private:
  void Parse();

  uint8_t* buf_ = nullptr;
  uint16_t off_ = 0;
  uint16_t len_ = 0;
  uint16_t cap_ = 0;
  bool drop_ = false;
  bool parsed_ = false;
  Malformed malformed_ = Malformed::kNone;
  uint16_t vlan_off_ = 0; /* 0: none */
  uint16_t l3_off_ = 0;   /* 0: not IPv4 */
  uint16_t l4_off_ = 0;   /* 0: no TCP/UDP header */
  uint16_t l3_end_ = 0;   /* end of the IPv4 packet (total length) */
  uint8_t l4_proto_ = 0;
};

/* Internet checksum helpers (RFC 1071 / RFC 1624), network byte order. */
uint16_t Checksum(const void* data, size_t len, uint32_t initial = 0);
/* Recomputes the IPv4 header checksum in place. */
void Ipv4UpdateChecksum(Ipv4Hdr* ip);
/* Recomputes the TCP or UDP checksum (with pseudo-header) of |pkt| in place. */
void L4UpdateChecksum(Packet* pkt);
/* Incrementally updates the 16-bit checksum at |csum| when a 16-bit field changes (RFC 1624
 * eq. 3). |csum| may be unaligned (a field of a packed header: pass &hdr->checksum). */
void ChecksumReplace16(void* csum, uint16_t old_val, uint16_t new_val);
/* Incrementally updates the checksum at |csum| when a 32-bit field changes. */
void ChecksumReplace32(void* csum, uint32_t old_val, uint32_t new_val);

/* A 16-bit field of a packed header, read or written wherever the packet starts (the headers
 * are 1-byte aligned: a packet may start at any offset). */
inline uint16_t Load16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void Store16(void* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }

}  // namespace keel

#endif  // KEEL_PACKET_H_
