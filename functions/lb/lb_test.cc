/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <set>
#include <string>

#include "testing/nf_test.h"

namespace keel {
namespace {

constexpr char kConfig[] = R"({"backends":["192.0.2.10","192.0.2.11","192.0.2.12","192.0.2.13"]})";

/* The backend |bytes| was sent to, after checking it is one of kConfig's. */
std::string Backend(std::vector<uint8_t>* bytes) {
  static const std::set<std::string> kBackends = {"192.0.2.10", "192.0.2.11", "192.0.2.12",
                                                  "192.0.2.13"};
  char buf[INET_ADDRSTRLEN];
  uint32_t dst = View(bytes).ipv4()->dst;
  inet_ntop(AF_INET, &dst, buf, sizeof(buf));
  EXPECT_EQ(kBackends.count(buf), 1u) << buf;
  return buf;
}

/* The backend stored in |nf|'s state for |key|, or "" if none. */
std::string Stored(NF* nf, const FlowKey& key) {
  uint32_t backend;
  if (!nf->state().Read(key, &backend)) return "";
  uint32_t n = htonl(backend);
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &n, buf, sizeof(buf));
  return buf;
}

/* |pkt| as a fragment with the given flags/offset word (host order). */
TestPacket Fragment(TestPacket pkt, uint16_t frag_off) {
  Packet v = View(&pkt.bytes());
  v.ipv4()->frag_off = htons(frag_off);
  Ipv4UpdateChecksum(v.ipv4());
  return pkt;
}

TEST(Lb, RejectsBadConfig) {
  EXPECT_THROW_MSG(MakeNf("lb", "{}"), "lb.backends: missing");
  EXPECT_THROW_MSG(MakeNf("lb", R"({"backends":[]})"), "lb.backends: needs at least one backend");
  EXPECT_THROW_MSG(MakeNf("lb", R"({"backends":"192.0.2.1"})"),
                   "lb.backends: expected an array, got string");
  EXPECT_THROW_MSG(MakeNf("lb", R"({"backends":["192.0.2.1","192.0.2.300"]})"),
                   "lb.backends[1]: '192.0.2.300' is not an IPv4 address");
  EXPECT_THROW_MSG(MakeNf("lb", R"({"backends":[1]})"), "lb.backends[0]: expected a string, got number");
  EXPECT_THROW_MSG(MakeNf("lb", R"({"backends":["192.0.2.1"],"mode":"rr"})"), "lb.mode: unknown field");
}

TEST(Lb, RewritesDestinationToTheFlowsBackend) {
  auto lb = MakeNf("lb", kConfig);
  RunResult r = RunBatch(lb.get(), {UdpPacket("10.0.0.1", "203.0.113.80", 1234, 80, "udp"),
                                    TcpPacket("10.0.0.2", "203.0.113.80", 4321, 80, "tcp")});
  ASSERT_EQ(r.out.size(), 2u);
  std::string b0 = Backend(&r.out[0]), b1 = Backend(&r.out[1]);
  EXPECT_EQ(r.out[0], UdpPacket("10.0.0.1", b0, 1234, 80, "udp").bytes());
  EXPECT_EQ(r.out[1], TcpPacket("10.0.0.2", b1, 4321, 80, "tcp").bytes());
  EXPECT_TRUE(ChecksumsValid(r.out[0]));
  EXPECT_TRUE(ChecksumsValid(r.out[1]));
  EXPECT_EQ(Stored(lb.get(), TestFlow("10.0.0.1", "203.0.113.80", 1234, 80, kProtoUdp)), b0);
  EXPECT_EQ(Stored(lb.get(), TestFlow("10.0.0.2", "203.0.113.80", 4321, 80, kProtoTcp)), b1);
}

TEST(Lb, SpreadsFlowsAndKeepsEachOnItsBackend) {
  auto lb = MakeNf("lb", kConfig);
  std::vector<TestPacket> pkts;
  for (uint16_t i = 0; i < 32; i++)
    pkts.push_back(TcpPacket("10.0.0.1", "203.0.113.80", static_cast<uint16_t>(5000 + i), 80, "x"));
  RunResult first = RunBatch(lb.get(), pkts);
  RunResult second = RunBatch(lb.get(), pkts);
  ASSERT_EQ(first.out.size(), 32u);
  EXPECT_EQ(first.out, second.out);
  std::set<std::string> used;
  for (auto& b : first.out) used.insert(Backend(&b));
  EXPECT_EQ(used.size(), 4u);
  EXPECT_EQ(lb->Stats(), (Json{{"new_flows", 32}, {"untracked_flows", 0}}));
}

TEST(Lb, AFullTableStillBalancesNewFlowsWithoutKeepingThem) {
  auto lb = MakeNf("lb", kConfig);
  lb->state().set_limits(FlowLimits{10, 1000});
  std::vector<TestPacket> pkts;
  for (uint16_t i = 0; i < 32; i++)
    pkts.push_back(TcpPacket("10.0.0.1", "203.0.113.80", static_cast<uint16_t>(5000 + i), 80, "x"));
  RunResult first = RunBatch(lb.get(), pkts);
  RunResult second = RunBatch(lb.get(), pkts);
  ASSERT_EQ(first.out.size(), 32u);
  EXPECT_EQ(first.out, second.out) << "an untracked flow still goes where its hash points";
  EXPECT_EQ(lb->state().size(), 10u);
  EXPECT_EQ(lb->Stats(), (Json{{"new_flows", 10}, {"untracked_flows", 44}}));
}

TEST(Lb, UsesTheChoiceStoredInState) {
  auto lb = MakeNf("lb", kConfig);
  FlowKey key = TestFlow("10.0.0.1", "203.0.113.80", 1234, 80, kProtoUdp);
  struct {
    uint32_t backend;
  } stored{Ip("198.18.0.99")};
  lb->state().Update(key, stored);
  RunResult r = RunBatch(lb.get(), {UdpPacket("10.0.0.1", "203.0.113.80", 1234, 80, "x")});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], UdpPacket("10.0.0.1", "198.18.0.99", 1234, 80, "x").bytes());
}

TEST(Lb, FlowKeepsItsBackendAcrossRestartWithNewBackendList) {
  auto first = MakeNf("lb", kConfig);
  first->state().set_mirrored(true);
  std::vector<TestPacket> pkts;
  for (uint16_t i = 0; i < 8; i++)
    pkts.push_back(UdpPacket("10.0.0.1", "203.0.113.80", static_cast<uint16_t>(7000 + i), 53, "q"));
  RunResult before = RunBatch(first.get(), pkts);
  first->state().Sync();
  std::vector<StateRecord> records, pulled;
  std::vector<FlowKey> pulls;
  first->state().Exchange(&records, &pulls, &pulled);
  ASSERT_EQ(records.size(), 8u);

  auto second = MakeNf("lb", R"({"backends":["192.0.2.13","192.0.2.12","192.0.2.11","192.0.2.10","192.0.2.14"]})");
  for (const StateRecord& rec : records) second->state().Preload(rec);
  RunResult after = RunBatch(second.get(), pkts);
  EXPECT_EQ(after.out, before.out);
  EXPECT_EQ(second->Stats(), (Json{{"new_flows", 0}, {"untracked_flows", 0}}));
  /* Without the records the new list would have moved flows. */
  auto fresh = MakeNf("lb", R"({"backends":["192.0.2.13","192.0.2.12","192.0.2.11","192.0.2.10","192.0.2.14"]})");
  EXPECT_NE(RunBatch(fresh.get(), pkts).out, before.out);
}

TEST(Lb, BalancesOtherProtocolsAndFragmentsByAddresses) {
  auto lb = MakeNf("lb", kConfig);
  L4Spec icmp{"10.0.0.1", "203.0.113.80", kProtoIcmp, 0, 0, ""};
  TestPacket first = Fragment(UdpPacket("10.0.0.2", "203.0.113.80", 1234, 80, "part1"), 0x2000);
  TestPacket rest = Fragment(UdpPacket("10.0.0.2", "203.0.113.80", 1234, 80, "part2"), 0x0002);
  RunResult r = RunBatch(lb.get(), {BuildPacket(icmp), first, rest});
  ASSERT_EQ(r.out.size(), 3u);
  std::string icmp_backend = Backend(&r.out[0]);
  EXPECT_EQ(Stored(lb.get(), TestFlow("10.0.0.1", "203.0.113.80", 0, 0, kProtoIcmp)), icmp_backend);
  L4Spec icmp_out = icmp;
  icmp_out.dst_ip = icmp_backend;
  EXPECT_EQ(r.out[0], BuildPacket(icmp_out).bytes());
  std::string frag_backend = Backend(&r.out[1]);
  EXPECT_EQ(Backend(&r.out[2]), frag_backend);
  EXPECT_EQ(Stored(lb.get(), TestFlow("10.0.0.2", "203.0.113.80", 0, 0, kProtoUdp)), frag_backend);
  EXPECT_EQ(Stored(lb.get(), TestFlow("10.0.0.2", "203.0.113.80", 1234, 80, kProtoUdp)), "");
  /* The first fragment's UDP checksum covers the whole datagram: patched like any other. */
  EXPECT_TRUE(ChecksumsValid(r.out[1]));
  Packet v = View(&r.out[2]);
  EXPECT_EQ(Checksum(v.ipv4(), 20), 0);
}

TEST(Lb, KeepsZeroUdpChecksum) {
  auto lb = MakeNf("lb", R"({"backends":["192.0.2.10"]})");
  TestPacket in = UdpPacket("10.0.0.1", "203.0.113.80", 1234, 80, "x");
  View(&in.bytes()).udp()->checksum = 0;
  RunResult r = RunBatch(lb.get(), {in});
  ASSERT_EQ(r.out.size(), 1u);
  Packet out = View(&r.out[0]);
  EXPECT_EQ(out.udp()->checksum, 0);
  EXPECT_EQ(out.ipv4()->dst, htonl(Ip("192.0.2.10")));
  EXPECT_EQ(Checksum(out.ipv4(), 20), 0);
}

TEST(Lb, DropsNonIpv4AndTruncatedPackets) {
  auto lb = MakeNf("lb", kConfig);
  TestPacket arp = UdpPacket("10.0.0.1", "203.0.113.80", 1234, 80, "a");
  arp.bytes()[12] = 0x08;
  arp.bytes()[13] = 0x06;
  std::vector<uint8_t> short_tcp = TcpPacket("10.0.0.1", "203.0.113.80", 1234, 80, "").bytes();
  short_tcp[17] = 30; /* total length: IPv4 header + 10 of the 20 TCP header bytes */
  short_tcp.resize(14 + 30);
  std::vector<uint8_t> short_ip = UdpPacket("10.0.0.1", "203.0.113.80", 1234, 80, "").bytes();
  short_ip.resize(14 + 19);
  RunResult r = RunBatch(lb.get(), {arp, TestPacket(short_tcp), TestPacket(short_ip),
                                    TestPacket(std::vector<uint8_t>(13, 0))});
  EXPECT_EQ(r.out.size(), 0u);
  EXPECT_EQ(r.dropped, 4);
  EXPECT_EQ(lb->state().size(), 0u);
}

TEST(Lb, AFlowMovesWithItsBackend) {
  /* The destination's backend list changed since: its hash would send the
   * flow elsewhere; the moved flow keeps its backend. */
  constexpr char kOther[] = R"({"backends":["192.0.2.13","192.0.2.12","192.0.2.11","192.0.2.10"]})";
  auto a = MakeNf("lb", kConfig), b = MakeNf("lb", kOther), fresh = MakeNf("lb", kOther);
  a->state().set_mirrored(true);
  auto pkt = [] { return UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "x"); };
  RunResult r = RunBatch(a.get(), {pkt()});
  ASSERT_EQ(r.out.size(), 1u);
  std::string backend = Backend(&r.out[0]);
  RunResult elsewhere = RunBatch(fresh.get(), {pkt()});
  ASSERT_NE(Backend(&elsewhere.out[0]), backend) << "pick a flow the new list sends elsewhere";

  FlowKey flow = TestFlow("10.0.0.1", "203.0.113.5", 1234, 53);
  std::string err;
  MoveFrame f = MoveFlow(MoveChain{{a.get()}, {"lb"}}, MoveChain{{b.get()}, {"lb"}}, flow, &err);
  ASSERT_EQ(f.status, MoveStatus::kOk) << err;
  EXPECT_EQ(f.records.size(), 1u);
  FlowKey next = flow;
  next.dst_ip = Ip(backend);
  EXPECT_TRUE(f.cur == next) << "the next position sees the backend as destination";
  EXPECT_EQ(a->state().size(), 0u) << "the source forgot the flow";

  r = RunBatch(b.get(), {pkt()});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(Backend(&r.out[0]), backend);
  EXPECT_EQ(b->Stats()["new_flows"], 0);
}

}  // namespace
}  // namespace keel
