/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>

#include "testing/nf_test.h"

namespace keel {
namespace {

constexpr char kRoutes[] = R"({"routes":[
  {"prefix":"10.0.0.0/8","dst_mac":"aa:00:00:00:00:08","port":1},
  {"prefix":"10.1.0.0/16","dst_mac":"aa:00:00:00:00:16","port":2},
  {"prefix":"10.1.2.128/25","dst_mac":"aa:00:00:00:00:25","port":3},
  {"prefix":"10.1.2.130","dst_mac":"aa:00:00:00:00:32","port":3}
]})";

constexpr char kWithDefault[] = R"({"routes":[
  {"prefix":"10.0.0.0/8","dst_mac":"aa:00:00:00:00:08","port":1},
  {"prefix":"0.0.0.0/0","dst_mac":"aa:00:00:00:00:00","port":0}
]})";

/* What forwarding |in| to |mac| should produce: new destination MAC, TTL
 * one lower, IPv4 checksum recomputed. */
std::vector<uint8_t> Forwarded(TestPacket in, const std::vector<uint8_t>& mac) {
  std::vector<uint8_t>& b = in.bytes();
  std::copy(mac.begin(), mac.end(), b.begin());
  Packet v = View(&b);
  v.ipv4()->ttl--;
  Ipv4UpdateChecksum(v.ipv4());
  return b;
}

std::vector<uint8_t> Mac(uint8_t last) { return {0xaa, 0, 0, 0, 0, last}; }

TestPacket ToDst(const std::string& dst, uint8_t ttl = 64) {
  L4Spec s{"192.0.2.1", dst, kProtoUdp, 1000, 2000, "data"};
  s.ttl = ttl;
  return BuildPacket(s);
}

TEST(Ipv4Fwd, RejectsBadConfig) {
  EXPECT_THROW_MSG(MakeNf("ipv4fwd", "{}"), "ipv4fwd.routes: missing");
  EXPECT_THROW_MSG(MakeNf("ipv4fwd", R"({"routes":{}})"), "ipv4fwd.routes: expected an array, got object");
  EXPECT_THROW_MSG(
      MakeNf("ipv4fwd", R"({"routes":[{"prefix":"10.0.0.0/33","dst_mac":"aa:bb:cc:dd:ee:ff","port":0}]})"),
      "ipv4fwd.routes[0].prefix: '10.0.0.0/33' is not an IPv4 CIDR");
  EXPECT_THROW_MSG(
      MakeNf("ipv4fwd", R"({"routes":[{"prefix":"10.0.0.0/8","dst_mac":"aa:bb:cc:dd:ee","port":0}]})"),
      "ipv4fwd.routes[0].dst_mac: 'aa:bb:cc:dd:ee' is not a MAC address");
  EXPECT_THROW_MSG(
      MakeNf("ipv4fwd", R"({"routes":[{"prefix":"10.0.0.0/8","dst_mac":"aa:bb:cc:dd:ee:ff","port":65536}]})"),
      "ipv4fwd.routes[0].port: 65536 is out of range [0, 65535]");
  EXPECT_THROW_MSG(
      MakeNf("ipv4fwd", R"({"routes":[{"prefix":"10.0.0.0/8","dst_mac":"aa:bb:cc:dd:ee:ff"}]})"),
      "ipv4fwd.routes[0].port: missing");
  EXPECT_THROW_MSG(
      MakeNf("ipv4fwd", R"({"routes":[{"prefix":"10.0.0.0/8","dst_mac":"aa:bb:cc:dd:ee:ff","port":1,"mtu":9000}]})"),
      "ipv4fwd.routes[0].mtu: unknown field");
  EXPECT_THROW_MSG(MakeNf("ipv4fwd", R"({"routes":[],"ecmp":true})"), "ipv4fwd.ecmp: unknown field");
  EXPECT_THROW_MSG(MakeNf("ipv4fwd", R"({"routes":[
      {"prefix":"10.0.0.0/8","dst_mac":"aa:bb:cc:dd:ee:ff","port":1},
      {"prefix":"10.9.9.9/8","dst_mac":"aa:bb:cc:dd:ee:01","port":2}]})"),
                   "ipv4fwd.routes[1].prefix: '10.9.9.9/8' is already routed by ipv4fwd.routes[0]");
}

TEST(Ipv4Fwd, PicksTheLongestPrefix) {
  auto fwd = MakeNf("ipv4fwd", kRoutes);
  std::vector<TestPacket> in = {ToDst("10.200.0.1"), ToDst("10.1.9.9"), ToDst("10.1.2.129"),
                                ToDst("10.1.2.130"), ToDst("10.1.2.127"), ToDst("10.1.2.255")};
  RunResult r = RunBatch(fwd.get(), in);
  ASSERT_EQ(r.out.size(), 6u);
  EXPECT_EQ(r.out[0], Forwarded(in[0], Mac(0x08)));
  EXPECT_EQ(r.out[1], Forwarded(in[1], Mac(0x16)));
  EXPECT_EQ(r.out[2], Forwarded(in[2], Mac(0x25)));
  EXPECT_EQ(r.out[3], Forwarded(in[3], Mac(0x32)));
  EXPECT_EQ(r.out[4], Forwarded(in[4], Mac(0x16)));
  EXPECT_EQ(r.out[5], Forwarded(in[5], Mac(0x25)));
  for (const auto& b : r.out) EXPECT_TRUE(ChecksumsValid(b));
  EXPECT_EQ(fwd->Stats(), (Json{{"port_packets", {{"1", 1}, {"2", 2}, {"3", 3}}},
                                {"no_route_drops", 0},
                                {"ttl_drops", 0}}));
}

TEST(Ipv4Fwd, DropsPacketsWithoutRoute) {
  auto fwd = MakeNf("ipv4fwd", kRoutes);
  RunResult r = RunBatch(fwd.get(), {ToDst("11.0.0.1"), ToDst("10.0.0.1"), ToDst("9.255.255.255")});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], Forwarded(ToDst("10.0.0.1"), Mac(0x08)));
  EXPECT_EQ(fwd->Stats()["no_route_drops"], 2);
}

TEST(Ipv4Fwd, UsesTheDefaultRoute) {
  auto fwd = MakeNf("ipv4fwd", kWithDefault);
  RunResult r = RunBatch(fwd.get(), {ToDst("11.0.0.1"), ToDst("10.0.0.1")});
  ASSERT_EQ(r.out.size(), 2u);
  EXPECT_EQ(r.out[0], Forwarded(ToDst("11.0.0.1"), Mac(0x00)));
  EXPECT_EQ(r.out[1], Forwarded(ToDst("10.0.0.1"), Mac(0x08)));
  EXPECT_EQ(fwd->Stats()["port_packets"], (Json{{"0", 1}, {"1", 1}}));
}

TEST(Ipv4Fwd, DropsExpiringTtl) {
  auto fwd = MakeNf("ipv4fwd", kWithDefault);
  RunResult r = RunBatch(fwd.get(), {ToDst("10.0.0.1", 0), ToDst("10.0.0.1", 1), ToDst("10.0.0.1", 2),
                                     ToDst("10.0.0.1", 255)});
  ASSERT_EQ(r.out.size(), 2u);
  EXPECT_EQ(r.out[0], Forwarded(ToDst("10.0.0.1", 2), Mac(0x08)));
  EXPECT_EQ(View(&r.out[0]).ipv4()->ttl, 1);
  EXPECT_EQ(r.out[1], Forwarded(ToDst("10.0.0.1", 255), Mac(0x08)));
  EXPECT_EQ(fwd->Stats(), (Json{{"port_packets", {{"0", 0}, {"1", 2}}},
                                {"no_route_drops", 0},
                                {"ttl_drops", 2}}));
}

TEST(Ipv4Fwd, ForwardsAFullBurst) {
  auto fwd = MakeNf("ipv4fwd", kRoutes);
  std::vector<TestPacket> in;
  for (int i = 0; i < kMaxBurst; i++)
    in.push_back(ToDst(i % 2 ? "10.1.2.200" : "10.77.0." + std::to_string(i)));
  RunResult r = RunBatch(fwd.get(), in);
  ASSERT_EQ(r.out.size(), static_cast<size_t>(kMaxBurst));
  for (int i = 0; i < kMaxBurst; i++)
    EXPECT_EQ(r.out[i], Forwarded(in[i], Mac(i % 2 ? 0x25 : 0x08))) << "packet " << i;
}

TEST(Ipv4Fwd, KeepsOtherFieldsOfTaggedAndNonUdpPackets) {
  auto fwd = MakeNf("ipv4fwd", kRoutes);
  L4Spec tagged{"192.0.2.1", "10.1.0.1", kProtoTcp, 1, 2, "tcp"};
  tagged.vlan = 42;
  L4Spec icmp{"192.0.2.1", "10.1.0.1", kProtoIcmp, 0, 0, ""};
  RunResult r = RunBatch(fwd.get(), {BuildPacket(tagged), BuildPacket(icmp)});
  ASSERT_EQ(r.out.size(), 2u);
  EXPECT_EQ(r.out[0], Forwarded(BuildPacket(tagged), Mac(0x16)));
  EXPECT_EQ(r.out[1], Forwarded(BuildPacket(icmp), Mac(0x16)));
}

TEST(Ipv4Fwd, DropsNonIpv4AndRunts) {
  auto fwd = MakeNf("ipv4fwd", kWithDefault);
  TestPacket arp = ToDst("10.0.0.1");
  arp.bytes()[12] = 0x08;
  arp.bytes()[13] = 0x06;
  std::vector<uint8_t> short_ip = ToDst("10.0.0.1").bytes();
  short_ip.resize(30);
  TestPacket bad_version = ToDst("10.0.0.1");
  bad_version.bytes()[14] = 0x65;
  RunResult r = RunBatch(fwd.get(), {arp, TestPacket(short_ip), bad_version,
                                     TestPacket(std::vector<uint8_t>(3, 0))});
  EXPECT_EQ(r.out.size(), 0u);
  EXPECT_EQ(r.dropped, 4);
  EXPECT_EQ(fwd->Stats()["port_packets"], (Json{{"0", 0}, {"1", 0}}));
}

TEST(Ipv4Fwd, WithoutRoutesDropsEverything) {
  auto fwd = MakeNf("ipv4fwd", R"({"routes":[]})");
  RunResult r = RunBatch(fwd.get(), {ToDst("10.0.0.1")});
  EXPECT_EQ(r.out.size(), 0u);
  EXPECT_EQ(fwd->Stats(), (Json{{"port_packets", Json::object()}, {"no_route_drops", 1}, {"ttl_drops", 0}}));
}

/* Each instance holds a 64 MiB table; the test EAL (-m 128) has room for
 * one at a time, so this also checks that a destroyed instance frees it. */
TEST(Ipv4Fwd, EachInstanceGetsAFreshTable) {
  for (int i = 0; i < 4; i++) {
    std::string mac = "aa:00:00:00:00:0" + std::to_string(i);
    std::string prefix = "10." + std::to_string(i) + ".0.0/16";
    auto fwd = MakeNf("ipv4fwd", R"({"routes":[{"prefix":")" + prefix + R"(","dst_mac":")" + mac +
                                     R"(","port":1}]})");
    RunResult r = RunBatch(fwd.get(), {ToDst("10." + std::to_string(i) + ".0.1"),
                                       ToDst("10." + std::to_string(i + 1) + ".0.1")});
    ASSERT_EQ(r.out.size(), 1u) << "instance " << i;
    EXPECT_EQ(r.out[0], Forwarded(ToDst("10." + std::to_string(i) + ".0.1"),
                                  Mac(static_cast<uint8_t>(i))));
  }
}

}  // namespace
}  // namespace keel
