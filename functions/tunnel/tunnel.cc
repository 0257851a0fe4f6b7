/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tunnel (Lemur's VLANPush): pushes an 802.1Q tag (PCP 0, DEI 0, the
 * configured VLAN id) right after the MAC addresses. A frame that is already
 * tagged gets a second, outer tag with TPID 0x8100 as well (QinQ without the
 * 0x88a8 service TPID). Frames shorter than an Ethernet header, and frames
 * without 4 bytes of headroom, are dropped.
 */
#include <cstring>

#include "keel/nf.h"

namespace keel {

class Tunnel : public NF {
 public:
  void Init(const Config& config) override {
    config.CheckObject({"vlan"});
    int64_t vid = config["vlan"].Int(0, 4095);
    tag_[0] = kEtherTypeVlan >> 8;
    tag_[1] = kEtherTypeVlan & 0xff;
    tag_[2] = static_cast<uint8_t>(vid >> 8);
    tag_[3] = static_cast<uint8_t>(vid);
  }

  void ProcessBatch(PacketBatch* batch) override {
    for (Packet* p : *batch) {
      if (!p->eth() || !p->Prepend(sizeof(VlanHdr))) {
        p->Drop();
        continue;
      }
      uint8_t* d = p->data();
      std::memmove(d, d + sizeof(VlanHdr), 2 * 6);
      std::memcpy(d + 2 * 6, tag_, sizeof(tag_));
    }
  }

 private:
  /* The 4 bytes inserted: TPID then TCI, as they appear on the wire. */
  uint8_t tag_[4];
};

KEEL_NF(Tunnel, "tunnel", "pushes an 802.1Q VLAN tag (outer tag if already tagged)");
KEEL_NF_ARGS(Tunnel, R"json([
  {"name": "vlan", "required": true, "type": "integer", "minimum": 0, "maximum": 4095,
   "doc": "VLAN id of the pushed 802.1Q tag"}
])json");

}  // namespace keel
