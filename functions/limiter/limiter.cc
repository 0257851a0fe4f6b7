/* SPDX-License-Identifier: Apache-2.0 */
/* Limiter: a token bucket rate limiter over the whole NF (see limiter.h). */
#include "limiter/limiter.h"

#include <chrono>

namespace keel {

namespace {

constexpr uint64_t kUnitsPerByte = 8ull * 1000 * 1000 * 1000;
constexpr int64_t kMaxRateBps = 1000ll * 1000 * 1000 * 1000; /* 1 Tbit/s */
constexpr int64_t kMaxBurstBytes = 1000ll * 1000 * 1000;      /* 1 GB: fits kUnitsPerByte in 64 bits */

}  // namespace

void Limiter::Init(const Config& config) {
  config.CheckObject({"rate_bps", "burst_bytes"});
  rate_ = static_cast<uint64_t>(config["rate_bps"].Int(1, kMaxRateBps));
  capacity_ = static_cast<uint64_t>(config["burst_bytes"].Int(1, kMaxBurstBytes)) * kUnitsPerByte;
  tokens_ = capacity_;
  last_ = Now();
}

void Limiter::ProcessBatch(PacketBatch* batch) {
  uint64_t now = Now();
  if (now > last_) {
    uint64_t elapsed = now - last_;
    uint64_t room = capacity_ - tokens_;
    tokens_ = elapsed > room / rate_ ? capacity_ : tokens_ + elapsed * rate_;
    last_ = now;
  }
  for (Packet* p : *batch) {
    uint64_t cost = p->len() * kUnitsPerByte;
    if (cost <= tokens_) {
      tokens_ -= cost;
    } else {
      dropped_packets_++;
      dropped_bytes_ += p->len();
      p->Drop();
    }
  }
}

Json Limiter::Stats() const {
  return Json{{"dropped_packets", dropped_packets_}, {"dropped_bytes", dropped_bytes_}};
}

uint64_t Limiter::Now() const {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

KEEL_NF(Limiter, "limiter", "token bucket rate limiter: rate_bps with burst_bytes of credit");
KEEL_NF_ARGS(Limiter, R"json([
  {"name": "rate_bps", "required": true, "type": "integer", "minimum": 1, "maximum": 1000000000000,
   "doc": "sustained rate in bits per second"},
  {"name": "burst_bytes", "required": true, "type": "integer", "minimum": 1, "maximum": 1000000000,
   "doc": "bucket depth in bytes"}
])json");

}  // namespace keel
