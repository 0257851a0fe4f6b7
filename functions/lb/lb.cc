/* SPDX-License-Identifier: Apache-2.0 */
/*
 * LB: L4 load balancer. Each flow goes to one of the backends, chosen by a
 * hash of its 5-tuple, and keeps it: the choice is stored in the NF's
 * FlowState as the backend's address, so it survives a restart and a change
 * of the backend list. The destination address is rewritten to the backend
 * and the IPv4 and TCP/UDP checksums are patched.
 *
 * When the flow table is full (keel-nf --flow-capacity) a new flow is sent
 * to the backend its hash picks without being stored (untracked_flows).
 *
 * Packets without ports (other protocols, and every fragment so that all
 * fragments of a datagram stay together) are keyed by (src, dst, proto).
 * Non-IPv4 frames and TCP/UDP packets with a truncated header are dropped.
 * A flow moving to another instance (issue 37) takes its backend along.
 */
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "keel/nf.h"

namespace keel {

namespace {

/* The stored choice of a flow: the backend address in host byte order. */
struct LbChoice {
  uint32_t backend;
};

constexpr uint16_t kFragMask = 0x3fff; /* MF flag and fragment offset */

}  // namespace

class Lb : public NF {
 public:
  void Init(const Config& config) override {
    config.CheckObject({"backends"});
    Config list = config["backends"];
    for (const Config& b : list.Array()) backends_.push_back(b.Ipv4());
    if (backends_.empty()) list.Fail("needs at least one backend");
  }

  void ProcessBatch(PacketBatch* batch) override {
    for (Packet* p : *batch) {
      Ipv4Hdr* ip = p->ipv4();
      if (!ip || p->malformed() != Malformed::kNone) {
        p->Drop();
        continue;
      }
      FlowKey key;
      p->GetFlowKey(&key);
      if (ip->frag_off & htons(kFragMask)) key.src_port = key.dst_port = 0;
      LbChoice choice;
      if (!state().Read(key, &choice)) {
        choice.backend = backends_[FlowKeyHash()(key) % backends_.size()];
        if (state().Update(key, choice))
          new_flows_++;
        else
          untracked_flows_++;
      }
      uint32_t dst = htonl(choice.backend);
      if (TcpHdr* tcp = p->tcp()) {
        ChecksumReplace32(&tcp->checksum, ip->dst, dst);
      } else if (UdpHdr* udp = p->udp()) {
        if (udp->checksum != 0) {
          ChecksumReplace32(&udp->checksum, ip->dst, dst);
          if (udp->checksum == 0) udp->checksum = 0xffff;
        }
      }
      ChecksumReplace32(&ip->checksum, ip->dst, dst);
      ip->dst = dst;
    }
  }

  /* A moving flow takes its backend; the next position sees it as the
   * destination. */
  void ExportFlow(const FlowKey& flow, FlowExport* out) override {
    NF::ExportFlow(flow, out);
    for (const StateRecord& r : out->records) {
      if (!(r.key == flow) || r.len != sizeof(LbChoice)) continue;
      LbChoice c;
      std::memcpy(&c, r.data, sizeof c);
      out->next.dst_ip = c.backend;
    }
  }

  bool ImportFlow(const std::vector<StateRecord>& records, std::string* err) override {
    for (const StateRecord& r : records) {
      if (r.len == sizeof(LbChoice)) continue;
      *err = "lb: a record of " + std::to_string(r.len) + " bytes, expected " + std::to_string(sizeof(LbChoice));
      return false;
    }
    return NF::ImportFlow(records, err);
  }

  Json Stats() const override { return Json{{"new_flows", new_flows_}, {"untracked_flows", untracked_flows_}}; }

 private:
  std::vector<uint32_t> backends_; /* host order */
  uint64_t new_flows_ = 0;
  uint64_t untracked_flows_ = 0;
};

KEEL_NF(Lb, "lb", "L4 load balancer: sends each flow to one of the backends");
KEEL_NF_ARGS(Lb, R"json([
  {"name": "backends", "required": true, "type": "array", "items": {"type": "ipv4"}, "min_items": 1,
   "doc": "backend addresses; each flow goes to one of them"}
])json");
KEEL_NF_STATE(Lb, R"json({"scope": "per-flow",
  "doc": "the backend of each flow in the flow table"})json");

}  // namespace keel
