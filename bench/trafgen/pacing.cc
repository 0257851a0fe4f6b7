/* SPDX-License-Identifier: Apache-2.0 */
#include "pacing.h"

#include <algorithm>
#include <cmath>

namespace keel::trafgen {

int PhaseAt(const std::vector<Phase>& phases, double t) {
  double start = 0;
  for (size_t i = 0; i < phases.size(); i++) {
    if (t < start + phases[i].seconds) return t < 0 ? -1 : static_cast<int>(i);
    start += phases[i].seconds;
  }
  return -1;
}

double MbpsAt(const std::vector<Phase>& phases, double t) {
  double start = 0;
  for (const Phase& p : phases) {
    if (t >= start && t < start + p.seconds) return p.mbps_start + (p.mbps_end - p.mbps_start) * (t - start) / p.seconds;
    start += p.seconds;
  }
  return 0;
}

uint64_t GapCycles(uint32_t bytes, double mbps, uint64_t tsc_hz) {
  if (mbps <= 0) return 0;
  return static_cast<uint64_t>(std::llround(bytes * 8.0 * static_cast<double>(tsc_hz) / (mbps * 1e6)));
}

void Pacer::Refill(uint64_t now, double mbps, uint64_t tsc_hz, double max_bits) {
  if (now > last_ && mbps > 0)
    credit_bits_ += static_cast<double>(now - last_) * mbps * 1e6 / static_cast<double>(tsc_hz);
  credit_bits_ = std::min(credit_bits_, max_bits);
  last_ = std::max(last_, now);
}

uint64_t Pacer::Wait(uint32_t bytes, double mbps, uint64_t tsc_hz) const {
  double missing = bytes * 8.0 - credit_bits_;
  if (missing <= 0) return 0;
  if (mbps <= 0) return UINT64_MAX;
  return static_cast<uint64_t>(std::ceil(missing * static_cast<double>(tsc_hz) / (mbps * 1e6)));
}

SizeMix::SizeMix(const std::vector<std::pair<uint16_t, double>>& sizes) {
  for (const auto& [bytes, weight] : sizes) {
    if (weight <= 0) continue;
    total_ += weight;
    cumulative_.emplace_back(bytes, total_);
  }
}

uint16_t SizeMix::Draw(std::mt19937_64& rng) const {
  double x = std::uniform_real_distribution<double>(0, total_)(rng);
  for (const auto& [bytes, upto] : cumulative_)
    if (x < upto) return bytes;
  return cumulative_.back().first;
}

double SizeMix::MeanBytes() const {
  double sum = 0, prev = 0;
  for (const auto& [bytes, upto] : cumulative_) {
    sum += bytes * (upto - prev);
    prev = upto;
  }
  return total_ > 0 ? sum / total_ : 0;
}

}  // namespace keel::trafgen
