/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>

#include <random>

#include "dedup/dedup_format.h"
#include "payload/payload_testing.h"

namespace keel {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

Bytes Cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Bytes Ref(uint16_t slot) { return {kDedupTokenRef, uint8_t(slot >> 8), uint8_t(slot)}; }

Bytes Literal(const Bytes& b) {
  return Cat({{kDedupTokenLiteral, uint8_t(b.size() >> 8), uint8_t(b.size())}, b});
}

Bytes Slice(const Bytes& b, size_t from, size_t n) {
  return Bytes(b.begin() + from, b.begin() + from + n);
}

TEST(Dedup, FirstSightIsOneLiteralAndRepeatShrinksToReferences) {
  auto nf = MakeNf("dedup", "{}");
  Bytes p = RandomBytes(1400, 1);
  RunResult r = RunBatch(nf.get(), {L4Packet(kProtoUdp, p), L4Packet(kProtoUdp, p)});
  ASSERT_EQ(r.out.size(), 2u);
  EXPECT_EQ(r.out[0], L4Packet(kProtoUdp, Cat({{kDedupHeaderEncoded}, Literal(p)})).bytes());
  Bytes refs = {kDedupHeaderEncoded};
  for (uint16_t i = 0; i < 21; i++) refs = Cat({refs, Ref(i)});
  Bytes second = Cat({refs, Literal(Slice(p, 21 * 64, 56))});
  EXPECT_EQ(second.size(), 123u);
  EXPECT_EQ(r.out[1], L4Packet(kProtoUdp, second).bytes());
  EXPECT_TRUE(ChecksumsValid(r.out[1]));
  EXPECT_EQ(nf->Stats(),
            Json({{"chunks_replaced", 21}, {"raw_packets", 0}, {"tailroom_drops", 0}}));
}

TEST(Dedup, FindsRepeatsWithinAPacketAndAcrossFlows) {
  auto nf = MakeNf("dedup", R"({"chunk_bytes":16})");
  Bytes a = RandomBytes(16, 2), b = RandomBytes(16, 3), tail = {1, 2, 3};
  RunResult r = RunBatch(nf.get(), {L4Packet(kProtoTcp, Cat({a, b, a, a, tail})),
                                    L4Packet(kProtoUdp, Cat({b, a}))});
  ASSERT_EQ(r.out.size(), 2u);
  EXPECT_EQ(r.out[0], L4Packet(kProtoTcp, Cat({{kDedupHeaderEncoded}, Literal(Cat({a, b})), Ref(0),
                                               Ref(0), Literal(tail)}))
                          .bytes());
  EXPECT_EQ(r.out[1], L4Packet(kProtoUdp, Cat({{kDedupHeaderEncoded}, Ref(1), Ref(0)})).bytes());
  EXPECT_TRUE(ChecksumsValid(r.out[0]));
  EXPECT_TRUE(ChecksumsValid(r.out[1]));
}

TEST(Dedup, RingForgetsTheOldestChunk) {
  auto nf = MakeNf("dedup", R"({"chunk_bytes":16,"cache_entries":2})");
  Bytes a = RandomBytes(16, 4), b = RandomBytes(16, 5), c = RandomBytes(16, 6);
  RunResult r = RunBatch(nf.get(), {L4Packet(kProtoUdp, Cat({a, b, c})),
                                    L4Packet(kProtoUdp, Cat({c, b, a}))});
  ASSERT_EQ(r.out.size(), 2u);
  /* c took a's slot 0; a comes back as a literal into slot 1, b's. */
  EXPECT_EQ(r.out[1], L4Packet(kProtoUdp, Cat({{kDedupHeaderEncoded}, Ref(0), Ref(1), Literal(a)}))
                          .bytes());
}

TEST(Dedup, SendsRawWithoutRoomForTheEncoding) {
  auto nf = MakeNf("dedup", "{}");
  Bytes p = RandomBytes(100, 7);
  Bytes in = L4Packet(kProtoUdp, p).bytes();
  RunResult r = RunTight(nf.get(), in, 3);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], L4Packet(kProtoUdp, Cat({{kDedupHeaderRaw}, p})).bytes());
  /* A raw packet leaves the cache alone: the same payload is new next time. */
  r = RunTight(nf.get(), in, 4);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], L4Packet(kProtoUdp, Cat({{kDedupHeaderEncoded}, Literal(p)})).bytes());
  r = RunTight(nf.get(), in, 0);
  EXPECT_EQ(r.out.size(), 0u);
  EXPECT_EQ(r.dropped, 1);
  EXPECT_EQ(nf->Stats(), Json({{"chunks_replaced", 0}, {"raw_packets", 1}, {"tailroom_drops", 1}}));
}

TEST(Dedup, CutsEthernetTrailer) {
  auto nf = MakeNf("dedup", "{}");
  Bytes in = L4Packet(kProtoUdp, {'h', 'i'}).bytes();
  in.resize(60, 0);
  RunResult r = RunTight(nf.get(), in, 0);
  ASSERT_EQ(r.out.size(), 1u);
  Bytes want = Cat({{kDedupHeaderEncoded}, Literal({'h', 'i'})});
  EXPECT_EQ(r.out[0], L4Packet(kProtoUdp, want).bytes());
}

TEST(Dedup, PassesPacketsWithoutPayload) {
  auto nf = MakeNf("dedup", "{}");
  L4Spec icmp;
  icmp.src_ip = "10.0.0.1";
  icmp.dst_ip = "10.0.0.2";
  icmp.proto = kProtoIcmp;
  icmp.payload = std::string(200, 'x');
  Bytes arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  Bytes full = L4Packet(kProtoTcp, RandomBytes(30, 8)).bytes();
  std::vector<Bytes> ins = {L4Packet(kProtoUdp, {}).bytes(), BuildPacket(icmp).bytes(), arp};
  for (size_t n = 0; n < full.size(); n++) ins.emplace_back(full.begin(), full.begin() + n);
  for (const Bytes& in : ins) {
    RunResult r = RunTight(nf.get(), in, 64);
    ASSERT_EQ(r.out.size(), 1u) << in.size();
    EXPECT_EQ(r.out[0], in) << in.size();
  }
}

/* 200 packets of TCP and UDP whose payloads mix fresh bytes, blocks from a
 * small pool and whole earlier payloads, pass dedup then rededup. */
void CheckRoundTrip(const std::string& config, bool expect_savings) {
  SCOPED_TRACE(config);
  auto dedup = MakeNf("dedup", config);
  auto rededup = MakeNf("rededup", config);
  std::mt19937 rng(11);
  std::vector<Bytes> pool;
  for (uint32_t i = 0; i < 40; i++) pool.push_back(RandomBytes(64 + (rng() % 3) * 32, 100 + i));
  std::vector<TestPacket> in;
  std::vector<Bytes> payloads;
  for (int i = 0; i < 200; i++) {
    Bytes p;
    if (!payloads.empty() && rng() % 4 == 0) {
      p = payloads[rng() % payloads.size()];
    } else {
      size_t want = rng() % 1401;
      while (p.size() < want) {
        Bytes part = rng() % 3 ? pool[rng() % pool.size()] : RandomBytes(1 + rng() % 80, rng());
        p.insert(p.end(), part.begin(), part.end());
      }
      p.resize(want);
    }
    payloads.push_back(p);
    in.push_back(L4Packet(rng() % 2 ? kProtoTcp : kProtoUdp, p));
  }
  size_t raw_bytes = 0, encoded_bytes = 0;
  for (size_t start = 0; start < in.size(); start += kMaxBurst) {
    std::vector<TestPacket> burst(in.begin() + start,
                                  in.begin() + std::min(in.size(), start + kMaxBurst));
    RunResult enc = RunBatch(dedup.get(), burst);
    ASSERT_EQ(enc.out.size(), burst.size());
    std::vector<TestPacket> encoded;
    for (size_t i = 0; i < burst.size(); i++) {
      EXPECT_TRUE(ChecksumsValid(enc.out[i]));
      raw_bytes += burst[i].bytes().size();
      encoded_bytes += enc.out[i].size();
      encoded.emplace_back(enc.out[i]);
    }
    RunResult dec = RunBatch(rededup.get(), encoded);
    ASSERT_EQ(dec.out.size(), burst.size());
    for (size_t i = 0; i < burst.size(); i++)
      ASSERT_EQ(dec.out[i], burst[i].bytes()) << "packet " << start + i;
  }
  EXPECT_EQ(rededup->Stats(), Json({{"malformed_drops", 0}, {"tailroom_drops", 0}}));
  if (expect_savings) {
    EXPECT_LT(encoded_bytes * 4, raw_bytes * 3);
  }
}

TEST(Dedup, RededupRestoresARandomStream) {
  CheckRoundTrip("{}", true);
  CheckRoundTrip(R"({"chunk_bytes":16})", true);
  CheckRoundTrip(R"({"chunk_bytes":100,"cache_entries":300})", false);
  CheckRoundTrip(R"({"chunk_bytes":37,"cache_entries":5})", false);
  CheckRoundTrip(R"({"chunk_bytes":512,"cache_entries":1})", false);
}

TEST(Dedup, RejectsBadConfig) {
  EXPECT_THROW_MSG(MakeNf("dedup", R"({"chunk_bytes":15})"),
                   "dedup.chunk_bytes: 15 is out of range [16, 512]");
  EXPECT_THROW_MSG(MakeNf("dedup", R"({"chunk_bytes":513})"),
                   "dedup.chunk_bytes: 513 is out of range [16, 512]");
  EXPECT_THROW_MSG(MakeNf("dedup", R"({"cache_entries":0})"),
                   "dedup.cache_entries: 0 is out of range [1, 65536]");
  EXPECT_THROW_MSG(MakeNf("dedup", R"({"cache_entries":65537})"),
                   "dedup.cache_entries: 65537 is out of range [1, 65536]");
  EXPECT_THROW_MSG(MakeNf("dedup", R"({"cache_entries":"big"})"),
                   "dedup.cache_entries: expected an integer, got string");
  EXPECT_THROW_MSG(MakeNf("dedup", R"({"window":4})"), "dedup.window: unknown field");
}

TEST(Dedup, DedupAndRededupKeepGlobalStateTheirFlowsDoNotMove) {
  for (const char* name : {"dedup", "rededup"}) {
    auto nf = MakeNf(name, "{}");
    EXPECT_FALSE(nf->movable()) << name;
    MoveFrame f;
    f.flow = f.cur = TestFlow("10.0.0.1", "10.0.0.2", 1000, 2000);
    ExportAt(nf.get(), MovePosition{2, NfId(name)}, &f);
    EXPECT_EQ(f.status, MoveStatus::kGlobal) << name;
    EXPECT_EQ(f.failed_position, 2u) << name;
    /* An import frame with records for it is refused. */
    MoveFrame in;
    in.kind = MoveKind::kImport;
    in.records.push_back(MoveRecord{2, NfId(name), StateRecord{}});
    std::string err;
    ImportAt(nf.get(), MovePosition{2, NfId(name)}, &in, &err);
    EXPECT_EQ(in.status, MoveStatus::kRefused) << name;
    EXPECT_NE(err.find("global"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace keel
