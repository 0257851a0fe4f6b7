/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stamp: a diagnostic NF for chain order. With {"index":K} it writes the
 * byte K at offset K of the L4 payload and, for K > 0, checks that the NF
 * before it wrote K-1 at offset K-1. Packets that fail the check are
 * counted as out of order and dropped; packets too short to stamp pass.
 * With {"stall_ns":N} it also busy-waits N ns in every batch: a slow NF
 * whose cost no model knows (the closed-loop test of issue 32); without an
 * index it then only stalls, leaving every packet as it came.
 */
#include <chrono>

#include "keel/nf.h"

namespace keel {
namespace {

class Stamp : public NF {
 public:
  void Init(const Config& config) override {
    config.CheckObject({"index", "stall_ns"});
    if (config.Has("stall_ns")) stall_ = std::chrono::nanoseconds(config["stall_ns"].Int(0, 10000000));
    if (!config.Has("stall_ns") || config.Has("index")) index_ = static_cast<int>(config["index"].Int(0, 255));
  }

  void ProcessBatch(PacketBatch* batch) override {
    if (stall_.count() > 0 && batch->cnt() > 0) {
      const auto until = std::chrono::steady_clock::now() + stall_;
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    if (index_ < 0) return;
    for (Packet* p : *batch) {
      uint16_t len;
      uint8_t* pl = p->payload(&len);
      if (!pl || len <= index_) {
        short_++;
        continue;
      }
      if (index_ > 0 && pl[index_ - 1] != index_ - 1) {
        out_of_order_++;
        p->Drop();
        continue;
      }
      pl[index_] = static_cast<uint8_t>(index_);
      stamped_++;
    }
  }

  Json Stats() const override {
    return {{"stamped", stamped_}, {"out_of_order", out_of_order_}, {"too_short", short_}};
  }

 private:
  int index_ = -1; /* -1: stall only */
  std::chrono::nanoseconds stall_{0};
  uint64_t stamped_ = 0;
  uint64_t out_of_order_ = 0;
  uint64_t short_ = 0;
};

}  // namespace

KEEL_NF(Stamp, "stamp", "diagnostic: writes its index into the payload and checks the NF before it");
KEEL_NF_ARGS(Stamp, R"json([
  {"name": "index", "type": "integer", "minimum": 0, "maximum": 255,
   "doc": "this NF's position, written into the payload; required unless stall_ns is given"},
  {"name": "stall_ns", "type": "integer", "minimum": 0, "maximum": 10000000,
   "doc": "busy-waits this long in every batch (diagnostic: a slow NF), default 0; without index, all it does"}
])json");

}  // namespace keel
