/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Dedup (Lemur's Dedup): redundancy elimination of TCP/UDP payloads. Each
 * whole chunk of the payload that is in the cache (same 64-bit fingerprint
 * and same bytes) is replaced by a 3-byte reference; the rest is sent as
 * literals, whose whole chunks enter the cache. The format is in
 * dedup_format.h; rededup restores the payloads. Repeated content shrinks,
 * new content grows by at most 4 bytes. A packet without room for that is
 * sent raw (1 byte more, cache untouched), or dropped and counted if even
 * that does not fit. Packets without payload, non-IPv4 packets and IP
 * fragments pass unchanged.
 */
#include <cstring>
#include <vector>

#include "dedup/dedup_format.h"
#include "keel/nf.h"
#include "payload/payload_util.h"

namespace keel {

class Dedup : public NF {
 public:
  void Init(const Config& config) override {
    config.CheckObject({"chunk_bytes", "cache_entries"});
    ring_.Init(config);
    size_t buckets = 1;
    while (buckets < 2 * size_t{ring_.entries()}) buckets <<= 1;
    index_.assign(buckets, kNoSlot);
    fingerprints_.assign(ring_.entries(), 0);
    scratch_.resize(UINT16_MAX + kDedupMaxGrowth);
  }

  void ProcessBatch(PacketBatch* batch) override {
    for (Packet* p : *batch) {
      uint16_t len;
      uint8_t* payload = PayloadGet(p, &len);
      if (!payload || len == 0) continue;
      if (PayloadFits(p, uint32_t{len} + kDedupMaxGrowth)) {
        size_t n = Encode(payload, len);
        payload = PayloadResize(p, static_cast<uint16_t>(n));
        std::memcpy(payload, scratch_.data(), n);
      } else if (PayloadResize(p, static_cast<uint16_t>(len + 1))) {
        std::memmove(payload + 1, payload, len);
        payload[0] = kDedupHeaderRaw;
        raw_packets_++;
      } else {
        tailroom_drops_++;
        p->Drop();
        continue;
      }
      PayloadUpdateChecksum(p);
    }
  }

  Json Stats() const override {
    return {{"chunks_replaced", chunks_replaced_},
            {"raw_packets", raw_packets_},
            {"tailroom_drops", tailroom_drops_}};
  }

 private:
  static constexpr uint32_t kNoSlot = UINT32_MAX;

  static uint64_t Fingerprint(const uint8_t* d, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, d + i, 8);
      h = (h ^ w) * 0xff51afd7ed558ccdull;
      h ^= h >> 32;
    }
    if (i < n) {
      uint64_t w = 0;
      std::memcpy(&w, d + i, n - i);
      h = (h ^ w) * 0xff51afd7ed558ccdull;
    }
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
  }

  /* Writes the encoded form of |payload| to scratch_; returns its length. */
  size_t Encode(const uint8_t* payload, uint16_t len) {
    const size_t chunk = ring_.chunk_bytes();
    uint8_t* out = scratch_.data();
    size_t o = 0;
    out[o++] = kDedupHeaderEncoded;
    size_t run = 0; /* offset of the open literal token, 0 if none */
    for (size_t off = 0; off < len; off += chunk) {
      size_t n = len - off < chunk ? len - off : chunk;
      const uint8_t* c = payload + off;
      if (n == chunk) {
        uint64_t fp = Fingerprint(c, n);
        uint32_t& bucket = index_[fp & (index_.size() - 1)];
        if (bucket != kNoSlot && fingerprints_[bucket] == fp &&
            std::memcmp(ring_.Get(bucket), c, n) == 0) {
          if (run) CloseLiteral(out, run, o);
          run = 0;
          out[o++] = kDedupTokenRef;
          out[o++] = static_cast<uint8_t>(bucket >> 8);
          out[o++] = static_cast<uint8_t>(bucket);
          chunks_replaced_++;
          continue;
        }
        bucket = ring_.Insert(c);
        fingerprints_[bucket] = fp;
      }
      if (!run) {
        run = o;
        out[o] = kDedupTokenLiteral;
        o += kDedupTokenBytes;
      }
      std::memcpy(out + o, c, n);
      o += n;
    }
    if (run) CloseLiteral(out, run, o);
    return o;
  }

  /* Fills in the length of the literal token at |run| that ends at |end|. */
  static void CloseLiteral(uint8_t* out, size_t run, size_t end) {
    size_t n = end - run - kDedupTokenBytes;
    out[run + 1] = static_cast<uint8_t>(n >> 8);
    out[run + 2] = static_cast<uint8_t>(n);
  }

  ChunkRing ring_;
  /* Fingerprint-indexed slots; a collision just forgets the older chunk. */
  std::vector<uint32_t> index_;
  std::vector<uint64_t> fingerprints_; /* of each ring slot */
  std::vector<uint8_t> scratch_;
  uint64_t chunks_replaced_ = 0;
  uint64_t raw_packets_ = 0;
  uint64_t tailroom_drops_ = 0;
};

KEEL_NF(Dedup, "dedup", "replaces TCP/UDP payload chunks seen before by cache references");
KEEL_NF_ARGS(Dedup, R"json([
  {"name": "chunk_bytes", "type": "integer", "minimum": 16, "maximum": 512, "default": 64,
   "doc": "payload chunk size in bytes (rededup must use the same)"},
  {"name": "cache_entries", "type": "integer", "minimum": 1, "maximum": 65536, "default": 4096,
   "doc": "chunks remembered (rededup must use the same)"}
])json");
KEEL_NF_STATE(Dedup, R"json({"scope": "global",
  "doc": "one chunk cache shared by every flow, filled in packet order in step with rededup's: a flow cannot take it along"})json");

}  // namespace keel
