/* SPDX-License-Identifier: Apache-2.0 */
/* The egress copy with packets longer than one mbuf (issue 19 item 1). */
#include "keel/burst.h"

#include <gtest/gtest.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "keel/port.h"

namespace keel {
namespace {

std::string pool_err;

/* DPDK without devices or huge pages, once for the whole binary. */
rte_mempool* Pool() {
  static rte_mempool* pool = [] {
    std::string prefix = "--file-prefix=keel-burst-test-" + std::to_string(getpid());
    if (!EalInit({"burst_test", "--no-pci", "--no-huge", "-m", "64", "--log-level=error",
                  "--no-telemetry", prefix}, &pool_err))
      return static_cast<rte_mempool*>(nullptr);
    return MbufPool("burst_test", 63, 0, &pool_err);
  }();
  return pool;
}

/* A 2056-byte frame, in memory laid out as a chain-buffer slot. */
struct LongFrame {
  std::vector<uint8_t> slot = std::vector<uint8_t>(128 + 2056);
  Packet view;
  LongFrame() {
    for (size_t i = 0; i < slot.size(); i++) slot[i] = static_cast<uint8_t>(i * 7);
    view.Reset(slot.data(), 128, 2056, static_cast<uint16_t>(slot.size()));
  }
};

TEST(CopyOut, ChainsSegmentsForAPacketLongerThanAnMbuf) {
  ASSERT_TRUE(Pool()) << pool_err;
  LongFrame f;
  PacketBatch batch;
  batch.Add(&f.view);
  rte_mbuf* out[kMaxBurst];
  PortCounters c;
  ASSERT_EQ(CopyOut(&batch, Pool(), true, out, &c), 1);
  EXPECT_EQ(out[0]->nb_segs, 2);
  ASSERT_EQ(rte_pktmbuf_pkt_len(out[0]), 2056u);
  std::vector<uint8_t> back(2056);
  const void* p = rte_pktmbuf_read(out[0], 0, 2056, back.data());
  EXPECT_EQ(std::memcmp(p, f.slot.data() + 128, 2056), 0);
  rte_pktmbuf_free(out[0]);
  EXPECT_EQ(c.tx_too_long.Get(), 0u);
}

TEST(CopyOut, DropsAndCountsWhenThePortSendsNoChains) {
  ASSERT_TRUE(Pool()) << pool_err;
  LongFrame f;
  PacketBatch batch;
  batch.Add(&f.view);
  rte_mbuf* out[kMaxBurst];
  PortCounters c;
  unsigned before = rte_mempool_avail_count(Pool());
  EXPECT_EQ(CopyOut(&batch, Pool(), false, out, &c), 0);
  EXPECT_EQ(c.tx_too_long.Get(), 1u);
  EXPECT_EQ(rte_mempool_avail_count(Pool()), before) << "the unused mbuf goes back to the pool";
}

}  // namespace
}  // namespace keel
