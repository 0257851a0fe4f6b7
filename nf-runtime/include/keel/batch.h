/* SPDX-License-Identifier: Apache-2.0 */
/* A burst of packets handed to an NF's ProcessBatch. */
#ifndef KEEL_BATCH_H_
#define KEEL_BATCH_H_

#include "keel/packet.h"

namespace keel {

/* Packets per burst: the DPDK receive burst and the unit of ProcessBatch. */
constexpr int kMaxBurst = 32;

class PacketBatch {
 public:
  int cnt() const { return cnt_; }
  Packet* pkt(int i) { return pkts_[i]; }
  Packet** begin() { return pkts_; }
  Packet** end() { return pkts_ + cnt_; }

  void Clear() { cnt_ = 0; }
  /* Appends |p|; the caller keeps cnt() below kMaxBurst. */
  void Add(Packet* p) { pkts_[cnt_++] = p; }

  /* Removes the packets marked dropped, keeping order; returns how many. */
  int RemoveDropped() {
    int kept = 0;
    for (int i = 0; i < cnt_; i++)
      if (!pkts_[i]->dropped()) pkts_[kept++] = pkts_[i];
    int removed = cnt_ - kept;
    cnt_ = kept;
    return removed;
  }

 private:
  int cnt_ = 0;
  Packet* pkts_[kMaxBurst];
};

}  // namespace keel

#endif  // KEEL_BATCH_H_
