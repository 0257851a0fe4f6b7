/* SPDX-License-Identifier: Apache-2.0 */
/* When to send: a chain's bit rate over its phases, the TSC gap between
 * frames at that rate, a schedule that keeps to it without bursting to catch
 * up after a stall, and the packet-size mix. Pure arithmetic. */
#ifndef KEEL_TRAFGEN_PACING_H_
#define KEEL_TRAFGEN_PACING_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "scenario.h"

namespace keel::trafgen {

/* The index of the phase running |t| seconds after the start, or -1 after
 * the last one. */
int PhaseAt(const std::vector<Phase>& phases, double t);

/* The target bit rate |t| seconds after the start: linear from a phase's
 * start rate to its end rate; 0 after the last phase. */
double MbpsAt(const std::vector<Phase>& phases, double t);

/* TSC cycles a frame of |bytes| (L2) occupies at |mbps|; 0 when mbps <= 0. */
uint64_t GapCycles(uint32_t bytes, double mbps, uint64_t tsc_hz);

/* A schedule in TSC cycles: the next event is due at Next(); Advance moves
 * it on by a gap. After a stall it sends what is due but catches up at most
 * |max_lag| cycles: a late sender does not burst more than that. */
class Schedule {
 public:
  void Start(uint64_t now) { next_ = now; }
  bool Due(uint64_t now) const { return next_ <= now; }
  uint64_t Next() const { return next_; }
  void Advance(uint64_t gap, uint64_t now, uint64_t max_lag) {
    next_ += gap;
    if (now > max_lag && next_ < now - max_lag) next_ = now - max_lag;
  }

 private:
  uint64_t next_ = 0;
};

/* A chain's data pacing: credit in bits accrues at the current target rate
 * (so a ramp takes effect at once) up to a cap, and a frame goes when the
 * credit covers it. The cap bounds the burst after a stall. */
class Pacer {
 public:
  void Start(uint64_t now) {
    last_ = now;
    credit_bits_ = 0;
  }
  /* Adds what |mbps| earned since the last call, up to |max_bits|. */
  void Refill(uint64_t now, double mbps, uint64_t tsc_hz, double max_bits);
  bool CanSend(uint32_t bytes) const { return credit_bits_ >= bytes * 8.0; }
  void Spend(uint32_t bytes) { credit_bits_ -= bytes * 8.0; }
  /* TSC cycles until a frame of |bytes| may go at |mbps|; 0 if it may now. */
  uint64_t Wait(uint32_t bytes, double mbps, uint64_t tsc_hz) const;

 private:
  uint64_t last_ = 0;
  double credit_bits_ = 0;
};

/* Draws frame sizes from [[bytes, weight], ...]. */
class SizeMix {
 public:
  explicit SizeMix(const std::vector<std::pair<uint16_t, double>>& sizes);
  uint16_t Draw(std::mt19937_64& rng) const;
  double MeanBytes() const;

 private:
  std::vector<std::pair<uint16_t, double>> cumulative_;
  double total_ = 0;
};

}  // namespace keel::trafgen

#endif  // KEEL_TRAFGEN_PACING_H_
