/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Rededup: restores the payloads dedup encoded (format in
 * dedup/dedup_format.h), replaying dedup's literal chunks into its own cache
 * in the same order. A payload that does not follow the format (unknown
 * header or token, reference to an empty slot, token or literal cut short)
 * is dropped and counted without touching the cache; one whose restored form
 * outgrows the tailroom is dropped and counted after its literal chunks
 * entered the cache, to stay in step with dedup. Packets without payload,
 * non-IPv4 packets and IP fragments pass unchanged.
 */
#include <cstring>
#include <vector>

#include "dedup/dedup_format.h"
#include "keel/nf.h"
#include "payload/payload_util.h"

namespace keel {

class Rededup : public NF {
 public:
  void Init(const Config& config) override {
    config.CheckObject({"chunk_bytes", "cache_entries"});
    ring_.Init(config);
    scratch_.resize(UINT16_MAX);
  }

  void ProcessBatch(PacketBatch* batch) override {
    for (Packet* p : *batch) {
      uint16_t len;
      uint8_t* payload = PayloadGet(p, &len);
      if (!payload || len == 0) continue;
      if (payload[0] == kDedupHeaderRaw) {
        std::memmove(payload, payload + 1, len - 1);
        PayloadResize(p, static_cast<uint16_t>(len - 1));
        PayloadUpdateChecksum(p);
        continue;
      }
      size_t n;
      if (payload[0] != kDedupHeaderEncoded || !Check(payload, len, &n)) {
        malformed_drops_++;
        p->Drop();
        continue;
      }
      Decode(payload, len);
      payload = PayloadResize(p, static_cast<uint16_t>(n));
      if (!payload) {
        tailroom_drops_++;
        p->Drop();
        continue;
      }
      std::memcpy(payload, scratch_.data(), n);
      PayloadUpdateChecksum(p);
    }
  }

  Json Stats() const override {
    return {{"malformed_drops", malformed_drops_}, {"tailroom_drops", tailroom_drops_}};
  }

 private:
  /* True if the tokens of |in| are well formed and refer only to filled
   * slots; sets |*out_len| to the length of the restored payload. */
  bool Check(const uint8_t* in, uint16_t len, size_t* out_len) const {
    const size_t chunk = ring_.chunk_bytes();
    uint32_t filled = ring_.filled();
    size_t out = 0;
    for (size_t i = 1; i < len;) {
      if (out % chunk != 0 || len - i < kDedupTokenBytes) return false;
      uint8_t token = in[i];
      size_t v = size_t{in[i + 1]} << 8 | in[i + 2];
      i += kDedupTokenBytes;
      if (token == kDedupTokenRef) {
        if (v >= filled) return false;
        out += chunk;
      } else if (token == kDedupTokenLiteral) {
        if (v == 0 || v > len - i) return false;
        i += v;
        out += v;
        size_t entries = filled + v / chunk;
        filled = entries < ring_.entries() ? static_cast<uint32_t>(entries) : ring_.entries();
      } else {
        return false;
      }
      if (out > scratch_.size()) return false;
    }
    *out_len = out;
    return true;
  }

  /* Writes the payload that the checked tokens of |in| stand for to
   * scratch_, entering literal chunks into the cache. */
  void Decode(const uint8_t* in, uint16_t len) {
    const size_t chunk = ring_.chunk_bytes();
    uint8_t* out = scratch_.data();
    for (size_t i = 1; i < len;) {
      uint8_t token = in[i];
      size_t v = size_t{in[i + 1]} << 8 | in[i + 2];
      i += kDedupTokenBytes;
      if (token == kDedupTokenRef) {
        std::memcpy(out, ring_.Get(static_cast<uint32_t>(v)), chunk);
        out += chunk;
        continue;
      }
      std::memcpy(out, in + i, v);
      for (size_t c = 0; c + chunk <= v; c += chunk) ring_.Insert(in + i + c);
      out += v;
      i += v;
    }
  }

  ChunkRing ring_;
  std::vector<uint8_t> scratch_;
  uint64_t malformed_drops_ = 0;
  uint64_t tailroom_drops_ = 0;
};

KEEL_NF(Rededup, "rededup", "restores TCP/UDP payloads encoded by dedup");
KEEL_NF_ARGS(Rededup, R"json([
  {"name": "chunk_bytes", "type": "integer", "minimum": 16, "maximum": 512, "default": 64,
   "doc": "payload chunk size in bytes, as dedup's"},
  {"name": "cache_entries", "type": "integer", "minimum": 1, "maximum": 65536, "default": 4096,
   "doc": "chunks remembered, as dedup's"}
])json");
KEEL_NF_STATE(Rededup, R"json({"scope": "global",
  "doc": "one chunk cache shared by every flow, replayed in packet order in step with dedup's: a flow cannot take it along"})json");

}  // namespace keel
