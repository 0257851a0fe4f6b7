/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer harness: every library NF's ProcessBatch on arbitrary frames,
 * as the runtime hands them over (each in a slot of its own with the slot's
 * headroom, at most kSlotDataRoom bytes), with or without an 802.1Q tag put
 * in front of the IPv4 header, truncated or as long as a slot takes. The
 * NFs keep their state from input to input, as in a running chain. After
 * each batch every packet must lie inside its slot.
 * Input: an NF selector byte, then frames: a flags byte (bit 0: insert a
 * VLAN tag, bit 1: pad to the longest frame), a length (two bytes), bytes. */
#include <memory>
#include <vector>

#include "fuzz_nfs.h"
#include "fuzz_util.h"
#include "keel/nf.h"
#include "keel/pktbuf.h"

namespace {

struct Nf {
  std::string name;
  std::unique_ptr<keel::NF> nf;
};

std::vector<Nf>& Nfs() {
  static std::vector<Nf>* nfs = [] {
    auto* v = new std::vector<Nf>;
    bool eal = keel::fuzz::StartEal();
    for (const auto& [name, config] : keel::fuzz::NfConfigs()) {
      if (name == "ipv4fwd" && !eal) {
        std::fprintf(stderr, "fuzz_nf: DPDK's EAL did not start: ipv4fwd left out\n");
        continue;
      }
      v->push_back({name, keel::MakeNf(name, config)});
    }
    return v;
  }();
  return *nfs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<Nf>& nfs = Nfs();
  keel::fuzz::Input in(data, size);
  Nf& nf = nfs[in.U8() % nfs.size()];
  std::vector<std::vector<uint8_t>> slots;
  slots.reserve(keel::kMaxBurst);
  keel::Packet views[keel::kMaxBurst];
  keel::PacketBatch batch;
  while (in.left() > 0 && batch.cnt() < keel::kMaxBurst) {
    uint8_t flags = in.U8();
    uint16_t len = static_cast<uint16_t>(in.U16() % (keel::kSlotDataRoom + 1));
    slots.emplace_back(keel::kSlotSize);
    const uint16_t headroom = keel::kSlotHeadroom;
    uint8_t* frame = slots.back().data() + headroom;
    size_t got = in.Take(frame, len);
    if (flags & 1 && got >= 14 && got + 4 <= keel::kSlotDataRoom) {
      std::memmove(frame + 16, frame + 12, got - 12);
      frame[12] = 0x81;
      frame[13] = 0x00;
      frame[14] = flags >> 4;
      frame[15] = 0x07;
      got += 4;
    }
    if (flags & 2) got = keel::kSlotDataRoom; /* the rest stays zero */
    keel::Packet& p = views[batch.cnt()];
    p.Reset(slots.back().data(), headroom, static_cast<uint16_t>(got),
            static_cast<uint16_t>(keel::kSlotSize));
    batch.Add(&p);
  }
  nf.nf->ProcessBatch(&batch);
  for (int i = 0; i < batch.cnt(); i++) {
    keel::Packet* p = views + i;
    const uint8_t* slot = slots[static_cast<size_t>(i)].data();
    if (!p->dropped())
      keel::fuzz::CheckPacket(p, slot, static_cast<uint16_t>(keel::kSlotSize));
  }
  return 0;
}
