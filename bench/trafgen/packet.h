/* SPDX-License-Identifier: Apache-2.0 */
/* Frames keel-trafgen sends and the sink's check of what came back: every
 * payload carries a stamp (magic, chain, flow, sequence number, TSC) and a
 * filler derived from it, so the sink can rebuild the exact payload it
 * expects and compare it byte for byte after undoing the chain's
 * encryption. Pure code: no DPDK, no I/O. */
#ifndef KEEL_TRAFGEN_PACKET_H_
#define KEEL_TRAFGEN_PACKET_H_

#include <openssl/evp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "scenario.h"

namespace keel::trafgen {

constexpr uint32_t kStampMagic = 0x4b544731;  /* "KTG1" */
constexpr uint16_t kEthHdr = 14, kVlanHdr = 4, kIpHdr = 20, kUdpHdr = 8, kTcpHdr = 20;
/* Marks a malformed frame's body, so the sink can tell one that came back. */
constexpr char kMalformedMarker[] = "keel-trafgen-malformed";

/* The stamp in every payload, host byte order (sender and sink are one
 * process on one machine). payload_len is the plaintext payload's length
 * as sent, so the sink can rebuild it after encryption padded it. */
struct Stamp {
  uint32_t magic;
  uint16_t chain;
  uint16_t payload_len;
  uint32_t flow;
  uint32_t seq;
  uint64_t tsc;
};
static_assert(sizeof(Stamp) == 24, "Stamp is 24 bytes on the wire");

struct FlowTuple {
  uint32_t src_ip = 0, dst_ip = 0;  /* host byte order */
  uint16_t sport = 0, dport = 0;
  uint8_t proto = 17;
};

/* What sender and sink know of one flow; its id is its index in the run's
 * flow list. */
struct FlowInfo {
  uint16_t chain = 0;
  FlowTuple tuple;
  bool blocked = false;  /* requests a blocked URL: must never arrive */
  std::string prefix;    /* HTTP request text before the stamp, or empty */
};

/* The HTTP request a flow of |chain| sends at the start of each payload. */
std::string HttpRequest(const Http& http, bool blocked);

/* The shortest frame that carries |flow|'s headers, prefix and stamp. */
uint16_t MinFrameLen(const FlowInfo& flow);

/* Writes the Ethernet/IPv4/UDP-or-TCP frame of |flow|'s packet |stamp.seq|,
 * |frame_len| bytes (raised to MinFrameLen), with correct checksums, into
 * |out| (room for kMaxFrame bytes). Returns the frame's length. */
uint16_t BuildFrame(const Scenario& sc, const FlowInfo& flow, Stamp stamp, uint16_t frame_len, uint8_t* out);

/* Writes a malformed frame of |kind| (one of MalformedKinds()) to |dst_ip|
 * into |out|; returns its length. */
uint16_t BuildMalformed(const Scenario& sc, const std::string& kind, uint32_t dst_ip, uint8_t* out);

/* The plaintext payload keel-trafgen sends for |stamp| in |flow|. */
std::vector<uint8_t> ExpectedPayload(const FlowInfo& flow, const Stamp& stamp);

/* A received frame's headers as the sink reads them. */
struct Parsed {
  int vlan = -1;  /* VLAN id of an 802.1Q tag, -1 when untagged */
  Mac dst_mac{}, src_mac{};
  uint32_t src_ip = 0, dst_ip = 0;
  uint8_t proto = 0;
  uint16_t sport = 0, dport = 0;
  const uint8_t* payload = nullptr;
  uint16_t payload_len = 0;
};

/* Parses an Ethernet (optionally 802.1Q) IPv4 UDP/TCP frame. False if it is
 * anything else or cut short. */
bool ParseFrame(const uint8_t* frame, size_t len, Parsed* p);

/* True if the frame carries kMalformedMarker (one of ours came back). */
bool IsMalformedMarker(const uint8_t* frame, size_t len);

/* AES-128-CBC with PKCS#7 padding, every message from the same IV (the
 * Encrypt NF's scheme). */
class Aes128Cbc {
 public:
  Aes128Cbc(const std::array<uint8_t, 16>& key, const std::array<uint8_t, 16>& iv);
  /* Appends the ciphertext of |in| to |out|. */
  bool Encrypt(const uint8_t* in, size_t len, std::vector<uint8_t>* out);
  /* Replaces |out| with the plaintext of |in|; false if it does not decrypt
   * (length not a block multiple, bad padding). */
  bool Decrypt(const uint8_t* in, size_t len, std::vector<uint8_t>* out);

 private:
  std::array<uint8_t, 16> key_, iv_;
  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx_{nullptr, EVP_CIPHER_CTX_free};
};

/* The sink's verdict on one frame of a chain. */
struct Check {
  bool ok = false;
  std::string error;       /* a short description when !ok */
  Stamp stamp{};           /* valid when ok, or when error is about headers */
  bool has_stamp = false;
  uint32_t seen_src_ip = 0;
  uint16_t seen_sport = 0;
  size_t compared_bytes = 0;  /* plaintext bytes compared with what was sent */
};

/* Checks a frame that arrived for |chain| (index |chain_index|, found by its
 * destination address) against the chain's expectation: VLAN tag,
 * destination MAC (the expectation's, else |sink_mac|), source address and
 * port (NATed into the expected range, else as sent), destination, protocol,
 * and the payload byte for byte (decrypted with |aes| when the chain
 * encrypts). |flows| is the run's flow list, indexed by the stamp's flow. */
Check CheckFrame(const Chain& chain, uint16_t chain_index, const Mac& sink_mac, const Parsed& p,
                 const std::vector<FlowInfo>& flows, Aes128Cbc* aes, std::vector<uint8_t>* scratch);

}  // namespace keel::trafgen

#endif  // KEEL_TRAFGEN_PACKET_H_
