/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Limiter: one token bucket over all packets of the NF. Tokens are bytes,
 * refilled at rate_bps / 8 bytes per second up to burst_bytes; a frame whose
 * length does not fit in the tokens left is dropped and takes none.
 * Declared here so tests can drive the clock.
 */
#ifndef KEEL_FUNCTIONS_LIMITER_LIMITER_H_
#define KEEL_FUNCTIONS_LIMITER_LIMITER_H_

#include <cstdint>

#include "keel/nf.h"

namespace keel {

class Limiter : public NF {
 public:
  void Init(const Config& config) override;
  void ProcessBatch(PacketBatch* batch) override;
  Json Stats() const override;

 protected:
  /* Monotonic time in nanoseconds, read once per batch (and once in Init,
   * where the bucket starts full). */
  virtual uint64_t Now() const;

 private:
  /* Tokens are kept in 1e-9 bit units, so a refill is rate_bps * elapsed
   * nanoseconds and stays exact. */
  uint64_t rate_ = 0;     /* bits per second = units per nanosecond */
  uint64_t capacity_ = 0; /* units */
  uint64_t tokens_ = 0;   /* units */
  uint64_t last_ = 0;     /* ns */
  uint64_t dropped_packets_ = 0;
  uint64_t dropped_bytes_ = 0;
};

}  // namespace keel

#endif  // KEEL_FUNCTIONS_LIMITER_LIMITER_H_
