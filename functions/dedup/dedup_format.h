/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wire format and chunk cache shared by dedup and rededup (redundancy
 * elimination of TCP/UDP payloads, after Lemur's Dedup).
 *
 * dedup cuts a payload into chunks of chunk_bytes bytes (the last one may be
 * shorter) and sends it as one of:
 *
 *   kHeaderRaw     payload...        the payload as it was; no cache changes
 *   kHeaderEncoded token...          tokens up to the end of the payload:
 *     kTokenRef     idx:16           the chunk in cache slot idx
 *     kTokenLiteral n:16 bytes[n]    n literal bytes starting at a chunk
 *                                    boundary; each whole chunk among them
 *                                    enters the cache, in order
 *
 * (16-bit fields big-endian). Only the last literal of a payload may end
 * off a chunk boundary. Both sides keep the same cache, a ring of
 * cache_entries chunks filled in the order the literal chunks go by, so a
 * dedup/rededup pair must be configured alike and see the same packets in
 * the same order; the cache follows the packet stream, not flows.
 */
#ifndef KEEL_FUNCTIONS_DEDUP_DEDUP_FORMAT_H_
#define KEEL_FUNCTIONS_DEDUP_DEDUP_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "keel/config.h"

namespace keel {

constexpr uint8_t kDedupHeaderRaw = 0x00;
constexpr uint8_t kDedupHeaderEncoded = 0x01;
constexpr uint8_t kDedupTokenRef = 0x01;
constexpr uint8_t kDedupTokenLiteral = 0x02;
constexpr size_t kDedupTokenBytes = 3;
/* Most an encoding can add to a payload: the header and one literal token
 * (each reference saves more than it costs, as chunks exceed 2 tokens). */
constexpr size_t kDedupMaxGrowth = 1 + kDedupTokenBytes;

/* A ring of fixed-size chunks: insertions take the next slot in turn,
 * overwriting the oldest chunk once the ring is full. */
class ChunkRing {
 public:
  /* Reads chunk_bytes (16..512, default 64) and cache_entries (1..65536,
   * default 4096) from |config|, which CheckObject already vetted, and
   * empties the ring. */
  void Init(const Config& config) {
    auto chunk = config.Get("chunk_bytes");
    auto entries = config.Get("cache_entries");
    chunk_bytes_ = chunk ? static_cast<size_t>(chunk->Int(16, 512)) : 64;
    entries_ = entries ? static_cast<uint32_t>(entries->Int(1, 65536)) : 4096;
    data_.assign(chunk_bytes_ * entries_, 0);
    next_ = filled_ = 0;
  }

  size_t chunk_bytes() const { return chunk_bytes_; }
  uint32_t entries() const { return entries_; }
  /* Slots holding a chunk: 0 .. filled() - 1. */
  uint32_t filled() const { return filled_; }

  /* The chunk in |slot|, which is below filled(). */
  const uint8_t* Get(uint32_t slot) const { return &data_[slot * chunk_bytes_]; }

  /* Stores a chunk of chunk_bytes() bytes; returns its slot. */
  uint32_t Insert(const uint8_t* chunk) {
    uint32_t slot = next_;
    std::memcpy(&data_[slot * chunk_bytes_], chunk, chunk_bytes_);
    next_ = next_ + 1 == entries_ ? 0 : next_ + 1;
    if (filled_ < entries_) filled_++;
    return slot;
  }

 private:
  size_t chunk_bytes_ = 0;
  uint32_t entries_ = 0;
  uint32_t next_ = 0;
  uint32_t filled_ = 0;
  std::vector<uint8_t> data_;
};

}  // namespace keel

#endif  // KEEL_FUNCTIONS_DEDUP_DEDUP_FORMAT_H_
