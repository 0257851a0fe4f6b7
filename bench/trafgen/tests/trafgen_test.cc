/* SPDX-License-Identifier: Apache-2.0 */
/* keel-trafgen's pure parts: scenario validation, frames and the sink's
 * check of each chain's transformation (and that the check fails when the
 * chain did not do its job), the histogram, pacing and per-flow counts. */
#include <gtest/gtest.h>

#include <cstring>

#include "flags.h"
#include "flow_stats.h"
#include "histogram.h"
#include "packet.h"
#include "pacing.h"
#include "scenario.h"

namespace keel::trafgen {
namespace {

using nlohmann::json;

json ThreeChains() {
  return json::parse(R"({"chains": [
    {"name": "chain1", "dst_net": "198.18.1.0/24", "sizes": [[1024, 1]],
     "phases": [{"seconds": 10, "mbps": 5, "new_flows_per_s": 2}],
     "expect": {"vlan": 7, "dst_mac": "02:00:00:00:01:01"}},
    {"name": "chain2", "dst_net": "198.18.2.0/24", "proto": "tcp", "dport": 80,
     "sizes": [[512, 1]], "http": {"blocked_fraction": 0.25, "blocked_path": "/ads/x"},
     "phases": [{"seconds": 10, "mbps": [0, 5], "new_flows_per_s": 2}],
     "expect": {"encrypt": {"key": "000102030405060708090a0b0c0d0e0f",
                            "iv": "0f0e0d0c0b0a09080706050403020100"}}},
    {"name": "chain3", "dst_net": "198.18.3.0/24", "sizes": [[64, 3], [1500, 1]],
     "phases": [{"seconds": 10, "mbps": 5, "new_flows_per_s": 2}],
     "expect": {"snat": {"ip": "198.18.100.1", "ports": [1024, 65535]}}},
    {"name": "nochain", "dst_net": "198.18.9.0/25", "sizes": [[256, 1]],
     "phases": [{"seconds": 4, "mbps": 0.2, "new_flows_per_s": 0.5}]}],
   "malformed": {"per_s": 2}})");
}

Scenario Parse(const json& j) {
  Scenario sc;
  std::string err;
  EXPECT_TRUE(ParseScenario(j, &sc, &err)) << err;
  return sc;
}

std::string ParseError(const json& j) {
  Scenario sc;
  std::string err;
  EXPECT_FALSE(ParseScenario(j, &sc, &err));
  return err;
}

TEST(Scenario, ParsesTheThreeChainsAndDefaults) {
  Scenario sc = Parse(ThreeChains());
  ASSERT_EQ(sc.chains.size(), 4u);
  EXPECT_EQ(Ipv4String(sc.src_ip), "198.18.0.1");
  EXPECT_EQ(MacString(sc.dst_mac), "02:6b:65:00:00:02");
  EXPECT_EQ(*sc.chains[0].expect.vlan, 7);
  EXPECT_EQ(MacString(*sc.chains[0].expect.dst_mac), "02:00:00:00:01:01");
  EXPECT_TRUE(sc.chains[1].expect.encrypt);
  EXPECT_EQ(sc.chains[1].proto, 6);
  EXPECT_EQ(sc.chains[1].phases[0].mbps_end, 5);
  EXPECT_EQ(sc.chains[2].expect.snat_port_min, 1024);
  EXPECT_FALSE(sc.chains[3].expect.vlan.has_value());
  EXPECT_EQ(sc.malformed.kinds.size(), MalformedKinds().size());
  EXPECT_DOUBLE_EQ(sc.Seconds(), 10);
}

TEST(Scenario, ErrorsNameTheFieldAndWhatWasExpected) {
  json j = ThreeChains();
  j["chains"][0].erase("dst_net");
  EXPECT_EQ(ParseError(j).rfind("chains[0].dst_net: missing", 0), 0u) << ParseError(j);

  j = ThreeChains();
  j["chains"][1]["dst_net"] = "10.0.0.0/24";
  EXPECT_EQ(ParseError(j), "chains[1].dst_net: 10.0.0.0/24 is outside 198.18.0.0/15 (keel's network rules)");

  j = ThreeChains();
  j["chains"][2]["colour"] = "red";
  EXPECT_EQ(ParseError(j).rfind("chains[2].colour: unknown field", 0), 0u);

  j = ThreeChains();
  j["chains"][0]["phases"][0]["mbps"] = "fast";
  EXPECT_EQ(ParseError(j), "chains[0].phases[0].mbps: expected a number");

  j = ThreeChains();
  j["chains"][0]["phases"][0]["seconds"] = 901;
  EXPECT_EQ(ParseError(j).rfind("chains[0].phases[0].seconds: expected a number from", 0), 0u);

  j = ThreeChains();
  j["chains"][0]["phases"] = json::array({{{"seconds", 600}, {"mbps", 1}}, {{"seconds", 600}, {"mbps", 1}}});
  EXPECT_EQ(ParseError(j), "chains[0].phases: last 1200.0 s; at most 900.0 s");

  j = ThreeChains();
  j["chains"][1]["sizes"] = json::array({json::array({1514, 1})});  // no room for the padding
  EXPECT_EQ(ParseError(j), "chains[1].sizes[0][0]: expected an integer from 64 to 1498, got 1514");

  j = ThreeChains();
  j["chains"][3]["dst_net"] = "198.18.1.128/25";
  EXPECT_EQ(ParseError(j), "chains[3].dst_net: overlaps chain \"chain1\"'s 198.18.1.0/24");

  j = ThreeChains();
  j["chains"][0]["http"] = json::object();
  EXPECT_EQ(ParseError(j), "chains[0].http: HTTP requests need \"proto\": \"tcp\"");

  j = ThreeChains();
  j["chains"][1]["expect"]["encrypt"]["key"] = "00";
  EXPECT_EQ(ParseError(j), "chains[1].expect.encrypt.key: expected 32 hex digits (16 bytes)");

  j = ThreeChains();
  j["malformed"]["kinds"] = {"jumbo"};
  EXPECT_EQ(ParseError(j), "malformed.kinds[0]: unknown kind \"jumbo\"");

  j = ThreeChains();
  j["malformed"]["dst_ip"] = "198.18.2.9";
  EXPECT_EQ(ParseError(j).rfind("malformed.dst_ip: is in chain \"chain2\"", 0), 0u);

  EXPECT_EQ(ParseError(json::parse(R"({"chains": []})")), "chains: expected a non-empty array of chains");
}

TEST(Flags, RefuseInterfacesOutsideKeelsNames) {
  Flags f;
  std::string err;
  const char* argv[] = {"keel-trafgen", "--scenario", "s.json", "--tx-iface", "eth0"};
  EXPECT_FALSE(ParseFlags(5, const_cast<char**>(argv), &f, &err));
  EXPECT_EQ(err, "--tx-iface: \"eth0\" does not start with keel (keel's network rules)");
  const char* ok[] = {"keel-trafgen", "--scenario", "s.json", "--seed", "7", "--quiet", "--rx-netns", "keelsink2"};
  Flags g;
  EXPECT_TRUE(ParseFlags(8, const_cast<char**>(ok), &g, &err)) << err;
  EXPECT_EQ(g.seed, 7u);
  EXPECT_TRUE(g.quiet);
  const char* drain[] = {"keel-trafgen", "--scenario", "s.json", "--drain-ms", "20000"};
  EXPECT_FALSE(ParseFlags(5, const_cast<char**>(drain), &g, &err));
}

/* Frames of one flow of |chain|, as keel-trafgen sends them. */
struct Fixture {
  Scenario sc = Parse(ThreeChains());
  std::vector<FlowInfo> flows;
  uint8_t frame[kMaxFrame + 64] = {};
  uint16_t len = 0;

  FlowInfo& AddFlow(uint16_t chain, bool blocked = false) {
    FlowInfo f;
    const Chain& c = sc.chains[chain];
    f.chain = chain;
    f.tuple = {sc.src_ip, c.dst_net.Host(5), 12345, c.dport, c.proto};
    f.blocked = blocked;
    if (c.http) f.prefix = HttpRequest(*c.http, blocked);
    flows.push_back(f);
    return flows.back();
  }

  void Build(uint32_t flow, uint32_t seq, uint16_t size) {
    Stamp s{};
    s.chain = flows[flow].chain;
    s.flow = flow;
    s.seq = seq;
    s.tsc = 123456789;
    len = BuildFrame(sc, flows[flow], s, size, frame);
  }

  Check Sink(uint16_t chain, Aes128Cbc* aes = nullptr) {
    Parsed p;
    EXPECT_TRUE(ParseFrame(frame, len, &p));
    std::vector<uint8_t> scratch;
    return CheckFrame(sc.chains[chain], chain, sc.dst_mac, p, flows, aes, &scratch);
  }

  /* What Tunnel(vlan=7) -> IPv4Fwd does. */
  void TagAndRewrite(uint16_t vid, const char* mac) {
    std::memmove(frame + 16, frame + 12, len - 12);
    frame[12] = 0x81;
    frame[13] = 0x00;
    frame[14] = static_cast<uint8_t>(vid >> 8);
    frame[15] = static_cast<uint8_t>(vid);
    len += 4;
    Mac m;
    ParseMac(mac, &m);
    std::memcpy(frame, m.data(), 6);
  }

  /* What NAT does to the source (checksums aside: the sink does not read them). */
  void Snat(uint32_t ip, uint16_t port) {
    uint8_t* iph = frame + kEthHdr;
    iph[12] = static_cast<uint8_t>(ip >> 24);
    iph[13] = static_cast<uint8_t>(ip >> 16);
    iph[14] = static_cast<uint8_t>(ip >> 8);
    iph[15] = static_cast<uint8_t>(ip);
    iph[kIpHdr] = static_cast<uint8_t>(port >> 8);
    iph[kIpHdr + 1] = static_cast<uint8_t>(port);
  }

  /* What Encrypt does: the payload AES-128-CBC encrypted and padded, the IP
   * length grown. */
  void Encrypt(Aes128Cbc* aes) {
    Parsed p;
    ASSERT_TRUE(ParseFrame(frame, len, &p));
    size_t at = static_cast<size_t>(p.payload - frame);
    std::vector<uint8_t> out;
    ASSERT_TRUE(aes->Encrypt(p.payload, p.payload_len, &out));
    std::memcpy(frame + at, out.data(), out.size());
    uint16_t grow = static_cast<uint16_t>(out.size() - p.payload_len);
    len = static_cast<uint16_t>(len + grow);
    uint16_t total = static_cast<uint16_t>((frame[kEthHdr + 2] << 8 | frame[kEthHdr + 3]) + grow);
    frame[kEthHdr + 2] = static_cast<uint8_t>(total >> 8);
    frame[kEthHdr + 3] = static_cast<uint8_t>(total);
  }
};

uint16_t Sum16(const uint8_t* p, size_t n, uint32_t sum = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  if (n & 1) sum += static_cast<uint32_t>(p[n - 1] << 8);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

TEST(Frame, HasTheRequestedSizeAndValidChecksums) {
  Fixture f;
  f.AddFlow(2);
  f.Build(0, 3, 1500);
  ASSERT_EQ(f.len, 1500);
  const uint8_t* ip = f.frame + kEthHdr;
  EXPECT_EQ(Sum16(ip, kIpHdr), 0xffff);
  uint8_t pseudo[12] = {ip[12], ip[13], ip[14], ip[15], ip[16], ip[17], ip[18], ip[19], 0, 17};
  uint16_t seg = static_cast<uint16_t>(f.len - kEthHdr - kIpHdr);
  pseudo[10] = static_cast<uint8_t>(seg >> 8);
  pseudo[11] = static_cast<uint8_t>(seg);
  EXPECT_EQ(Sum16(ip + kIpHdr, seg, Sum16(pseudo, 12)), 0xffff);
  /* too small for headers and stamp: raised to the minimum */
  f.Build(0, 4, 64);
  EXPECT_EQ(f.len, 66);  // Ethernet, IPv4, UDP and the stamp
}

TEST(Chain1, TaggedAndRewrittenPasses_UntaggedFails) {
  Fixture f;
  f.AddFlow(0);
  f.Build(0, 1, 1024);
  f.TagAndRewrite(7, "02:00:00:00:01:01");
  Check c = f.Sink(0);
  EXPECT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.stamp.seq, 1u);
  EXPECT_EQ(c.compared_bytes, 1024u - 42);

  f.Build(0, 2, 1024);  // the switch did nothing
  c = f.Sink(0);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.error, "flow 0 seq 2: VLAN none, expected 7");

  f.Build(0, 3, 1024);
  f.TagAndRewrite(7, "02:6b:65:00:00:02");  // tagged, MAC not rewritten
  c = f.Sink(0);
  EXPECT_EQ(c.error, "flow 0 seq 3: dst MAC 02:6b:65:00:00:02, expected 02:00:00:00:01:01");
}

TEST(Chain2, EncryptedPayloadDecryptsToWhatWasSent_PlaintextFails) {
  Fixture f;
  f.AddFlow(1);
  f.AddFlow(1, /*blocked=*/true);
  EXPECT_EQ(f.flows[0].prefix, "GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n");
  EXPECT_EQ(f.flows[1].prefix, "GET /ads/x HTTP/1.1\r\nHost: example.com\r\n\r\n");
  const Chain& ch = f.sc.chains[1];
  Aes128Cbc nf(ch.expect.key, ch.expect.iv), sink(ch.expect.key, ch.expect.iv);
  for (uint16_t size : {64, 512, 1498}) {
    f.Build(0, 9, size);
    uint16_t sent = f.len;
    f.Encrypt(&nf);
    EXPECT_GT(f.len, sent);
    Check c = f.Sink(1, &sink);
    EXPECT_TRUE(c.ok) << c.error;
    EXPECT_EQ(c.compared_bytes, sent - 54u);
    EXPECT_EQ(c.stamp.flow, 0u);
  }
  /* the stamp follows the request: urlfilter sees the request line first */
  f.Build(1, 0, 512);
  EXPECT_EQ(std::memcmp(f.frame + 54, "GET /ads/x ", 11), 0);

  f.Build(0, 10, 512);  // not encrypted
  Check c = f.Sink(1, &sink);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.error.find("does not decrypt"), std::string::npos) << c.error;

  std::array<uint8_t, 16> other_key{};
  Aes128Cbc wrong(other_key, ch.expect.iv);
  f.Build(0, 11, 512);
  f.Encrypt(&wrong);
  c = f.Sink(1, &sink);
  EXPECT_FALSE(c.ok);
}

TEST(Chain2, ACorruptedByteIsAPayloadMismatch) {
  Fixture f;
  f.AddFlow(1);
  const Chain& ch = f.sc.chains[1];
  Aes128Cbc aes(ch.expect.key, ch.expect.iv);
  f.Build(0, 5, 512);
  f.frame[f.len - 1] ^= 1;  // last payload byte, before encryption
  f.Encrypt(&aes);
  Check c = f.Sink(1, &aes);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.error.find("payload differs from what was sent at byte 457"), std::string::npos) << c.error;
}

TEST(Chain3, NatedSourcePasses_UnnatedSourceIsATransformError) {
  Fixture f;
  f.AddFlow(2);
  f.Build(0, 1, 1024);
  f.Snat(0xc6126401, 40000);  // 198.18.100.1
  Check c = f.Sink(2);
  EXPECT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.seen_sport, 40000);

  f.Build(0, 2, 1024);  // the NAT did nothing
  c = f.Sink(2);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.error, "flow 0 seq 2: source 198.18.0.1:12345 not NATed to 198.18.100.1:1024-65535");

  f.Build(0, 3, 1024);
  f.Snat(0xc6126401, 80);  // outside the port range
  EXPECT_FALSE(f.Sink(2).ok);
}

TEST(NoChain, UnchangedPasses_AnyRewriteFails) {
  Fixture f;
  f.AddFlow(3);
  f.Build(0, 1, 256);
  EXPECT_TRUE(f.Sink(3).ok);
  f.Snat(0xc6126401, 40000);
  EXPECT_EQ(f.Sink(3).error, "flow 0 seq 1: source 198.18.100.1:40000 changed");
}

TEST(Check, AStampOfAnotherChainsFlowIsRefused) {
  Fixture f;
  f.AddFlow(0);
  f.AddFlow(3);
  f.Build(0, 1, 256);  // chain1's flow, checked as if it arrived for nochain
  Check c = f.Sink(3);
  EXPECT_FALSE(c.ok);
  EXPECT_FALSE(c.has_stamp);
}

TEST(Malformed, NoKindParsesAsAFrameAndTheMarkerIsFound) {
  Scenario sc = Parse(ThreeChains());
  for (const std::string& kind : MalformedKinds()) {
    uint8_t frame[256];
    uint16_t len = BuildMalformed(sc, kind, sc.malformed.dst_ip, frame);
    ASSERT_GE(len, kEthHdr) << kind;
    Parsed p;
    EXPECT_FALSE(ParseFrame(frame, len, &p)) << kind;
    if (kind != "truncated_ipv4") {
      EXPECT_TRUE(IsMalformedMarker(frame, len)) << kind;
    }
  }
}

TEST(Histogram, BucketsAreContiguousAndWithinOnePercent) {
  for (size_t b = 0; b + 1 < Histogram::Bucket(Histogram::kMaxNs); b++) {
    ASSERT_EQ(Histogram::BucketLow(b + 1), Histogram::BucketHigh(b) + 1) << b;
    ASSERT_LE(static_cast<double>(Histogram::BucketHigh(b) - Histogram::BucketLow(b)),
              0.01 * static_cast<double>(Histogram::BucketLow(b)) + 1)
        << b;
  }
  for (uint64_t v : {0ull, 255ull, 256ull, 1000ull, 123456ull, 9999999999ull})
    EXPECT_EQ(Histogram::Bucket(v), Histogram::Bucket(Histogram::BucketLow(Histogram::Bucket(v))));
}

TEST(Histogram, PercentilesOfAUniformSpread) {
  Histogram h;
  for (uint64_t us = 1; us <= 10000; us++) h.Record(us * 1000);
  EXPECT_NEAR(static_cast<double>(h.Quantile(0.5)), 5'000'000, 50'000);
  EXPECT_NEAR(static_cast<double>(h.Quantile(0.99)), 9'900'000, 99'000);
  EXPECT_EQ(h.Quantile(1.0), 10'000'000u);
  EXPECT_EQ(h.Max(), 10'000'000u);
  EXPECT_EQ(h.Count(), 10000u);
  Histogram one;
  one.Record(85'000);
  EXPECT_EQ(one.Quantile(0.99), 85'000u);  // never above the largest value
  one.Record(50'000'000'000ull);
  EXPECT_EQ(one.Max(), Histogram::kMaxNs);
  one.Reset();
  EXPECT_EQ(one.Quantile(0.5), 0u);
}

TEST(Pacing, GapsRampsAndPhases) {
  EXPECT_EQ(GapCycles(1000, 8, 1'000'000'000), 1'000'000u);  // 8000 bits at 8 Mbps: 1 ms
  EXPECT_EQ(GapCycles(1024, 0, 2'600'000'000), 0u);
  std::vector<Phase> ph = {{"up", 10, 0, 100, 1}, {"steady", 5, 100, 100, 0}};
  EXPECT_DOUBLE_EQ(MbpsAt(ph, 2.5), 25);
  EXPECT_DOUBLE_EQ(MbpsAt(ph, 12), 100);
  EXPECT_DOUBLE_EQ(MbpsAt(ph, 15), 0);
  EXPECT_EQ(PhaseAt(ph, 9.99), 0);
  EXPECT_EQ(PhaseAt(ph, 10), 1);
  EXPECT_EQ(PhaseAt(ph, 15), -1);
}

TEST(Pacing, ScheduleKeepsTheRateAndCatchesUpOnlySoFar) {
  Schedule s;
  s.Start(1000);
  int sent = 0;
  for (uint64_t now = 1000; now < 1000 + 100 * 50; now++)
    while (s.Due(now)) {
      sent++;
      s.Advance(100, now, 1000);
    }
  EXPECT_EQ(sent, 50);
  /* a stall of 100 gaps: at most max_lag's worth (10 gaps) goes out at once */
  uint64_t now = s.Next() + 100 * 100;
  int burst = 0;
  while (s.Due(now)) {
    burst++;
    s.Advance(100, now, 1000);
  }
  EXPECT_LE(burst, 12);
}

TEST(Pacing, PacerFollowsARampAndBoundsTheBurstAfterAStall) {
  const uint64_t hz = 1'000'000'000;  // 1 cycle = 1 ns
  Pacer p;
  p.Start(0);
  /* a ramp 0 -> 100 Mbps over 10 ms: 500 kbit in all, 1000-byte frames */
  uint64_t sent = 0;
  for (uint64_t now = 0; now < 10'000'000; now += 1000) {
    double mbps = 100.0 * static_cast<double>(now) / 10e6;
    p.Refill(now, mbps, hz, 1e6);
    while (p.CanSend(1000)) {
      p.Spend(1000);
      sent++;
    }
  }
  EXPECT_NEAR(static_cast<double>(sent), 62.5, 2);
  EXPECT_EQ(p.Wait(1000, 0, hz), UINT64_MAX);
  EXPECT_NEAR(static_cast<double>(p.Wait(1000, 8, hz)), 1'000'000, 1'000'000);  // under a frame of credit left
  /* a 1 s stall at 80 Mbps: the credit stops at the cap (1 ms = 80 kbit = 10 frames) */
  p.Refill(1'010'000'000, 80, hz, 80e3);
  int burst = 0;
  while (p.CanSend(1000)) {
    p.Spend(1000);
    burst++;
  }
  EXPECT_EQ(burst, 10);
  EXPECT_EQ(p.Wait(1000, 80, hz), 100'000u);  // 8000 bits at 80 Mbps
}

TEST(Pacing, SizeMixFollowsTheWeights) {
  SizeMix mix({{64, 7}, {576, 4}, {1500, 1}});
  EXPECT_NEAR(mix.MeanBytes(), (64 * 7 + 576 * 4 + 1500) / 12.0, 1e-9);
  std::mt19937_64 rng(1);
  int small = 0;
  for (int i = 0; i < 12000; i++) small += mix.Draw(rng) == 64;
  EXPECT_NEAR(small, 7000, 300);
}

TEST(FlowRx, CountsDuplicatesReorderingAndNatChanges) {
  FlowRx r;
  EXPECT_TRUE(r.Record(0));
  EXPECT_TRUE(r.Record(2));
  EXPECT_TRUE(r.Record(1));  // after a later one
  EXPECT_FALSE(r.Record(2));
  EXPECT_TRUE(r.Record(300));
  EXPECT_EQ(r.received, 4u);
  EXPECT_EQ(r.duplicates, 1u);
  EXPECT_EQ(r.reordered, 1u);
  EXPECT_TRUE(r.Seen(300));
  EXPECT_FALSE(r.Seen(299));
  EXPECT_TRUE(r.RecordSource(1, 2000));
  EXPECT_TRUE(r.RecordSource(1, 2000));
  EXPECT_FALSE(r.RecordSource(1, 2001));
  EXPECT_EQ(r.source_changes, 1u);
}

}  // namespace
}  // namespace keel::trafgen
