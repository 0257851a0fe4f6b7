/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>

#include "testing/nf_test.h"

namespace keel {
namespace {

constexpr char kConfig[] = R"({"external_ip":"198.51.100.1","port_range":[1000,1009]})";

std::unique_ptr<NF> MakeNat(const char* config = kConfig) { return MakeNf("nat", config); }

/* The source port of the single packet that came out. */
uint16_t OutSrcPort(RunResult* r) {
  EXPECT_EQ(r->out.size(), 1u);
  if (r->out.empty()) return 0;
  Packet p = View(&r->out[0]);
  FlowKey k;
  EXPECT_TRUE(p.GetFlowKey(&k));
  return k.src_port;
}

int64_t Stat(NF* nf, const char* name) { return nf->Stats()[name].get<int64_t>(); }

TEST(Nat, RejectsBadConfig) {
  EXPECT_THROW_MSG(MakeNat(R"({"port_range":[1,2]})"), "nat.external_ip: missing");
  EXPECT_THROW_MSG(MakeNat(R"({"external_ip":"198.51.100.1"})"), "nat.port_range: missing");
  EXPECT_THROW_MSG(MakeNat(R"({"external_ip":"198.51.100.256","port_range":[1,2]})"),
                   "nat.external_ip: '198.51.100.256' is not an IPv4 address");
  EXPECT_THROW_MSG(MakeNat(R"({"external_ip":"198.51.100.1","port_range":"1-2"})"),
                   "nat.port_range: expected an array, got string");
  EXPECT_THROW_MSG(MakeNat(R"({"external_ip":"198.51.100.1","port_range":[1]})"),
                   "nat.port_range: expected [lo, hi]");
  EXPECT_THROW_MSG(MakeNat(R"({"external_ip":"198.51.100.1","port_range":[1,2,3]})"),
                   "nat.port_range: expected [lo, hi]");
  EXPECT_THROW_MSG(MakeNat(R"({"external_ip":"198.51.100.1","port_range":[0,2]})"),
                   "nat.port_range[0]: 0 is out of range [1, 65535]");
  EXPECT_THROW_MSG(MakeNat(R"({"external_ip":"198.51.100.1","port_range":[1,65536]})"),
                   "nat.port_range[1]: 65536 is out of range [1, 65535]");
  EXPECT_THROW_MSG(MakeNat(R"({"external_ip":"198.51.100.1","port_range":[1,"2"]})"),
                   "nat.port_range[1]: expected an integer, got string");
  EXPECT_THROW_MSG(MakeNat(R"({"external_ip":"198.51.100.1","port_range":[200,100]})"),
                   "nat.port_range: lo 200 is greater than hi 100");
  EXPECT_THROW_MSG(MakeNat(R"({"external_ip":"198.51.100.1","port_range":[1,2],"ttl":3})"),
                   "nat.ttl: unknown field");
  EXPECT_THROW_MSG(MakeNat("[]"), "nat: expected an object, got array");
}

TEST(Nat, AcceptsSinglePortRange) {
  auto nat = MakeNat(R"({"external_ip":"198.51.100.1","port_range":[65535,65535]})");
  RunResult r = RunBatch(nat.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "q")});
  EXPECT_EQ(OutSrcPort(&r), 65535);
}

TEST(Nat, TranslatesOutboundUdp) {
  auto nat = MakeNat();
  RunResult r = RunBatch(nat.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "query")});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], UdpPacket("198.51.100.1", "203.0.113.5", 1000, 53, "query").bytes());
  EXPECT_TRUE(ChecksumsValid(r.out[0]));
  EXPECT_EQ(Stat(nat.get(), "mappings"), 1);
}

TEST(Nat, TranslatesOutboundTcp) {
  auto nat = MakeNat();
  RunResult r = RunBatch(nat.get(), {TcpPacket("10.0.0.1", "203.0.113.5", 40000, 443, "GET")});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], TcpPacket("198.51.100.1", "203.0.113.5", 1000, 443, "GET").bytes());
  EXPECT_TRUE(ChecksumsValid(r.out[0]));
}

TEST(Nat, TranslatesVlanTaggedPackets) {
  auto nat = MakeNat();
  L4Spec in{"10.0.0.1", "203.0.113.5", kProtoUdp, 1234, 53, "x"};
  in.vlan = 7;
  L4Spec want = in;
  want.src_ip = "198.51.100.1";
  want.src_port = 1000;
  RunResult r = RunBatch(nat.get(), {BuildPacket(in)});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], BuildPacket(want).bytes());
}

TEST(Nat, SameFlowKeepsItsPort) {
  auto nat = MakeNat();
  TestPacket pkt = UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "a");
  RunResult r = RunBatch(nat.get(), {pkt, pkt});
  ASSERT_EQ(r.out.size(), 2u);
  EXPECT_EQ(r.out[0], r.out[1]);
  RunResult again = RunBatch(nat.get(), {pkt});
  ASSERT_EQ(again.out.size(), 1u);
  EXPECT_EQ(again.out[0], r.out[0]);
  EXPECT_EQ(Stat(nat.get(), "mappings"), 1);
}

TEST(Nat, DifferentFlowsGetDifferentPorts) {
  auto nat = MakeNat();
  RunResult r = RunBatch(nat.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "a"),
                                     UdpPacket("10.0.0.2", "203.0.113.5", 1234, 53, "a"),
                                     UdpPacket("10.0.0.1", "203.0.113.5", 1235, 53, "a"),
                                     TcpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "a")});
  ASSERT_EQ(r.out.size(), 4u);
  std::vector<uint16_t> ports;
  for (auto& b : r.out) {
    Packet p = View(&b);
    FlowKey k;
    ASSERT_TRUE(p.GetFlowKey(&k));
    EXPECT_EQ(k.src_ip, Ip("198.51.100.1"));
    ports.push_back(k.src_port);
  }
  EXPECT_EQ(ports, (std::vector<uint16_t>{1000, 1001, 1002, 1003}));
  EXPECT_EQ(Stat(nat.get(), "mappings"), 4);
}

TEST(Nat, TranslatesRepliesBack) {
  auto nat = MakeNat();
  RunBatch(nat.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "query"),
                       TcpPacket("10.0.0.2", "203.0.113.6", 40000, 443, "GET")});
  RunResult r = RunBatch(nat.get(), {UdpPacket("203.0.113.5", "198.51.100.1", 53, 1000, "answer"),
                                     TcpPacket("203.0.113.6", "198.51.100.1", 443, 1001, "200 OK")});
  ASSERT_EQ(r.out.size(), 2u);
  EXPECT_EQ(r.out[0], UdpPacket("203.0.113.5", "10.0.0.1", 53, 1234, "answer").bytes());
  EXPECT_EQ(r.out[1], TcpPacket("203.0.113.6", "10.0.0.2", 443, 40000, "200 OK").bytes());
  EXPECT_TRUE(ChecksumsValid(r.out[0]));
  EXPECT_TRUE(ChecksumsValid(r.out[1]));
}

TEST(Nat, DropsRepliesWithoutMapping) {
  auto nat = MakeNat();
  RunBatch(nat.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "query")});
  RunResult r = RunBatch(nat.get(), {
      UdpPacket("203.0.113.5", "198.51.100.1", 53, 1001, "wrong port"),
      UdpPacket("203.0.113.9", "198.51.100.1", 53, 1000, "wrong remote ip"),
      UdpPacket("203.0.113.5", "198.51.100.1", 54, 1000, "wrong remote port"),
      TcpPacket("203.0.113.5", "198.51.100.1", 53, 1000, "wrong protocol"),
  });
  EXPECT_EQ(r.out.size(), 0u);
  EXPECT_EQ(r.dropped, 4);
  EXPECT_EQ(Stat(nat.get(), "unmatched_reply_drops"), 4);
  EXPECT_EQ(Stat(nat.get(), "mappings"), 1);
}

TEST(Nat, TreatsExternalAddressOutsideTheRangeAsOutbound) {
  auto nat = MakeNat();
  RunResult r = RunBatch(nat.get(), {UdpPacket("10.0.0.1", "198.51.100.1", 1234, 999, "x")});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], UdpPacket("198.51.100.1", "198.51.100.1", 1000, 999, "x").bytes());
}

TEST(Nat, ReusesPortsPerRemoteAndDropsWhenExhausted) {
  auto nat = MakeNat(R"({"external_ip":"198.51.100.1","port_range":[1000,1001]})");
  RunResult r = RunBatch(nat.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1, 53, "a"),
                                     UdpPacket("10.0.0.1", "203.0.113.5", 2, 53, "a"),
                                     UdpPacket("10.0.0.1", "203.0.113.5", 3, 53, "a"),
                                     UdpPacket("10.0.0.1", "203.0.113.5", 1, 53, "a")});
  ASSERT_EQ(r.out.size(), 3u);
  EXPECT_EQ(r.dropped, 1);
  EXPECT_EQ(Stat(nat.get(), "exhausted_drops"), 1);
  EXPECT_EQ(Stat(nat.get(), "mappings"), 2);
  /* The existing flow keeps working; another remote endpoint gets a port. */
  EXPECT_EQ(View(&r.out[2]).udp()->src_port, htons(1000));
  RunResult other = RunBatch(nat.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 3, 54, "a")});
  EXPECT_EQ(OutSrcPort(&other), 1000);
}

TEST(Nat, KeepsZeroUdpChecksum) {
  auto nat = MakeNat();
  TestPacket in = UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "nocsum");
  Packet v = View(&in.bytes());
  v.udp()->checksum = 0;
  RunResult r = RunBatch(nat.get(), {in});
  ASSERT_EQ(r.out.size(), 1u);
  Packet out = View(&r.out[0]);
  EXPECT_EQ(out.udp()->checksum, 0);
  EXPECT_EQ(out.udp()->src_port, htons(1000));
  EXPECT_EQ(Checksum(out.ipv4(), 20), 0);
}

TEST(Nat, DropsWhatItCannotTranslate) {
  auto nat = MakeNat();
  L4Spec icmp{"10.0.0.1", "203.0.113.5", kProtoIcmp, 0, 0, ""};
  TestPacket arp = UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "a");
  arp.bytes()[12] = 0x08;
  arp.bytes()[13] = 0x06;
  TestPacket fragment = UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "a");
  Packet f = View(&fragment.bytes());
  f.ipv4()->frag_off = htons(0x0010);
  Ipv4UpdateChecksum(f.ipv4());
  std::vector<uint8_t> short_udp = UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "").bytes();
  short_udp[17] = 24; /* total length: IPv4 header + 4 bytes of UDP header */
  short_udp.resize(14 + 24);
  std::vector<uint8_t> short_ip = UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "").bytes();
  short_ip.resize(14 + 10);
  RunResult r = RunBatch(nat.get(), {BuildPacket(icmp), arp, fragment, TestPacket(short_udp),
                                     TestPacket(short_ip), TestPacket({1, 2, 3})});
  EXPECT_EQ(r.out.size(), 0u);
  EXPECT_EQ(r.dropped, 6);
  EXPECT_EQ(Stat(nat.get(), "mappings"), 0);
}

TEST(Nat, RestartedInstanceTranslatesTheSameWay) {
  auto first = MakeNat();
  first->state().set_mirrored(true);
  RunResult out1 = RunBatch(first.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "q"),
                                          UdpPacket("10.0.0.2", "203.0.113.5", 1234, 53, "q")});
  ASSERT_EQ(out1.out.size(), 2u);
  first->state().Sync();
  std::vector<StateRecord> records, pulled;
  std::vector<FlowKey> pulls;
  first->state().Exchange(&records, &pulls, &pulled);
  EXPECT_EQ(records.size(), 4u); /* forward and reverse key per flow */

  auto second = MakeNat();
  for (const StateRecord& rec : records) second->state().Preload(rec);
  RunResult reply = RunBatch(second.get(), {UdpPacket("203.0.113.5", "198.51.100.1", 53, 1001, "a")});
  ASSERT_EQ(reply.out.size(), 1u);
  EXPECT_EQ(reply.out[0], UdpPacket("203.0.113.5", "10.0.0.2", 53, 1234, "a").bytes());
  RunResult out2 = RunBatch(second.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "q")});
  ASSERT_EQ(out2.out.size(), 1u);
  EXPECT_EQ(out2.out[0], out1.out[0]);
  /* A new flow to the same remote skips the ports the old instance handed out. */
  RunResult fresh = RunBatch(second.get(), {UdpPacket("10.0.0.3", "203.0.113.5", 1234, 53, "q")});
  EXPECT_EQ(OutSrcPort(&fresh), 1002);
}

TEST(Nat, ReportsStats) {
  auto nat = MakeNat();
  RunBatch(nat.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "q"),
                       UdpPacket("203.0.113.5", "198.51.100.1", 53, 1005, "a")});
  EXPECT_EQ(nat->Stats(), (Json{{"mappings", 1},
                                 {"exhausted_drops", 0},
                                 {"table_full_drops", 0},
                                 {"unmatched_reply_drops", 1}}));
}

TEST(Nat, MappingsExpireWhenTheFlowIsIdle) {
  auto nat = MakeNat();
  nat->state().set_limits(FlowLimits{100, 1000});
  const uint64_t t0 = nat->state().now_ms();
  auto reply = [] { return UdpPacket("203.0.113.5", "198.51.100.1", 53, 1000, "answer"); };
  RunBatch(nat.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "query")});
  EXPECT_EQ(nat->state().size(), 2u) << "forward and reverse key";
  nat->state().Advance(t0 + 900);
  EXPECT_EQ(RunBatch(nat.get(), {reply()}).out.size(), 1u);
  nat->state().Advance(t0 + 1800); /* used 900 ms ago, replies included */
  EXPECT_EQ(RunBatch(nat.get(), {reply()}).out.size(), 1u);
  nat->state().Advance(t0 + 2800);
  EXPECT_EQ(nat->state().size(), 0u) << "both keys expire together";
  EXPECT_EQ(nat->state().evictions(), 2u);
  RunResult late = RunBatch(nat.get(), {reply()});
  EXPECT_EQ(late.out.size(), 0u);
  EXPECT_EQ(Stat(nat.get(), "unmatched_reply_drops"), 1);
}

TEST(Nat, AFloodOfNewFlowsCannotGrowTheTableOrEvictFlowsInUse) {
  auto nat = MakeNat(R"({"external_ip":"198.51.100.1","port_range":[1000,60000]})");
  nat->state().set_limits(FlowLimits{64, 1000});
  RunBatch(nat.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "in use")});
  for (uint16_t i = 0; i < 1000; i++)
    RunBatch(nat.get(), {UdpPacket("10.9.0.1", "203.0.113.7", static_cast<uint16_t>(2000 + i), 53, "spoofed")});
  EXPECT_LE(nat->state().size(), 64u);
  EXPECT_EQ(Stat(nat.get(), "mappings"), 32) << "two keys per mapping";
  EXPECT_EQ(Stat(nat.get(), "table_full_drops"), 1000 - 31);
  EXPECT_GE(nat->state().refusals(), 1000u - 31);
  RunResult r = RunBatch(nat.get(), {UdpPacket("203.0.113.5", "198.51.100.1", 53, 1000, "answer")});
  EXPECT_EQ(r.out.size(), 1u) << "the flow in use keeps its mapping";
}

/* Keys the flow table handed its mirror since the last call: written
 * (value) and deleted (len 0). */
std::vector<StateRecord> Mirrored(NF* nf) {
  std::vector<StateRecord> dirty, pulled;
  std::vector<FlowKey> pulls;
  nf->state().Sync(true);
  nf->state().Exchange(&dirty, &pulls, &pulled);
  return dirty;
}

const MoveChain Chain(NF* nat) { return MoveChain{{nat}, {"nat"}}; }

TEST(Nat, AFlowMovesWithItsMappingBothWays) {
  auto a = MakeNat(), b = MakeNat();
  a->state().set_mirrored(true);
  b->state().set_mirrored(true);
  /* Another flow takes port 1000 first: a fresh instance would give the
   * moving flow 1000, its mapping is 1001. */
  RunBatch(a.get(), {UdpPacket("10.0.0.9", "203.0.113.5", 999, 53, "other")});
  RunResult r = RunBatch(a.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "q1")});
  EXPECT_EQ(OutSrcPort(&r), 1001);
  Mirrored(a.get());

  std::string err;
  MoveFrame f = MoveFlow(Chain(a.get()), Chain(b.get()), TestFlow("10.0.0.1", "203.0.113.5", 1234, 53), &err);
  ASSERT_EQ(f.status, MoveStatus::kOk) << err;
  EXPECT_EQ(f.records.size(), 2u) << "forward and reverse key";
  EXPECT_TRUE(f.cur == TestFlow("198.51.100.1", "203.0.113.5", 1001, 53)) << "the next position sees the translated flow";

  /* The source forgot both keys, here and in its store; the other flow stays. */
  EXPECT_EQ(a->state().size(), 2u);
  std::vector<StateRecord> gone = Mirrored(a.get());
  ASSERT_EQ(gone.size(), 2u);
  for (const StateRecord& g : gone) EXPECT_EQ(g.len, 0u) << "deleted from the source's hash";
  EXPECT_EQ(RunBatch(a.get(), {UdpPacket("203.0.113.5", "198.51.100.1", 53, 1001, "a")}).out.size(), 0u);

  /* The destination holds it as if it had made it: written to its hash,
   * the same port outbound, the same internal host for replies. */
  EXPECT_EQ(Mirrored(b.get()).size(), 2u);
  r = RunBatch(b.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "q2")});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], UdpPacket("198.51.100.1", "203.0.113.5", 1001, 53, "q2").bytes());
  r = RunBatch(b.get(), {UdpPacket("203.0.113.5", "198.51.100.1", 53, 1001, "a2")});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], UdpPacket("203.0.113.5", "10.0.0.1", 53, 1234, "a2").bytes());
  EXPECT_EQ(Stat(b.get(), "mappings"), 0) << "no new mapping made";
}

TEST(Nat, AFlowNamedByItsReplyMovesWhole) {
  auto a = MakeNat(), b = MakeNat();
  RunBatch(a.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "q")});
  std::string err;
  MoveFrame f = MoveFlow(Chain(a.get()), Chain(b.get()), TestFlow("203.0.113.5", "198.51.100.1", 53, 1000), &err);
  ASSERT_EQ(f.status, MoveStatus::kOk) << err;
  EXPECT_EQ(f.records.size(), 2u);
  EXPECT_TRUE(f.cur == TestFlow("203.0.113.5", "10.0.0.1", 53, 1234));
  EXPECT_EQ(a->state().size(), 0u);
  RunResult r = RunBatch(b.get(), {UdpPacket("203.0.113.5", "198.51.100.1", 53, 1000, "a")});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], UdpPacket("203.0.113.5", "10.0.0.1", 53, 1234, "a").bytes());
}

TEST(Nat, AnInstanceThatGaveThePortAwayRefusesTheMappingAndKeepsItsOwn) {
  auto a = MakeNat(), b = MakeNat();
  RunBatch(a.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "q")});
  RunBatch(b.get(), {UdpPacket("10.0.0.2", "203.0.113.5", 4321, 53, "q")}); /* port 1000 too */
  std::string err;
  MoveFrame f = MoveFlow(Chain(a.get()), Chain(b.get()), TestFlow("10.0.0.1", "203.0.113.5", 1234, 53), &err);
  EXPECT_EQ(f.status, MoveStatus::kRefused);
  EXPECT_EQ(f.failed_position, 0u);
  EXPECT_NE(err.find("conflicts"), std::string::npos) << err;
  EXPECT_EQ(b->state().size(), 2u);
  RunResult r = RunBatch(b.get(), {UdpPacket("203.0.113.5", "198.51.100.1", 53, 1000, "a")});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], UdpPacket("203.0.113.5", "10.0.0.2", 53, 4321, "a").bytes());
  /* The frame goes back to the source as an import: the source is whole again. */
  f.kind = MoveKind::kImport;
  f.status = MoveStatus::kOk;
  ImportAt(a.get(), MovePosition{0, NfId("nat")}, &f, &err);
  ASSERT_EQ(f.status, MoveStatus::kOk) << err;
  r = RunBatch(a.get(), {UdpPacket("203.0.113.5", "198.51.100.1", 53, 1000, "a")});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], UdpPacket("203.0.113.5", "10.0.0.1", 53, 1234, "a").bytes());
}

TEST(Nat, BehindAGlobalNfTheFlowDoesNotMoveAndTheSourceIsMadeWhole) {
  auto a = MakeNat(), b = MakeNat();
  auto dedup_a = MakeNf("dedup", "{}"), dedup_b = MakeNf("dedup", "{}");
  EXPECT_FALSE(dedup_a->movable());
  RunBatch(a.get(), {UdpPacket("10.0.0.1", "203.0.113.5", 1234, 53, "q")});
  std::string err;
  MoveFrame f = MoveFlow(MoveChain{{a.get(), dedup_a.get()}, {"nat", "dedup"}},
                         MoveChain{{b.get(), dedup_b.get()}, {"nat", "dedup"}},
                         TestFlow("10.0.0.1", "203.0.113.5", 1234, 53), &err);
  EXPECT_EQ(f.status, MoveStatus::kGlobal);
  EXPECT_EQ(f.failed_position, 1u);
  EXPECT_EQ(b->state().size(), 0u) << "nothing reached the destination";
  f.kind = MoveKind::kImport;
  f.status = MoveStatus::kOk;
  ImportAt(a.get(), MovePosition{0, NfId("nat")}, &f, &err);
  ImportAt(dedup_a.get(), MovePosition{1, NfId("dedup")}, &f, &err);
  ASSERT_EQ(f.status, MoveStatus::kOk) << err;
  RunResult r = RunBatch(a.get(), {UdpPacket("203.0.113.5", "198.51.100.1", 53, 1000, "a")});
  EXPECT_EQ(r.out.size(), 1u);
}

}  // namespace
}  // namespace keel
