// SPDX-License-Identifier: Apache-2.0
// A keel packet function: one class, Init validates the JSON configuration and names bad
// fields, ProcessBatch works on a burst in place. Scheduling, I/O and state belong to the
// runtime. Rename the class and the registered name ("ttlguard") to your function's.
// KEEL_NF_ARGS declares the arguments Init accepts (keel-nf --help describes the schema); the
// gateway reads them from the image (keel-nf --list --json) to check chains that use the NF.
// An NF without state, or whose state is all in state() (the flow table), can have its flows
// moved to another instance (keel/nf.h: ExportFlow/ImportFlow); one that keeps per-flow state
// in members of its own overrides those two, and one that keeps state shared by flows says
// so next to its arguments:
//   KEEL_NF_STATE(TtlGuard, R"json({"scope": "global", "doc": "what the shared state is"})json");
#include "keel/nf.h"

namespace keel {

class TtlGuard : public NF {
 public:
  void Init(const Config& config) override {
    config.CheckObject({"min_ttl"});
    if (config.Has("min_ttl")) min_ttl_ = static_cast<uint8_t>(config["min_ttl"].Int(1, 255));
  }

  void ProcessBatch(PacketBatch* batch) override {
    for (Packet* p : *batch) {
      const Ipv4Hdr* ip = p->ipv4();
      if (!ip || ip->ttl < min_ttl_) p->Drop();
    }
  }

 private:
  uint8_t min_ttl_ = 1;
};

KEEL_NF(TtlGuard, "ttlguard", "drops IPv4 packets whose TTL is below min_ttl");
KEEL_NF_ARGS(TtlGuard, R"json([
  {"name": "min_ttl", "type": "integer", "minimum": 1, "maximum": 255, "default": 1,
   "doc": "packets with a lower TTL are dropped"}
])json");

}  // namespace keel
