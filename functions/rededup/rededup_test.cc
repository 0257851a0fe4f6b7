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

Bytes Encoded(std::initializer_list<Bytes> tokens) {
  return Cat({{kDedupHeaderEncoded}, Cat(tokens)});
}

TEST(Rededup, ExpandsReferencesToChunksOfEarlierAndSamePackets) {
  auto nf = MakeNf("rededup", R"({"chunk_bytes":16})");
  Bytes a = RandomBytes(16, 1), b = RandomBytes(16, 2), tail = {9, 8, 7};
  RunResult r = RunBatch(nf.get(), {L4Packet(kProtoTcp, Encoded({Literal(Cat({a, b})), Ref(0),
                                                                  Literal(tail)})),
                                    L4Packet(kProtoUdp, Encoded({Ref(1), Ref(0)}))});
  ASSERT_EQ(r.out.size(), 2u);
  EXPECT_EQ(r.out[0], L4Packet(kProtoTcp, Cat({a, b, a, tail})).bytes());
  EXPECT_EQ(r.out[1], L4Packet(kProtoUdp, Cat({b, a})).bytes());
}

TEST(Rededup, StripsTheRawHeader) {
  auto nf = MakeNf("rededup", "{}");
  Bytes p = RandomBytes(50, 3);
  RunResult r = RunTight(nf.get(), L4Packet(kProtoUdp, Cat({{kDedupHeaderRaw}, p})).bytes(), 0);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], L4Packet(kProtoUdp, p).bytes());
  r = RunTight(nf.get(), L4Packet(kProtoUdp, {kDedupHeaderRaw}).bytes(), 0);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], L4Packet(kProtoUdp, {}).bytes());
}

TEST(Rededup, DropsMalformedEncodingsWithoutTouchingTheCache) {
  auto nf = MakeNf("rededup", R"({"chunk_bytes":16,"cache_entries":4})");
  Bytes a = RandomBytes(16, 4);
  const std::vector<Bytes> bad = {
      {0x02, 1, 2, 3},                                   /* unknown header */
      {0xff},                                            /* unknown header */
      Encoded({{0x03, 0, 0}}),                           /* unknown token */
      Encoded({Ref(0)}),                                 /* empty slot */
      Encoded({Literal(a), Ref(1)}),                     /* slot filled later */
      Encoded({Ref(0xffff)}),                            /* past the ring */
      Encoded({{kDedupTokenRef, 0}}),                    /* token cut short */
      Encoded({{kDedupTokenLiteral}}),                   /* token cut short */
      Encoded({{kDedupTokenLiteral, 0, 5, 1, 2, 3}}),    /* literal cut short */
      Encoded({{kDedupTokenLiteral, 0xff, 0xff}, a}),    /* literal cut short */
      Encoded({{kDedupTokenLiteral, 0, 0}}),             /* empty literal */
      Encoded({Literal({1, 2, 3}), Literal(a)}),         /* off a chunk boundary */
      Encoded({Literal({1, 2, 3}), Ref(0)}),             /* off a chunk boundary */
      Encoded({Literal(a), Literal(a), {0x07, 0, 0}}),   /* bad token after literals */
  };
  for (const Bytes& payload : bad) {
    RunResult r = RunTight(nf.get(), L4Packet(kProtoUdp, payload).bytes(), 64);
    EXPECT_EQ(r.out.size(), 0u) << payload.size();
    EXPECT_EQ(r.dropped, 1) << payload.size();
  }
  EXPECT_EQ(nf->Stats(), Json({{"malformed_drops", bad.size()}, {"tailroom_drops", 0}}));
  /* None of the literals above entered the cache. */
  EXPECT_EQ(RunTight(nf.get(), L4Packet(kProtoUdp, Encoded({Ref(0)})).bytes(), 64).dropped, 1);
}

TEST(Rededup, DropsWhatOutgrowsTheTailroomButKeepsItsChunks) {
  auto nf = MakeNf("rededup", R"({"chunk_bytes":16})");
  Bytes a = RandomBytes(16, 5);
  Bytes encoded = Encoded({Literal(a), Ref(0), Ref(0)});
  ASSERT_EQ(encoded.size(), 26u); /* restores to 48 bytes: 22 more */
  RunResult r = RunTight(nf.get(), L4Packet(kProtoUdp, encoded).bytes(), 21);
  EXPECT_EQ(r.dropped, 1);
  EXPECT_EQ(nf->Stats(), Json({{"malformed_drops", 0}, {"tailroom_drops", 1}}));
  r = RunTight(nf.get(), L4Packet(kProtoUdp, Encoded({Ref(0)})).bytes(), 12);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], L4Packet(kProtoUdp, a).bytes());
  auto fresh = MakeNf("rededup", R"({"chunk_bytes":16})");
  r = RunTight(fresh.get(), L4Packet(kProtoUdp, encoded).bytes(), 22);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], L4Packet(kProtoUdp, Cat({a, a, a})).bytes());
}

TEST(Rededup, PassesPacketsWithoutPayload) {
  auto nf = MakeNf("rededup", "{}");
  Bytes arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  Bytes full = L4Packet(kProtoTcp, Encoded({Literal(RandomBytes(64, 6))})).bytes();
  std::vector<Bytes> ins = {L4Packet(kProtoUdp, {}).bytes(), arp};
  for (size_t n = 0; n < full.size(); n++) ins.emplace_back(full.begin(), full.begin() + n);
  for (const Bytes& in : ins) {
    RunResult r = RunTight(nf.get(), in, 0);
    ASSERT_EQ(r.out.size(), 1u) << in.size();
    EXPECT_EQ(r.out[0], in) << in.size();
  }
}

TEST(Rededup, SurvivesRandomGarbage) {
  auto nf = MakeNf("rededup", R"({"chunk_bytes":16,"cache_entries":8})");
  std::mt19937 rng(7);
  int kept = 0;
  for (int i = 0; i < 2000; i++) {
    Bytes payload = RandomBytes(1 + rng() % 200, rng());
    payload[0] = uint8_t(rng() % 2 ? kDedupHeaderEncoded : rng());
    for (size_t j = 1; j < payload.size(); j++)
      if (rng() % 4 == 0) payload[j] = uint8_t(1 + rng() % 2);
    RunResult r = RunTight(nf.get(), L4Packet(kProtoUdp, payload).bytes(), uint16_t(rng() % 300));
    if (!r.out.empty()) {
      kept++;
      EXPECT_TRUE(ChecksumsValid(r.out[0]));
    }
  }
  Json stats = nf->Stats();
  EXPECT_EQ(kept + stats["malformed_drops"].get<int>() + stats["tailroom_drops"].get<int>(), 2000);
  EXPECT_GT(stats["malformed_drops"].get<int>(), 0);
}

TEST(Rededup, RejectsBadConfig) {
  EXPECT_THROW_MSG(MakeNf("rededup", R"({"chunk_bytes":8})"),
                   "rededup.chunk_bytes: 8 is out of range [16, 512]");
  EXPECT_THROW_MSG(MakeNf("rededup", R"({"cache_entries":70000})"),
                   "rededup.cache_entries: 70000 is out of range [1, 65536]");
  EXPECT_THROW_MSG(MakeNf("rededup", R"({"chunk":64})"), "rededup.chunk: unknown field");
}

}  // namespace
}  // namespace keel
