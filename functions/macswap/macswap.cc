/* SPDX-License-Identifier: Apache-2.0 */
/* MACSwap: swaps the Ethernet source and destination addresses. */
#include <cstring>

#include "keel/nf.h"

namespace keel {

class MacSwap : public NF {
 public:
  void Init(const Config& config) override { config.CheckObject({}); }

  void ProcessBatch(PacketBatch* batch) override {
    for (Packet* p : *batch) {
      EthHdr* eth = p->eth();
      if (!eth) {
        p->Drop();
        continue;
      }
      uint8_t tmp[6];
      std::memcpy(tmp, eth->dst, 6);
      std::memcpy(eth->dst, eth->src, 6);
      std::memcpy(eth->src, tmp, 6);
    }
  }
};

KEEL_NF(MacSwap, "macswap", "swaps Ethernet source and destination addresses");
KEEL_NF_ARGS(MacSwap, "[]");

}  // namespace keel
