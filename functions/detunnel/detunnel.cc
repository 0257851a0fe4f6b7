/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Detunnel (Lemur's VLANPop): removes the outer 802.1Q tag. Untagged frames
 * pass unchanged; frames shorter than an Ethernet header, and tagged frames
 * too short to hold the whole tag, are dropped.
 */
#include <cstring>

#include "keel/nf.h"

namespace keel {

class Detunnel : public NF {
 public:
  void Init(const Config& config) override { config.CheckObject({}); }

  void ProcessBatch(PacketBatch* batch) override {
    for (Packet* p : *batch) {
      EthHdr* eth = p->eth();
      if (eth && eth->ether_type != htons(kEtherTypeVlan)) continue;
      if (!eth || p->len() < sizeof(EthHdr) + sizeof(VlanHdr)) {
        p->Drop();
        continue;
      }
      uint8_t* d = p->data();
      std::memmove(d + sizeof(VlanHdr), d, 2 * 6);
      p->Adj(sizeof(VlanHdr));
    }
  }
};

KEEL_NF(Detunnel, "detunnel", "pops the outer 802.1Q VLAN tag");
KEEL_NF_ARGS(Detunnel, "[]");

}  // namespace keel
