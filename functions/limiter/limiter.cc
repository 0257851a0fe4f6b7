/* SPDX-License-Identifier: Apache-2.0 */
/* Limiter: a token bucket rate limiter, per NF or per flow (see limiter.h). */
#include "limiter/limiter.h"

#include <chrono>
#include <cstring>

namespace keel {

namespace {

constexpr uint64_t kUnitsPerByte = 8ull * 1000 * 1000 * 1000;
constexpr int64_t kMaxRateBps = 1000ll * 1000 * 1000 * 1000; /* 1 Tbit/s */
constexpr int64_t kMaxBurstBytes = 1000ll * 1000 * 1000;      /* 1 GB: fits kUnitsPerByte in 64 bits */

}  // namespace

void Limiter::Init(const Config& config) {
  config.CheckObject({"rate_bps", "burst_bytes", "per_flow"});
  rate_ = static_cast<uint64_t>(config["rate_bps"].Int(1, kMaxRateBps));
  capacity_ = static_cast<uint64_t>(config["burst_bytes"].Int(1, kMaxBurstBytes)) * kUnitsPerByte;
  if (auto c = config.Get("per_flow")) per_flow_ = c->Bool();
  bucket_ = Bucket{capacity_, Now()};
}

void Limiter::Refill(Bucket* b, uint64_t now) const {
  if (now <= b->last) return;
  uint64_t elapsed = now - b->last;
  uint64_t room = capacity_ - b->tokens;
  b->tokens = elapsed > room / rate_ ? capacity_ : b->tokens + elapsed * rate_;
  b->last = now;
}

bool Limiter::Take(Bucket* b, uint16_t len) {
  uint64_t cost = len * kUnitsPerByte;
  if (cost <= b->tokens) {
    b->tokens -= cost;
    return true;
  }
  dropped_packets_++;
  dropped_bytes_ += len;
  return false;
}

void Limiter::ProcessBatch(PacketBatch* batch) {
  uint64_t now = Now();
  Refill(&bucket_, now);
  for (Packet* p : *batch) {
    FlowKey key;
    if (!per_flow_ || !p->GetFlowKey(&key)) {
      if (!Take(&bucket_, p->len())) p->Drop();
      continue;
    }
    Bucket b;
    if (state().Read(key, &b))
      Refill(&b, now);
    else
      b = Bucket{capacity_, now};
    bool pass = Take(&b, p->len());
    if (!state().Update(key, b)) {
      table_full_drops_++;
      pass = false;
    }
    if (!pass) p->Drop();
  }
}

Json Limiter::Stats() const {
  Json j = {{"dropped_packets", dropped_packets_}, {"dropped_bytes", dropped_bytes_}};
  if (per_flow_) j["table_full_drops"] = table_full_drops_;
  return j;
}

void Limiter::ExportFlow(const FlowKey& flow, FlowExport* out) {
  NF::ExportFlow(flow, out);
  uint64_t now = Now();
  for (StateRecord& r : out->records) {
    Bucket b;
    std::memcpy(&b, r.data, sizeof b);
    Refill(&b, now);
    b.last = 0; /* the clock is this host's: the importer restarts it */
    std::memcpy(r.data, &b, sizeof b);
  }
}

bool Limiter::ImportFlow(const std::vector<StateRecord>& records, std::string* err) {
  std::vector<StateRecord> here = records;
  uint64_t now = Now();
  for (StateRecord& r : here) {
    Bucket b;
    if (r.len != sizeof b) {
      *err = "limiter: a record of " + std::to_string(r.len) + " bytes, expected " + std::to_string(sizeof b);
      return false;
    }
    std::memcpy(&b, r.data, sizeof b);
    if (b.tokens > capacity_) {
      *err = "limiter: a bucket holds more than burst_bytes (configured differently?)";
      return false;
    }
    b.last = now;
    std::memcpy(r.data, &b, sizeof b);
  }
  return NF::ImportFlow(here, err);
}

uint64_t Limiter::Now() const {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

KEEL_NF(Limiter, "limiter", "token bucket rate limiter: rate_bps with burst_bytes of credit, per NF or per flow");
KEEL_NF_ARGS(Limiter, R"json([
  {"name": "rate_bps", "required": true, "type": "integer", "minimum": 1, "maximum": 1000000000000,
   "doc": "sustained rate in bits per second"},
  {"name": "burst_bytes", "required": true, "type": "integer", "minimum": 1, "maximum": 1000000000,
   "doc": "bucket depth in bytes"},
  {"name": "per_flow", "type": "boolean", "default": false,
   "doc": "one bucket per IPv4 5-tuple instead of one for the whole NF"}
])json");
KEEL_NF_STATE(Limiter, R"json({"scope": "global", "per_flow_if": {"per_flow": true},
  "doc": "one token bucket for all packets; with per_flow, one bucket per flow in the flow table"})json");

}  // namespace keel
