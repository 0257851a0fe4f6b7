/* SPDX-License-Identifier: Apache-2.0 */
#include "limiter/limiter.h"

#include <gtest/gtest.h>

#include <cstring>

#include "testing/nf_test.h"

namespace keel {
namespace {

constexpr uint64_t kSecond = 1000ull * 1000 * 1000;

/* A limiter whose clock the test sets. */
class ManualClockLimiter : public Limiter {
 public:
  uint64_t now = 0;

 protected:
  uint64_t Now() const override { return now; }
};

std::unique_ptr<ManualClockLimiter> MakeLimiter(const std::string& config) {
  auto l = std::make_unique<ManualClockLimiter>();
  Json j = Config::ParseText(config, "limiter");
  l->Init(Config(j, "limiter"));
  return l;
}

/* A UDP frame of exactly |len| bytes (len >= 42). */
TestPacket Frame(size_t len) {
  return UdpPacket("10.0.0.1", "10.0.0.2", 1000, 2000, std::string(len - 42, 'p'));
}

int Passed(NF* nf, std::vector<TestPacket> pkts) {
  return static_cast<int>(RunBatch(nf, pkts).out.size());
}

TEST(Limiter, RejectsBadConfig) {
  EXPECT_THROW_MSG(MakeNf("limiter", R"({"burst_bytes":1500})"), "limiter.rate_bps: missing");
  EXPECT_THROW_MSG(MakeNf("limiter", R"({"rate_bps":8000})"), "limiter.burst_bytes: missing");
  EXPECT_THROW_MSG(MakeNf("limiter", R"({"rate_bps":0,"burst_bytes":1500})"),
                   "limiter.rate_bps: 0 is out of range [1, 1000000000000]");
  EXPECT_THROW_MSG(MakeNf("limiter", R"({"rate_bps":8000,"burst_bytes":-1})"),
                   "limiter.burst_bytes: -1 is out of range [1, 1000000000]");
  EXPECT_THROW_MSG(MakeNf("limiter", R"({"rate_bps":8000,"burst_bytes":1000000001})"),
                   "limiter.burst_bytes: 1000000001 is out of range [1, 1000000000]");
  EXPECT_THROW_MSG(MakeNf("limiter", R"({"rate_bps":1.5,"burst_bytes":1500})"),
                   "limiter.rate_bps: expected an integer, got 1.5");
  EXPECT_THROW_MSG(MakeNf("limiter", R"({"rate_bps":"8k","burst_bytes":1500})"),
                   "limiter.rate_bps: expected an integer, got string");
  EXPECT_THROW_MSG(MakeNf("limiter", R"({"rate_bps":8000,"burst_bytes":1500,"per_host":true})"),
                   "limiter.per_host: unknown field");
  EXPECT_THROW_MSG(MakeNf("limiter", R"({"rate_bps":8000,"burst_bytes":1500,"per_flow":1})"),
                   "limiter.per_flow: expected");
}

TEST(Limiter, DropsWhatExceedsTheBucketAndRefillsOverTime) {
  auto l = MakeLimiter(R"({"rate_bps":8000,"burst_bytes":1500})");
  RunResult r = RunBatch(l.get(), {Frame(1000), Frame(1000)});
  EXPECT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.dropped, 1);
  l->now = kSecond / 2 - 1;
  EXPECT_EQ(Passed(l.get(), {Frame(1000)}), 0); /* 500 + 499.999999 bytes */
  l->now = kSecond;
  EXPECT_EQ(Passed(l.get(), {Frame(1000)}), 1);
  EXPECT_EQ(Passed(l.get(), {Frame(500)}), 1);
  EXPECT_EQ(Passed(l.get(), {Frame(60)}), 0);
}

TEST(Limiter, PassesPacketsUnchanged) {
  auto l = MakeLimiter(R"({"rate_bps":8000,"burst_bytes":1500})");
  TestPacket pkt = Frame(100);
  RunResult r = RunBatch(l.get(), {pkt});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], pkt.bytes());
}

TEST(Limiter, CapsCreditAtTheBurst) {
  auto l = MakeLimiter(R"({"rate_bps":8000,"burst_bytes":1500})");
  l->now = 3600 * kSecond;
  EXPECT_EQ(Passed(l.get(), {Frame(500), Frame(500), Frame(500), Frame(500)}), 3);
}

TEST(Limiter, RefillsPartially) {
  auto l = MakeLimiter(R"({"rate_bps":8000,"burst_bytes":1500})");
  EXPECT_EQ(Passed(l.get(), {Frame(1500)}), 1);
  l->now = kSecond / 2;
  EXPECT_EQ(Passed(l.get(), {Frame(501), Frame(500), Frame(42)}), 1);
}

TEST(Limiter, DroppedPacketsTakeNoTokens) {
  auto l = MakeLimiter(R"({"rate_bps":8000,"burst_bytes":1000})");
  RunResult r = RunBatch(l.get(), {Frame(600), Frame(1000), Frame(400), Frame(42)});
  ASSERT_EQ(r.out.size(), 2u);
  EXPECT_EQ(r.out[0].size(), 600u);
  EXPECT_EQ(r.out[1].size(), 400u);
  EXPECT_EQ(l->Stats(), (Json{{"dropped_packets", 2}, {"dropped_bytes", 1042}}));
}

TEST(Limiter, IgnoresAClockThatGoesBack) {
  auto l = MakeLimiter(R"({"rate_bps":8000,"burst_bytes":1000})");
  l->now = 10 * kSecond;
  EXPECT_EQ(Passed(l.get(), {Frame(1000)}), 1);
  l->now = 5 * kSecond;
  EXPECT_EQ(Passed(l.get(), {Frame(100)}), 0);
  l->now = 10 * kSecond + kSecond / 10;
  EXPECT_EQ(Passed(l.get(), {Frame(100)}), 1);
}

TEST(Limiter, CountsEveryFrameByItsLength) {
  auto l = MakeLimiter(R"({"rate_bps":8000,"burst_bytes":100})");
  TestPacket arp(std::vector<uint8_t>(60, 0));
  arp.bytes()[12] = 0x08;
  arp.bytes()[13] = 0x06;
  TestPacket runt(std::vector<uint8_t>(5, 0xff));
  RunResult r = RunBatch(l.get(), {arp, runt, TestPacket(std::vector<uint8_t>(36, 1))});
  ASSERT_EQ(r.out.size(), 2u);
  EXPECT_EQ(r.out[0], arp.bytes());
  EXPECT_EQ(r.out[1], runt.bytes());
  EXPECT_EQ(l->Stats(), (Json{{"dropped_packets", 1}, {"dropped_bytes", 36}}));
}

TEST(Limiter, HighRatesDoNotOverflow) {
  auto l = MakeLimiter(R"({"rate_bps":1000000000000,"burst_bytes":1000000000})");
  l->now = 1000 * 3600 * kSecond;
  EXPECT_EQ(Passed(l.get(), {Frame(1500)}), 1);
  l->now += 1;
  EXPECT_EQ(Passed(l.get(), {Frame(1500)}), 1);
}

TEST(Limiter, RunsOnTheSteadyClock) {
  auto l = MakeNf("limiter", R"({"rate_bps":8000,"burst_bytes":1000})");
  EXPECT_EQ(Passed(l.get(), {Frame(1000), Frame(1000)}), 1);
}

TEST(Limiter, OneBucketForAllIsGlobalStateAndPerFlowBucketsMove) {
  EXPECT_FALSE(MakeNf("limiter", R"({"rate_bps":8000,"burst_bytes":1500})")->movable());
  EXPECT_TRUE(MakeNf("limiter", R"({"rate_bps":8000,"burst_bytes":1500,"per_flow":true})")->movable());
  MoveFrame f;
  f.flow = f.cur = TestFlow("10.0.0.1", "10.0.0.2", 1000, 2000);
  auto global = MakeNf("limiter", R"({"rate_bps":8000,"burst_bytes":1500})");
  ExportAt(global.get(), MovePosition{3, NfId("limiter")}, &f);
  EXPECT_EQ(f.status, MoveStatus::kGlobal);
  EXPECT_EQ(f.failed_position, 3u);
}

TEST(Limiter, PerFlowKeepsABucketForEachFlow) {
  auto l = MakeLimiter(R"({"rate_bps":8000,"burst_bytes":1500,"per_flow":true})");
  TestPacket other = UdpPacket("10.0.0.3", "10.0.0.2", 1000, 2000, std::string(958, 'p'));
  EXPECT_EQ(Passed(l.get(), {Frame(1000), Frame(1000), other}), 2) << "the second flow has a bucket of its own";
  EXPECT_EQ(l->state().size(), 2u);
  EXPECT_EQ(l->Stats()["dropped_packets"], 1);
}

TEST(Limiter, APerFlowBucketMovesWithItsTokensAndRefillsFromTheImport) {
  const char* config = R"({"rate_bps":8000,"burst_bytes":1500,"per_flow":true})"; /* 1000 B/s */
  auto a = MakeLimiter(config), b = MakeLimiter(config);
  a->state().set_mirrored(true);
  b->now = 5000 * kSecond; /* another host's clock */
  EXPECT_EQ(Passed(a.get(), {Frame(1000)}), 1); /* 500 B left */
  a->now = kSecond / 5;                          /* 700 B at the export */
  std::string err;
  MoveFrame f = MoveFlow(MoveChain{{a.get()}, {"limiter"}}, MoveChain{{b.get()}, {"limiter"}},
                         TestFlow("10.0.0.1", "10.0.0.2", 1000, 2000), &err);
  ASSERT_EQ(f.status, MoveStatus::kOk) << err;
  ASSERT_EQ(f.records.size(), 1u);
  Limiter::Bucket sent;
  std::memcpy(&sent, f.records[0].state.data, sizeof sent);
  EXPECT_EQ(sent.tokens, 700ull * 8 * kSecond) << "tokens as of the export";
  EXPECT_EQ(a->state().size(), 0u) << "the source forgot the flow";

  b->now += kSecond / 10; /* 800 B: a fresh bucket would hold 1500 */
  EXPECT_EQ(Passed(b.get(), {Frame(900)}), 0);
  EXPECT_EQ(Passed(b.get(), {Frame(800)}), 1);
  EXPECT_EQ(Passed(b.get(), {Frame(42)}), 0) << "empty";
  b->now += kSecond;
  EXPECT_EQ(Passed(b.get(), {Frame(1000)}), 1) << "refilled on the destination's clock";
}

}  // namespace
}  // namespace keel
