/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "testing/nf_test.h"

namespace keel {
namespace {

/* Runs |pkts| one by one and returns which ones came out. */
std::vector<bool> Passed(NF* nf, const std::vector<TestPacket>& pkts) {
  std::vector<bool> out;
  for (const TestPacket& p : pkts) {
    RunResult r = RunBatch(nf, {p});
    EXPECT_EQ(r.out.size() + r.dropped, 1u);
    if (r.out.size() == 1) {
      EXPECT_EQ(r.out[0], p.bytes()) << "acl must not modify packets";
    }
    out.push_back(r.out.size() == 1);
  }
  return out;
}

TestPacket Proto(uint8_t proto, const std::string& src, const std::string& dst) {
  L4Spec s;
  s.src_ip = src;
  s.dst_ip = dst;
  s.proto = proto;
  return BuildPacket(s);
}

TEST(Acl, FirstMatchWinsAndUnmatchedIsDropped) {
  auto nf = MakeNf("acl", R"({"rules":[
      {"dst_ip":"198.18.1.0/24","dst_port":80,"drop":true},
      {"dst_ip":"198.18.0.0/16"}]})");
  std::vector<TestPacket> pkts = {
      UdpPacket("10.0.0.1", "198.18.1.5", 1000, 80, ""),  /* rule 0: drop */
      TcpPacket("10.0.0.1", "198.18.1.5", 1000, 80, "x"),
      UdpPacket("10.0.0.1", "198.18.1.5", 1000, 81, ""),  /* rule 1: pass */
      UdpPacket("10.0.0.1", "198.18.2.1", 1000, 80, ""),  /* rule 1: pass */
      UdpPacket("10.0.0.1", "198.19.0.1", 1000, 80, ""),  /* no rule: drop */
  };
  EXPECT_EQ(Passed(nf.get(), pkts), (std::vector<bool>{false, false, true, true, false}));
}

TEST(Acl, RuleOrderDecides) {
  auto nf = MakeNf("acl", R"({"rules":[
      {"dst_ip":"198.18.0.0/16"},
      {"dst_ip":"198.18.1.0/24","dst_port":80,"drop":true}]})");
  EXPECT_EQ(Passed(nf.get(), {UdpPacket("10.0.0.1", "198.18.1.5", 1000, 80, "")}),
            std::vector<bool>{true});
}

TEST(Acl, PortRangesAreInclusive) {
  auto nf = MakeNf("acl", R"({"rules":[
      {"src_port":"5000-5001","dst_port":"1000-2000","proto":"udp"}]})");
  std::vector<TestPacket> pkts = {
      UdpPacket("10.0.0.1", "10.0.0.2", 5000, 999, ""),
      UdpPacket("10.0.0.1", "10.0.0.2", 5000, 1000, ""),
      UdpPacket("10.0.0.1", "10.0.0.2", 5001, 2000, ""),
      UdpPacket("10.0.0.1", "10.0.0.2", 5001, 2001, ""),
      UdpPacket("10.0.0.1", "10.0.0.2", 4999, 1500, ""),
      UdpPacket("10.0.0.1", "10.0.0.2", 5002, 1500, ""),
      TcpPacket("10.0.0.1", "10.0.0.2", 5000, 1500, ""), /* proto tcp */
  };
  EXPECT_EQ(Passed(nf.get(), pkts),
            (std::vector<bool>{false, true, true, false, false, false, false}));
}

TEST(Acl, PortRangesAcrossTheMiddleAndTop) {
  auto nf = MakeNf("acl", R"({"rules":[{"dst_port":"32767-32768"},{"src_port":65535}]})");
  std::vector<TestPacket> pkts = {
      UdpPacket("10.0.0.1", "10.0.0.2", 1, 32766, ""),
      UdpPacket("10.0.0.1", "10.0.0.2", 1, 32767, ""),
      UdpPacket("10.0.0.1", "10.0.0.2", 1, 32768, ""),
      UdpPacket("10.0.0.1", "10.0.0.2", 1, 32769, ""),
      UdpPacket("10.0.0.1", "10.0.0.2", 65535, 1, ""),
      UdpPacket("10.0.0.1", "10.0.0.2", 65534, 1, ""),
  };
  EXPECT_EQ(Passed(nf.get(), pkts), (std::vector<bool>{false, true, true, false, true, false}));
}

TEST(Acl, PortZeroAndFullRange) {
  auto nf = MakeNf("acl", R"({"rules":[{"dst_port":0},{"src_port":"0-65535","drop":true},{}]})");
  std::vector<TestPacket> pkts = {
      UdpPacket("10.0.0.1", "10.0.0.2", 7, 0, ""),      /* rule 0 */
      TcpPacket("10.0.0.1", "10.0.0.2", 65535, 1, ""),  /* rule 1 */
      Proto(kProtoIcmp, "10.0.0.1", "10.0.0.2"),        /* no ports: rule 2 */
  };
  EXPECT_EQ(Passed(nf.get(), pkts), (std::vector<bool>{true, false, true}));
}

TEST(Acl, ProtoNamesAndNumbers) {
  auto nf = MakeNf("acl", R"({"rules":[
      {"proto":"icmp"},{"proto":6},{"proto":"udp","dst_port":53},{"proto":47}]})");
  std::vector<TestPacket> pkts = {
      Proto(kProtoIcmp, "10.0.0.1", "10.0.0.2"),
      TcpPacket("10.0.0.1", "10.0.0.2", 1, 2, ""),
      UdpPacket("10.0.0.1", "10.0.0.2", 1, 53, ""),
      UdpPacket("10.0.0.1", "10.0.0.2", 1, 54, ""),
      Proto(47, "10.0.0.1", "10.0.0.2"),
      Proto(50, "10.0.0.1", "10.0.0.2"),
  };
  EXPECT_EQ(Passed(nf.get(), pkts), (std::vector<bool>{true, true, true, false, true, false}));
}

TEST(Acl, SourcePrefixAndSlashZero) {
  auto nf = MakeNf("acl", R"({"rules":[
      {"src_ip":"192.168.7.9","drop":true},
      {"src_ip":"192.168.0.0/16"},
      {"src_ip":"0.0.0.0/0","dst_ip":"10.1.2.3/32"}]})");
  std::vector<TestPacket> pkts = {
      UdpPacket("192.168.7.9", "1.1.1.1", 1, 2, ""),
      UdpPacket("192.168.7.10", "1.1.1.1", 1, 2, ""),
      UdpPacket("8.8.8.8", "10.1.2.3", 1, 2, ""),
      UdpPacket("8.8.8.8", "10.1.2.4", 1, 2, ""),
  };
  EXPECT_EQ(Passed(nf.get(), pkts), (std::vector<bool>{false, true, true, false}));
}

TEST(Acl, VlanTaggedPacketsAreMatched) {
  auto nf = MakeNf("acl", R"({"rules":[{"dst_ip":"10.0.0.2","dst_port":80}]})");
  L4Spec s;
  s.src_ip = "10.0.0.1";
  s.dst_ip = "10.0.0.2";
  s.dst_port = 80;
  s.vlan = 42;
  TestPacket hit = BuildPacket(s);
  s.dst_port = 81;
  TestPacket miss = BuildPacket(s);
  EXPECT_EQ(Passed(nf.get(), {hit, miss}), (std::vector<bool>{true, false}));
}

TEST(Acl, NonIpv4AndRuntFramesMatchNoRule) {
  auto nf = MakeNf("acl", R"({"rules":[{}]})");
  std::vector<uint8_t> arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  TestPacket ipv4 = UdpPacket("10.0.0.1", "10.0.0.2", 1, 2, "");
  std::vector<uint8_t> cut_ip(ipv4.bytes().begin(), ipv4.bytes().begin() + 14 + 10);
  RunResult r = RunBatch(nf.get(), {TestPacket(arp), TestPacket(std::vector<uint8_t>(5, 0)),
                                    TestPacket(cut_ip), ipv4});
  EXPECT_EQ(r.dropped, 3);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], ipv4.bytes());
}

TEST(Acl, PacketsWithoutL4HeaderFailPortRules) {
  auto nf = MakeNf("acl", R"({"rules":[{"dst_port":"0-65535"},{"proto":"udp","drop":true}]})");
  TestPacket frag = UdpPacket("10.0.0.1", "10.0.0.2", 1, 2, "abcdefgh");
  frag.bytes()[14 + 6] = 0x00; /* fragment offset 8 bytes: no UDP header */
  frag.bytes()[14 + 7] = 0x01;
  TestPacket whole = UdpPacket("10.0.0.1", "10.0.0.2", 1, 2, "abcdefgh");
  /* IPv4 says UDP but its total length leaves no room for the header. */
  std::vector<uint8_t> cut(whole.bytes().begin(), whole.bytes().begin() + 14 + 24);
  cut[14 + 2] = 0;
  cut[14 + 3] = 24;
  EXPECT_EQ(Passed(nf.get(), {frag, TestPacket(cut), whole}),
            (std::vector<bool>{false, false, true}));
}

/* With this many rules verdicts are cached per flow. Packets alike but for
 * the protocol, 256 of them, share cache slots and must not share verdicts. */
TEST(Acl, CachedVerdictsTellProtocolsApart) {
  Json rules = Json::array();
  for (int proto = 0; proto < 256; proto += 2) rules.push_back({{"proto", proto}});
  auto nf = MakeNf("acl", Json{{"rules", rules}}.dump());
  std::vector<TestPacket> pkts;
  std::vector<bool> want;
  for (int proto = 0; proto < 256; proto++) {
    L4Spec s;
    s.src_ip = "10.0.0.1";
    s.dst_ip = "10.0.0.2";
    s.proto = static_cast<uint8_t>(proto);
    pkts.push_back(BuildPacket(s));
    want.push_back(proto % 2 == 0);
  }
  EXPECT_EQ(Passed(nf.get(), pkts), want);
  std::reverse(pkts.begin(), pkts.end());
  std::reverse(want.begin(), want.end());
  EXPECT_EQ(Passed(nf.get(), pkts), want);
}

TEST(Acl, NoRulesDropsEverything) {
  auto nf = MakeNf("acl", R"({"rules":[]})");
  RunResult r = RunBatch(nf.get(), {UdpPacket("10.0.0.1", "10.0.0.2", 1, 2, "")});
  EXPECT_EQ(r.dropped, 1);
}

/* The straightforward reading of the rules, to check the NF against. */
struct RefRule {
  uint32_t src, src_len, dst, dst_len;
  int sp_lo, sp_hi, dp_lo, dp_hi; /* -1: wildcard */
  int proto;                      /* -1: wildcard */
  bool drop;
};

bool PrefixHas(uint32_t net, uint32_t len, uint32_t ip) {
  return len == 0 || (net >> (32 - len)) == (ip >> (32 - len));
}

/* The index of the first rule that matches, or -1. */
int RefMatch(const std::vector<RefRule>& rules, uint32_t src, uint32_t dst, int sp, int dp,
             int proto) {
  for (size_t i = 0; i < rules.size(); i++) {
    const RefRule& r = rules[i];
    bool ports = r.sp_lo >= 0 || r.dp_lo >= 0;
    if (!PrefixHas(r.src, r.src_len, src) || !PrefixHas(r.dst, r.dst_len, dst)) continue;
    if (r.proto >= 0 && r.proto != proto) continue;
    if (ports && proto != kProtoTcp && proto != kProtoUdp) continue;
    if (r.sp_lo >= 0 && (sp < r.sp_lo || sp > r.sp_hi)) continue;
    if (r.dp_lo >= 0 && (dp < r.dp_lo || dp > r.dp_hi)) continue;
    return static_cast<int>(i);
  }
  return -1;
}

std::string Dotted(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string(ip >> 16 & 255) + "." +
         std::to_string(ip >> 8 & 255) + "." + std::to_string(ip & 255);
}

/* 1000 random rules over a small address and port space, so that rules
 * overlap and verdicts come from all over the list. With that many rules
 * verdicts are cached; every packet is sent twice to read them too. */
TEST(Acl, ThousandRulesAgreeWithReference) {
  std::mt19937 rng(7);
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  auto addr = [&]() { return Ip("198.18.0.0") | pick(4) << 8 | pick(8); };
  /* Ports near 0, near the sign bit of a 16-bit lane and near 65535. */
  auto port = [&]() { return std::vector<int>{0, 32766, 65530}[pick(3)] + pick(6); };
  std::vector<RefRule> rules;
  Json jrules = Json::array();
  for (int i = 0; i < 1000; i++) {
    RefRule r{};
    Json j = Json::object();
    r.sp_lo = r.dp_lo = r.proto = -1;
    r.src_len = r.dst_len = 0;
    if (pick(8) != 0) {
      r.src = addr();
      r.src_len = 29 + pick(4);
      j["src_ip"] = Dotted(r.src) + "/" + std::to_string(r.src_len);
    }
    if (pick(8) != 0) {
      r.dst = addr();
      r.dst_len = 29 + pick(4);
      j["dst_ip"] = Dotted(r.dst) + "/" + std::to_string(r.dst_len);
    }
    if (pick(3) == 0) {
      r.proto = std::vector<int>{kProtoTcp, kProtoUdp, kProtoIcmp}[pick(3)];
      j["proto"] = r.proto;
    }
    bool l4 = r.proto == -1 || r.proto == kProtoTcp || r.proto == kProtoUdp;
    if (l4 && pick(3) == 0) {
      r.sp_lo = port();
      r.sp_hi = std::min(65535, r.sp_lo + pick(4));
      j["src_port"] = std::to_string(r.sp_lo) + "-" + std::to_string(r.sp_hi);
    }
    if (l4 && pick(2) == 0) {
      r.dp_lo = port();
      r.dp_hi = pick(8) == 0 ? 65535 : r.dp_lo;
      j["dst_port"] = std::to_string(r.dp_lo) + "-" + std::to_string(r.dp_hi);
    }
    r.drop = pick(2) == 0;
    j["drop"] = r.drop;
    rules.push_back(r);
    jrules.push_back(j);
  }
  auto nf = MakeNf("acl", Json{{"rules", jrules}}.dump());
  std::vector<TestPacket> pkts;
  std::vector<bool> want;
  std::set<int> matched;
  for (int i = 0; i < 2000; i++) {
    L4Spec s;
    uint32_t src = addr(), dst = addr();
    s.src_ip = Dotted(src);
    s.dst_ip = Dotted(dst);
    s.proto = std::vector<uint8_t>{kProtoTcp, kProtoUdp, kProtoIcmp}[pick(3)];
    s.src_port = static_cast<uint16_t>(port());
    s.dst_port = static_cast<uint16_t>(port());
    bool l4 = s.proto != kProtoIcmp;
    pkts.push_back(BuildPacket(s));
    int m = RefMatch(rules, src, dst, l4 ? s.src_port : -1, l4 ? s.dst_port : -1, s.proto);
    want.push_back(m >= 0 && !rules[m].drop);
    matched.insert(m);
  }
  int passed = 0;
  for (int round = 0; round < 2; round++) {
    std::vector<bool> got = Passed(nf.get(), pkts);
    for (size_t i = 0; i < pkts.size(); i++) {
      ASSERT_EQ(got[i], want[i]) << "packet " << i << " round " << round;
      passed += got[i];
    }
  }
  /* Verdicts come from many rules deep into the list, and both occur. */
  EXPECT_GT(matched.size(), 50u);
  EXPECT_GT(*matched.rbegin(), 300);
  EXPECT_GT(passed, 1000);
  EXPECT_LT(passed, 3000);
}

TEST(Acl, ConfigErrors) {
  EXPECT_THROW_MSG(MakeNf("acl", "{}"), "acl.rules: missing");
  EXPECT_THROW_MSG(MakeNf("acl", R"({"rules":{}})"), "acl.rules: expected an array, got object");
  EXPECT_THROW_MSG(MakeNf("acl", R"({"rules":[], "x":1})"), "acl.x: unknown field");
  EXPECT_THROW_MSG(MakeNf("acl", R"({"rules":[{"dport":80}]})"),
                   "acl.rules[0].dport: unknown field");
  EXPECT_THROW_MSG(MakeNf("acl", R"({"rules":[{},{"dst_ip":"1.2.3.4/40"}]})"),
                   "acl.rules[1].dst_ip: '1.2.3.4/40' is not an IPv4 CIDR");
  EXPECT_THROW_MSG(MakeNf("acl", R"({"rules":[{"src_ip":"1.2.3"}]})"),
                   "acl.rules[0].src_ip: '1.2.3' is not an IPv4 CIDR");
  EXPECT_THROW_MSG(MakeNf("acl", R"({"rules":[{"dst_port":"2000-1000"}]})"),
                   "acl.rules[0].dst_port: '2000-1000' is not a port range");
  EXPECT_THROW_MSG(MakeNf("acl", R"({"rules":[{"src_port":70000}]})"),
                   "acl.rules[0].src_port: 70000 is out of range [0, 65535]");
  EXPECT_THROW_MSG(MakeNf("acl", R"({"rules":[{"proto":"gre"}]})"),
                   "acl.rules[0].proto: 'gre' is not tcp, udp, icmp or a protocol number");
  EXPECT_THROW_MSG(MakeNf("acl", R"({"rules":[{"proto":256}]})"),
                   "acl.rules[0].proto: 256 is out of range [0, 255]");
  EXPECT_THROW_MSG(MakeNf("acl", R"({"rules":[{"proto":true}]})"),
                   "acl.rules[0].proto: expected \"tcp\", \"udp\", \"icmp\" or a protocol "
                   "number 0-255");
  EXPECT_THROW_MSG(MakeNf("acl", R"({"rules":[{"proto":"icmp","dst_port":1}]})"),
                   "acl.rules[0].proto: port fields need proto tcp or udp, got 1");
  EXPECT_THROW_MSG(MakeNf("acl", R"({"rules":[{"drop":"yes"}]})"),
                   "acl.rules[0].drop: expected true or false, got string");
}

}  // namespace
}  // namespace keel
