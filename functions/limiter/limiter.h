/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Limiter: a token bucket rate limiter. Tokens are bytes, refilled at
 * rate_bps / 8 bytes per second up to burst_bytes; a frame whose length does
 * not fit in the tokens left is dropped and takes none.
 *
 * By default one bucket holds for all packets of the NF: state shared by
 * every flow, so its flows do not move (KEEL_NF_STATE global). With
 * per_flow each IPv4 5-tuple has its own bucket, kept in the NF's flow
 * table (non-IPv4 frames share the NF's bucket); a new flow that finds the
 * table full is dropped and counted (table_full_drops). A per-flow bucket
 * moves with its flow (issue 37): it is handed over refilled to the moment
 * of the export, and refills from the moment of the import on.
 * Declared here so tests can drive the clock.
 */
#ifndef KEEL_FUNCTIONS_LIMITER_LIMITER_H_
#define KEEL_FUNCTIONS_LIMITER_LIMITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "keel/nf.h"

namespace keel {

class Limiter : public NF {
 public:
  /* Tokens are kept in 1e-9 bit units, so a refill is rate_bps * elapsed
   * nanoseconds and stays exact. */
  struct Bucket {
    uint64_t tokens; /* units */
    uint64_t last;   /* ns: the time tokens were refilled to */
  };

  void Init(const Config& config) override;
  void ProcessBatch(PacketBatch* batch) override;
  Json Stats() const override;
  void ExportFlow(const FlowKey& flow, FlowExport* out) override;
  bool ImportFlow(const std::vector<StateRecord>& records, std::string* err) override;

 protected:
  /* Monotonic time in nanoseconds, read once per batch (and once in Init,
   * where the bucket starts full). */
  virtual uint64_t Now() const;

 private:
  /* Adds the tokens earned since b->last, up to the burst. */
  void Refill(Bucket* b, uint64_t now) const;
  /* Takes |len| bytes' tokens from |b|; false (counted) if they are not there. */
  bool Take(Bucket* b, uint16_t len);

  uint64_t rate_ = 0;     /* bits per second = units per nanosecond */
  uint64_t capacity_ = 0; /* units */
  bool per_flow_ = false;
  Bucket bucket_{};       /* the NF's bucket */
  uint64_t dropped_packets_ = 0;
  uint64_t dropped_bytes_ = 0;
  uint64_t table_full_drops_ = 0;
};

}  // namespace keel

#endif  // KEEL_FUNCTIONS_LIMITER_LIMITER_H_
