/* SPDX-License-Identifier: Apache-2.0 */
/* Receiving straight into the chain buffer (issue 33, B5): the pool over the
 * slots, and the engine's use of it, on a loopback net_ring port. A net_ring
 * port passes the mbufs it is given on to its receive side without a copy,
 * so it is also a port that holds buffers: what was sent stays in the ring
 * until it is received again. */
#include "keel/rx_pool.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "keel/chain.h"
#include "keel/engine.h"
#include "keel/port.h"

namespace keel {
namespace {

constexpr uint32_t kRing = 64;
constexpr uint32_t kBufs = kRing + 128;
constexpr uint16_t kPort = 0;

std::string eal_err;

bool Eal() {
  static bool ok = [] {
    std::string prefix = "--file-prefix=keel-rxpool-test-" + std::to_string(getpid());
    return EalInit({"rx_pool_test", "--no-pci", "--no-huge", "-m", "128", "--log-level=error",
                    "--no-telemetry", "--vdev=net_ring0", prefix}, &eal_err);
  }();
  return ok;
}

/* A chain buffer, the pool over it and the port on that pool. */
struct Instance {
  std::string path = "/dev/shm/keel-rxpool-test-" + std::to_string(getpid());
  std::unique_ptr<PktBuf> buf;
  std::unique_ptr<ChainRxPool> rx;
  std::string err;
  Instance() {
    unlink(path.c_str());
    buf = PktBuf::Create(path, kRing, &err, kBufs);
    if (buf) rx = ChainRxPool::Create(buf.get(), kPort, &err);
    if (rx) PortInit(kPort, rx->pool(), &err);
  }
  ~Instance() {
    rte_eth_dev_stop(kPort);
    /* Whatever the loopback ring still holds goes back before the pool goes. */
    rte_mbuf* m[32];
    rte_eth_dev_start(kPort);
    while (uint16_t n = rte_eth_rx_burst(kPort, 0, m, 32)) rte_pktmbuf_free_bulk(m, n);
    rte_eth_dev_stop(kPort);
    rx.reset();
    buf.reset();
  }
  unsigned avail() const { return rte_mempool_avail_count(rx->pool()); }
};

/* A well-formed IPv4/UDP frame of |len| bytes whose payload bytes are |fill|. */
void WriteFrame(uint8_t* p, uint16_t len, uint8_t fill) {
  std::memset(p, fill, len);
  std::memset(p, 0x02, 12);
  p[12] = 0x08, p[13] = 0x00;
  uint8_t* ip = p + 14;
  std::memset(ip, 0, 28);
  ip[0] = 0x45;
  uint16_t tot = htons(static_cast<uint16_t>(len - 14));
  std::memcpy(ip + 2, &tot, 2);
  ip[8] = 64, ip[9] = 17;
  ip[12] = 198, ip[13] = 18, ip[15] = 1, ip[16] = 198, ip[17] = 19, ip[19] = 1;
  uint16_t ulen = htons(static_cast<uint16_t>(len - 34));
  std::memcpy(ip + 24, &ulen, 2);
}

rte_mbuf* Frame(rte_mempool* pool, uint16_t len, uint8_t fill) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (!m) return nullptr;
  WriteFrame(reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, len)), len, fill);
  return m;
}

/* Sends |n| mbufs into the loopback port: the port holds them. */
void Send(rte_mbuf** m, uint16_t n) { ASSERT_EQ(rte_eth_tx_burst(kPort, 0, m, n), n); }

struct Position0 {
  Chain chain;
  uint64_t cycles[KEEL_CYCLES_KINDS] = {};
  Engine engine;
  Position0(Instance* in, const std::vector<NfSpec>& nfs, bool egress_zero_copy = true)
      : chain(nfs), engine(&chain, in->rx->pool(), in->buf.get(), cycles, Options(egress_zero_copy)) {}
  static EngineOptions Options(bool egress_zero_copy) {
    EngineOptions o;
    o.copy_in = true;
    o.rx_zero_copy = true;
    o.egress_zero_copy = egress_zero_copy;
    return o;
  }
  Json port() const { return engine.StatsJson()["port"]; }
};

TEST(ChainRxPool, EveryMbufIsOneSlotOfTheFileInSlotOrder) {
  ASSERT_TRUE(Eal()) << eal_err;
  Instance in;
  ASSERT_TRUE(in.rx) << in.err;
  EXPECT_EQ(in.rx->pool()->size, kBufs);
  EXPECT_FALSE(in.rx->dma_mapped()) << "a vdev needs no DMA mapping";
  std::vector<rte_mbuf*> all(kBufs);
  ASSERT_EQ(rte_pktmbuf_alloc_bulk(in.rx->pool(), all.data(), kBufs), 0);
  std::set<int64_t> slots;
  for (rte_mbuf* m : all) {
    int64_t s = in.rx->SlotOf(m);
    ASSERT_GE(s, 0);
    ASSERT_LT(s, int64_t{kBufs});
    EXPECT_EQ(m->buf_addr, in.buf->SlotAddr(static_cast<uint32_t>(s)));
    EXPECT_EQ(m->buf_len, kSlotSize);
    EXPECT_EQ(m->data_off, kSlotHeadroom);
    EXPECT_TRUE(RTE_MBUF_HAS_PINNED_EXTBUF(m));
    EXPECT_EQ(rte_mbuf_refcnt_read(m), 1);
    slots.insert(s);
  }
  EXPECT_EQ(slots.size(), kBufs) << "two mbufs share a slot";
  EXPECT_EQ(rte_pktmbuf_alloc(in.rx->pool()), nullptr);
  rte_pktmbuf_free_bulk(all.data(), kBufs);
  EXPECT_EQ(in.avail(), kBufs);
}

TEST(ChainRxPool, ATurnReusesTheSlotsTheLastTurnFreed) {
  /* More packets than the per-lcore cache holds go out and come back: the
   * next allocation takes the same slots (a stack), not the coldest. */
  ASSERT_TRUE(Eal()) << eal_err;
  Instance in;
  ASSERT_TRUE(in.rx) << in.err;
  EXPECT_STREQ(rte_mempool_get_ops(in.rx->pool()->ops_index)->name, "stack");
  constexpr unsigned kTurn = 100;
  std::vector<rte_mbuf*> turn(kTurn), next(kTurn);
  ASSERT_EQ(rte_pktmbuf_alloc_bulk(in.rx->pool(), turn.data(), kTurn), 0);
  std::set<int64_t> used;
  for (rte_mbuf* m : turn) used.insert(in.rx->SlotOf(m));
  rte_pktmbuf_free_bulk(turn.data(), kTurn);
  ASSERT_EQ(rte_pktmbuf_alloc_bulk(in.rx->pool(), next.data(), kTurn), 0);
  for (rte_mbuf* m : next) EXPECT_EQ(used.count(in.rx->SlotOf(m)), 1u);
  rte_pktmbuf_free_bulk(next.data(), kTurn);
}

/* Every free mbuf of the pool, taken and given back: the slots any of them
 * could be filled into now. */
std::set<int64_t> FreeSlots(Instance* in) {
  std::set<int64_t> s;
  std::vector<rte_mbuf*> got;
  while (rte_mbuf* m = rte_pktmbuf_alloc(in->rx->pool())) {
    s.insert(in->rx->SlotOf(m));
    got.push_back(m);
  }
  for (rte_mbuf* m : got) rte_pktmbuf_free(m);
  return s;
}

TEST(EngineRxZeroCopy, ASlotGoesBackOnlyOnceTheChainAndThePortAreDone) {
  ASSERT_TRUE(Eal()) << eal_err;
  Instance in;
  ASSERT_TRUE(in.rx) << in.err;
  Position0 p0(&in, {{"macswap", ""}, {"stamp", R"({"index":0})"}});
  constexpr uint16_t n = 10;
  rte_mbuf* sent[n];
  std::set<int64_t> lent;
  for (uint16_t i = 0; i < n; i++) {
    sent[i] = Frame(in.rx->pool(), 100, static_cast<uint8_t>(i));
    lent.insert(in.rx->SlotOf(sent[i]));
  }
  Send(sent, n);
  ASSERT_EQ(p0.engine.Head(1), n);
  /* In the chain: every packet in the slot the port filled, nothing copied. */
  ASSERT_EQ(in.buf->used(), n);
  auto next = PktBuf::Open(in.path, &in.err); /* position 1's mapping */
  ASSERT_TRUE(next) << in.err;
  for (uint16_t i = 0; i < n; i++) {
    Packet v;
    ASSERT_TRUE(next->View(i, &v));
    EXPECT_EQ(v.data() - v.headroom(), next->SlotAddr(next->desc(i).slot));
    EXPECT_EQ(lent.count(next->desc(i).slot), 1u);
    EXPECT_EQ(v.data()[v.len() - 1], i) << "the bytes the port wrote";
    EXPECT_EQ(rte_mbuf_refcnt_read(sent[i]), 1);
  }
  EXPECT_EQ(p0.port()["copied"], 0);
  EXPECT_EQ(p0.engine.StatsJson()["ingress"]["zero_copy_packets"], n);
  EXPECT_EQ(in.avail(), kBufs - n);
  for (int64_t s : FreeSlots(&in)) EXPECT_EQ(lent.count(s), 0u) << "slot " << s << " is in the chain";

  /* Egress sends the same mbufs; the loopback port holds them, so their
   * slots are still not free although the chain buffer is empty. */
  p0.engine.InPlace(1, 1);
  p0.engine.Egress();
  EXPECT_EQ(in.buf->used(), 0u);
  EXPECT_EQ(p0.port()["tx_packets"], n);
  EXPECT_EQ(p0.engine.StatsJson()["egress"]["zero_copy_packets"], n);
  EXPECT_EQ(in.avail(), kBufs - n);
  for (int64_t s : FreeSlots(&in)) EXPECT_EQ(lent.count(s), 0u) << "slot " << s << " is in the port";

  /* The port lets go of them: back in the pool, each with its own slot. */
  rte_mbuf* back[32];
  ASSERT_EQ(rte_eth_rx_burst(kPort, 0, back, 32), n);
  for (uint16_t i = 0; i < n; i++) {
    EXPECT_EQ(back[i], sent[i]) << "the port sent the mbuf it received, not a copy";
    EXPECT_EQ(rte_pktmbuf_mtod(back[i], uint8_t*)[rte_pktmbuf_data_len(back[i]) - 1], i);
  }
  rte_pktmbuf_free_bulk(back, n);
  EXPECT_EQ(in.avail(), kBufs);
}

TEST(EngineRxZeroCopy, DroppedAndMultiSegmentPacketsGiveTheirSlotsBackAtOnce) {
  ASSERT_TRUE(Eal()) << eal_err;
  Instance in;
  ASSERT_TRUE(in.rx) << in.err;
  Position0 p0(&in, {{"acl", R"({"rules":[{"dst_ip":"198.19.0.0/16","proto":"udp","drop":true}]})"},
                     {"stamp", R"({"index":0})"}});
  rte_mbuf* m[3];
  m[0] = Frame(in.rx->pool(), 100, 1); /* dropped by the head NF */
  m[1] = Frame(in.rx->pool(), 9, 2);   /* truncated: malformed */
  /* Two segments, both slots of the pool: dropped as malformed (a packet
   * must lie in one slot), both segments freed. */
  m[2] = Frame(in.rx->pool(), 100, 3);
  rte_mbuf* seg = Frame(in.rx->pool(), 50, 4);
  ASSERT_EQ(rte_pktmbuf_chain(m[2], seg), 0);
  Send(m, 3);
  EXPECT_EQ(in.avail(), kBufs - 4);
  ASSERT_EQ(p0.engine.Head(1), 3u);
  EXPECT_EQ(in.buf->used(), 0u);
  EXPECT_EQ(p0.port()["rx_malformed"], 2);
  EXPECT_EQ(in.avail(), kBufs);
}

TEST(EngineRxZeroCopy, AForeignMbufIsCopiedIntoASlot) {
  ASSERT_TRUE(Eal()) << eal_err;
  Instance in;
  ASSERT_TRUE(in.rx) << in.err;
  std::string err;
  rte_mempool* other = MbufPool("rxpool_test_other", 63, 0, &err);
  ASSERT_TRUE(other) << err;
  Position0 p0(&in, {{"macswap", ""}, {"stamp", R"({"index":0})"}});
  rte_mbuf* m = Frame(other, 200, 9);
  Send(&m, 1);
  ASSERT_EQ(p0.engine.Head(1), 1u);
  EXPECT_EQ(rte_mempool_avail_count(other), 63u) << "the foreign mbuf went back to its pool";
  EXPECT_EQ(in.avail(), kBufs - 1);
  EXPECT_EQ(p0.port()["copied"], 1);
  Packet v;
  ASSERT_TRUE(in.buf->View(0, &v));
  EXPECT_EQ(v.len(), 200);
  EXPECT_EQ(v.data()[199], 9);
  p0.engine.Egress();
  rte_mbuf* back[4];
  ASSERT_EQ(rte_eth_rx_burst(kPort, 0, back, 4), 1);
  EXPECT_GE(in.rx->SlotOf(back[0]), 0);
  rte_pktmbuf_free(back[0]);
  rte_mempool_free(other);
}

TEST(EngineRxZeroCopy, TheLongestFrameGrowsIntoItsSlotsHeadroomAndGoesOutWhole) {
  ASSERT_TRUE(Eal()) << eal_err;
  Instance in;
  ASSERT_TRUE(in.rx) << in.err;
  /* 2048 bytes fill the slot's data room; the head's tunnel pushes a tag
   * into the headroom: 2052 bytes, more than an mbuf's data room. */
  Position0 p0(&in, {{"tunnel", R"({"vlan":5})"}, {"tunnel", R"({"vlan":6})"}});
  rte_mbuf* m = Frame(in.rx->pool(), kSlotDataRoom, 7);
  Send(&m, 1);
  ASSERT_EQ(p0.engine.Head(1), 1u);
  p0.engine.InPlace(1, 1);
  p0.engine.Egress();
  rte_mbuf* back[4];
  ASSERT_EQ(rte_eth_rx_burst(kPort, 0, back, 4), 1);
  EXPECT_EQ(rte_pktmbuf_pkt_len(back[0]), kSlotDataRoom + 8u);
  EXPECT_EQ(back[0]->nb_segs, 1);
  EXPECT_EQ(back[0]->data_off, kSlotHeadroom - 8);
  EXPECT_EQ(rte_pktmbuf_mtod(back[0], uint8_t*)[kSlotDataRoom + 7], 7);
  rte_pktmbuf_free(back[0]);
  EXPECT_EQ(p0.port()["tx_too_long"], 0);
}

TEST(EngineRxZeroCopy, ADescriptorNamingAnotherSlotIsDroppedAndNoSlotLeaks) {
  ASSERT_TRUE(Eal()) << eal_err;
  Instance in;
  ASSERT_TRUE(in.rx) << in.err;
  Position0 p0(&in, {{"macswap", ""}, {"stamp", R"({"index":0})"}});
  rte_mbuf* m[2] = {Frame(in.rx->pool(), 80, 1), Frame(in.rx->pool(), 80, 2)};
  Send(m, 2);
  ASSERT_EQ(p0.engine.Head(1), 2u);
  /* A hostile NF after the head points packet 0 at packet 1's slot. */
  auto evil = PktBuf::Open(in.path, &in.err);
  ASSERT_TRUE(evil) << in.err;
  const_cast<PktDesc&>(evil->desc(0)).slot = evil->desc(1).slot;
  p0.engine.Egress();
  EXPECT_EQ(p0.port()["tx_packets"], 1);
  EXPECT_EQ(in.buf->bad_descriptors(), 1u);
  rte_mbuf* back[4];
  ASSERT_EQ(rte_eth_rx_burst(kPort, 0, back, 4), 1);
  EXPECT_EQ(back[0], m[1]);
  rte_pktmbuf_free(back[0]);
  EXPECT_EQ(in.avail(), kBufs) << "the refused packet's slot went back to the pool";
}

TEST(EngineRxZeroCopy, ATagThePortLeftBesideTheFrameGoesBackIn) {
  /* af_packet reports a tag the kernel stripped in vlan_tci and puts it back
   * with rte_vlan_insert, which refuses mbufs with pinned external buffers:
   * the runtime puts it back itself. */
  ASSERT_TRUE(Eal()) << eal_err;
  Instance in;
  ASSERT_TRUE(in.rx) << in.err;
  Position0 p0(&in, {{"macswap", ""}, {"stamp", R"({"index":0})"}});
  rte_mbuf* m = Frame(in.rx->pool(), 100, 4);
  m->vlan_tci = 0x2005;
  m->ol_flags |= RTE_MBUF_F_RX_VLAN | RTE_MBUF_F_RX_VLAN_STRIPPED;
  EXPECT_NE(rte_vlan_insert(&m), 0) << "DPDK's own insert refuses this mbuf";
  Send(&m, 1);
  ASSERT_EQ(p0.engine.Head(1), 1u);
  p0.engine.Egress();
  rte_mbuf* back[4];
  ASSERT_EQ(rte_eth_rx_burst(kPort, 0, back, 4), 1);
  const uint8_t* d = rte_pktmbuf_mtod(back[0], uint8_t*);
  EXPECT_EQ(rte_pktmbuf_pkt_len(back[0]), 104u);
  EXPECT_EQ(d[12], 0x81);
  EXPECT_EQ(d[13], 0x00);
  EXPECT_EQ(d[14], 0x20);
  EXPECT_EQ(d[15], 0x05);
  EXPECT_EQ(d[16], 0x08) << "the ethertype follows the tag";
  rte_pktmbuf_free(back[0]);
}

TEST(EngineRxZeroCopy, EgressCopyFreesTheReceivedSlots) {
  ASSERT_TRUE(Eal()) << eal_err;
  Instance in;
  ASSERT_TRUE(in.rx) << in.err;
  Position0 p0(&in, {{"macswap", ""}, {"stamp", R"({"index":0})"}}, /*egress_zero_copy=*/false);
  rte_mbuf* m = Frame(in.rx->pool(), 300, 3);
  Send(&m, 1);
  ASSERT_EQ(p0.engine.Head(1), 1u);
  p0.engine.Egress();
  rte_mbuf* back[4];
  ASSERT_EQ(rte_eth_rx_burst(kPort, 0, back, 4), 1);
  EXPECT_NE(back[0], m) << "copied out into another mbuf";
  EXPECT_EQ(rte_pktmbuf_pkt_len(back[0]), 300u);
  EXPECT_EQ(in.avail(), kBufs - 1) << "only the copy is out";
  rte_pktmbuf_free(back[0]);
  EXPECT_EQ(in.avail(), kBufs);
}

TEST(EngineSojourn, EveryPacketIsTimedFromItsReceiveBurstToItsTransmitOrDrop) {
  ASSERT_TRUE(Eal()) << eal_err;
  Instance in;
  ASSERT_TRUE(in.rx) << in.err;
  /* The second NF drops every frame (all go to 198.19.0.1) in the chain
   * buffer, at position 1's turn: they leave at Egress without being sent,
   * and are timed all the same. */
  Position0 p0(&in, {{"macswap", ""}, {"acl", R"({"rules":[{"dst_ip":"198.19.0.1/32","drop":true}]})"}});
  p0.engine.Begin();
  const uint64_t ms = TscHz() / 1000;
  auto turn = [&](uint16_t n, uint64_t stall) {
    rte_mbuf* m[32];
    for (uint16_t i = 0; i < n; i++) m[i] = Frame(in.rx->pool(), 100, static_cast<uint8_t>(i));
    Send(m, n);
    ASSERT_EQ(p0.engine.Head(1), n);
    const uint64_t until = Rdtsc() + stall; /* a slow NF between receive and transmit */
    while (Rdtsc() < until) {
    }
    p0.engine.InPlace(1, 1);
    p0.engine.Egress();
    rte_mbuf* back[32];
    uint16_t got = rte_eth_rx_burst(kPort, 0, back, 32); /* the loopback port lets go of them */
    rte_pktmbuf_free_bulk(back, got);
  };
  turn(10, 0);
  const LatencyHist& h = p0.engine.sojourn();
  ASSERT_EQ(h.count(), 10u);
  EXPECT_LT(h.Quantile(1.0), ms) << "no stall: well under a millisecond";
  turn(20, 2 * ms);
  ASSERT_EQ(h.count(), 30u);
  EXPECT_LT(h.Quantile(0.3), ms) << "the first turn's packets";
  EXPECT_GE(h.Quantile(0.5), 2 * ms) << "the stalled turn's packets waited the stall";
  EXPECT_LT(h.Quantile(1.0), 50 * ms);
  Json j = p0.engine.StatsJson();
  EXPECT_EQ(j["sojourn"]["count"], 30);
  EXPECT_EQ(j["rx_wait_bound"]["count"], 30);
  EXPECT_GT(j["cycles"]["sojourn"].get<uint64_t>(), 0u) << "its cost is in the cycle account";
  EXPECT_EQ(j["port"]["tx_packets"], 0) << "dropped, not sent";
}

}  // namespace
}  // namespace keel
