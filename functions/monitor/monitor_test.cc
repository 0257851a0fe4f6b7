/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "testing/nf_test.h"

namespace keel {
namespace {

Json Flow(const std::string& src, const std::string& dst, int sport, int dport, int proto,
          uint64_t packets, uint64_t bytes) {
  return {{"src_ip", src},   {"dst_ip", dst},         {"src_port", sport}, {"dst_port", dport},
          {"proto", proto},  {"packets", packets},    {"bytes", bytes}};
}

Json Totals(Json flows, uint64_t packets, uint64_t bytes, uint64_t untracked = 0) {
  return {{"flows", std::move(flows)},
          {"packets", packets},
          {"bytes", bytes},
          {"flows_dropped_from_table", untracked}};
}

TestPacket Arp() {
  std::vector<uint8_t> b(60, 0);
  b[12] = 0x08;
  b[13] = 0x06;
  return TestPacket(b);
}

TEST(Monitor, CountsPerFlowAndInTotalWithoutTouchingPackets) {
  auto nf = MakeNf("monitor", "{}");
  L4Spec icmp;
  icmp.src_ip = "198.18.0.9";
  icmp.dst_ip = "198.18.0.1";
  icmp.proto = kProtoIcmp;
  std::vector<TestPacket> pkts = {
      UdpPacket("198.18.0.1", "198.18.1.2", 1000, 53, "a"),        /* 43 bytes */
      TcpPacket("198.18.0.1", "198.18.1.2", 1000, 80, ""),         /* 54 */
      UdpPacket("198.18.0.1", "198.18.1.2", 1000, 53, "bbbb"),     /* 46 */
      UdpPacket("198.18.1.2", "198.18.0.1", 53, 1000, "cc"),       /* 44: reverse direction */
      BuildPacket(icmp),                                           /* 42 */
      Arp(),                                                       /* 60: totals only */
      UdpPacket("198.18.0.1", "198.18.1.2", 1000, 53, ""),         /* 42 */
  };
  RunResult r = RunBatch(nf.get(), pkts);
  EXPECT_EQ(r.dropped, 0);
  ASSERT_EQ(r.out.size(), pkts.size());
  for (size_t i = 0; i < pkts.size(); i++) EXPECT_EQ(r.out[i], pkts[i].bytes());
  EXPECT_EQ(nf->Stats(), Totals({Flow("198.18.0.1", "198.18.1.2", 1000, 53, 17, 3, 43 + 46 + 42),
                                 Flow("198.18.0.1", "198.18.1.2", 1000, 80, 6, 1, 54),
                                 Flow("198.18.1.2", "198.18.0.1", 53, 1000, 17, 1, 44),
                                 Flow("198.18.0.9", "198.18.0.1", 0, 0, 1, 1, 42)},
                                7, 43 + 54 + 46 + 44 + 42 + 60 + 42));
}

TEST(Monitor, AccumulatesAcrossBatches) {
  auto nf = MakeNf("monitor", "{}");
  TestPacket a = UdpPacket("10.0.0.1", "10.0.0.2", 1, 2, "");
  TestPacket b = TcpPacket("10.0.0.3", "10.0.0.4", 3, 4, "");
  RunBatch(nf.get(), {a});
  RunBatch(nf.get(), {b, a});
  RunBatch(nf.get(), {a});
  EXPECT_EQ(nf->Stats(), Totals({Flow("10.0.0.1", "10.0.0.2", 1, 2, 17, 3, 3 * 42),
                                 Flow("10.0.0.3", "10.0.0.4", 3, 4, 6, 1, 54)},
                                4, 3 * 42 + 54));
}

TEST(Monitor, NothingSeen) {
  auto nf = MakeNf("monitor", "{}");
  EXPECT_EQ(nf->Stats(), Totals(Json::array(), 0, 0));
}

TEST(Monitor, OddPacketsAreCountedAndPassed) {
  auto nf = MakeNf("monitor", "{}");
  TestPacket udp = UdpPacket("10.0.0.1", "10.0.0.2", 1, 2, "payload");
  std::vector<uint8_t> runt(5, 0xff);
  std::vector<uint8_t> cut_ip(udp.bytes().begin(), udp.bytes().begin() + 14 + 12);
  TestPacket frag = udp; /* non-first fragment: no ports */
  frag.bytes()[14 + 7] = 0x01;
  std::vector<uint8_t> cut_udp(udp.bytes().begin(), udp.bytes().begin() + 14 + 24);
  cut_udp[14 + 3] = 24; /* IPv4 total length leaves half a UDP header */
  RunResult r = RunBatch(nf.get(), {TestPacket(runt), TestPacket(cut_ip), frag, TestPacket(cut_udp),
                                    TestPacket(std::vector<uint8_t>{0x45})});
  EXPECT_EQ(r.dropped, 0);
  EXPECT_EQ(r.out.size(), 5u);
  EXPECT_EQ(nf->Stats(), Totals({Flow("10.0.0.1", "10.0.0.2", 0, 0, 17, 2, 49 + 38)}, 5,
                                5 + 26 + 49 + 38 + 1));
}

TEST(Monitor, TableHoldsAtMost65536Flows) {
  auto nf = MakeNf("monitor", "{}");
  const int kFlows = 65536 + 40;
  auto pkt = [](int i) {
    std::string dst = "10." + std::to_string(1 + (i >> 16)) + "." + std::to_string(i >> 8 & 255) +
                      "." + std::to_string(i & 255);
    return UdpPacket("10.0.0.1", dst,
                     static_cast<uint16_t>(1000 + i % 7), 80, "");
  };
  std::vector<TestPacket> batch;
  for (int i = 0; i < kFlows; i++) {
    batch.push_back(pkt(i));
    if (batch.size() == kMaxBurst || i == kFlows - 1) {
      EXPECT_EQ(RunBatch(nf.get(), batch).dropped, 0);
      batch.clear();
    }
  }
  /* Flows in the table still count; the overflowing one is counted again. */
  RunBatch(nf.get(), {pkt(0), pkt(65535), pkt(65536)});
  Json s = nf->Stats();
  ASSERT_EQ(s["flows"].size(), 65536u);
  EXPECT_EQ(s["flows"][0], Flow("10.0.0.1", "10.1.0.0", 1000, 80, 17, 2, 84));
  EXPECT_EQ(s["flows"][65535], Flow("10.0.0.1", "10.1.255.255", 1000 + 65535 % 7, 80, 17, 2, 84));
  EXPECT_EQ(s["packets"], kFlows + 3);
  EXPECT_EQ(s["bytes"], 42 * (kFlows + 3));
  EXPECT_EQ(s["flows_dropped_from_table"], 41);
}

TEST(Monitor, StatsMayRunWhilePacketsFlow) {
  auto nf = MakeNf("monitor", "{}");
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    uint64_t last = 0;
    while (!done.load()) {
      Json s = nf->Stats();
      uint64_t packets = s["packets"];
      if (packets < last || s["flows"].size() > 64) bad++;
      last = packets;
    }
  });
  std::vector<TestPacket> batch(kMaxBurst);
  for (int round = 0; round < 2000; round++) {
    for (int i = 0; i < kMaxBurst; i++) {
      auto port = static_cast<uint16_t>((round * kMaxBurst + i) % 64);
      batch[i] = UdpPacket("10.0.0.1", "10.0.0.2", port, 9, "");
    }
    RunBatch(nf.get(), batch);
  }
  done = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  Json s = nf->Stats();
  EXPECT_EQ(s["packets"], 2000 * kMaxBurst);
  ASSERT_EQ(s["flows"].size(), 64u);
  for (int i = 0; i < 64; i++) EXPECT_EQ(s["flows"][i]["packets"], 1000) << i;
}

TEST(Monitor, RejectsConfig) {
  EXPECT_THROW_MSG(MakeNf("monitor", R"({"max_flows":10})"), "monitor.max_flows: unknown field");
  EXPECT_THROW_MSG(MakeNf("monitor", "[]"), "monitor: expected an object, got array");
}

TEST(Monitor, AFlowMovesWithItsCountersBothWays) {
  auto a = MakeNf("monitor", "{}"), b = MakeNf("monitor", "{}");
  RunBatch(a.get(), {UdpPacket("10.0.0.1", "10.0.0.2", 1000, 2000, "aaaa"),
                     UdpPacket("10.0.0.1", "10.0.0.2", 1000, 2000, "aaaa"),
                     UdpPacket("10.0.0.2", "10.0.0.1", 2000, 1000, "bb"),
                     UdpPacket("10.0.0.7", "10.0.0.2", 7, 2000, "c")});
  std::string err;
  MoveFrame f = MoveFlow(MoveChain{{a.get()}, {"monitor"}}, MoveChain{{b.get()}, {"monitor"}},
                         TestFlow("10.0.0.1", "10.0.0.2", 1000, 2000), &err);
  ASSERT_EQ(f.status, MoveStatus::kOk) << err;
  EXPECT_EQ(f.records.size(), 2u);
  /* The source reports only the flow that stayed; its totals stay. */
  EXPECT_EQ(a->Stats(), Totals({Flow("10.0.0.7", "10.0.0.2", 7, 2000, 17, 1, 43)}, 4, 4 * 42 + 4 + 4 + 2 + 1));
  RunBatch(b.get(), {UdpPacket("10.0.0.1", "10.0.0.2", 1000, 2000, "aaaa")});
  EXPECT_EQ(b->Stats(), Totals({Flow("10.0.0.1", "10.0.0.2", 1000, 2000, 17, 3, 3 * 46),
                                Flow("10.0.0.2", "10.0.0.1", 2000, 1000, 17, 1, 44)},
                               1, 46));
  /* Back to the source: it goes on from the moved counters. */
  f = MoveFlow(MoveChain{{b.get()}, {"monitor"}}, MoveChain{{a.get()}, {"monitor"}},
               TestFlow("10.0.0.2", "10.0.0.1", 2000, 1000), &err);
  ASSERT_EQ(f.status, MoveStatus::kOk) << err;
  EXPECT_EQ(b->Stats()["flows"].size(), 0u);
  EXPECT_EQ(a->Stats()["flows"].size(), 3u);
}

}  // namespace
}  // namespace keel
