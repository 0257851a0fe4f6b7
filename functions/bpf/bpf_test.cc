/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>
#include <pcap/pcap.h>

#include <string>
#include <vector>

#include "testing/nf_test.h"

namespace keel {
namespace {

/* Runs |pkts| one by one and returns which ones came out, unchanged. */
std::vector<bool> Passed(NF* nf, const std::vector<TestPacket>& pkts) {
  std::vector<bool> out;
  for (const TestPacket& p : pkts) {
    RunResult r = RunBatch(nf, {p});
    EXPECT_EQ(r.out.size() + r.dropped, 1u);
    if (r.out.size() == 1) {
      EXPECT_EQ(r.out[0], p.bytes()) << "bpf must not modify packets";
    }
    out.push_back(r.out.size() == 1);
  }
  return out;
}

TestPacket Arp() {
  std::vector<uint8_t> b(60, 0);
  b[12] = 0x08;
  b[13] = 0x06;
  return TestPacket(b);
}

TEST(Bpf, PassKeepsPacketsMatchingAnyFilter) {
  auto nf = MakeNf("bpf", R"({"filters":["udp dst port 53","tcp port 80"]})");
  std::vector<TestPacket> pkts = {
      UdpPacket("10.0.0.1", "10.0.0.2", 1000, 53, "q"),
      TcpPacket("10.0.0.1", "10.0.0.2", 80, 1000, ""),
      UdpPacket("10.0.0.1", "10.0.0.2", 53, 1000, ""),
      TcpPacket("10.0.0.1", "10.0.0.2", 1000, 53, ""),
      Arp(),
  };
  EXPECT_EQ(Passed(nf.get(), pkts), (std::vector<bool>{true, true, false, false, false}));
}

TEST(Bpf, DropDropsPacketsMatchingAnyFilter) {
  auto nf = MakeNf("bpf", R"({"filters":["udp dst port 53","arp"],"action":"drop"})");
  std::vector<TestPacket> pkts = {
      UdpPacket("10.0.0.1", "10.0.0.2", 1000, 53, "q"),
      UdpPacket("10.0.0.1", "10.0.0.2", 1000, 54, "q"),
      Arp(),
      TcpPacket("10.0.0.1", "10.0.0.2", 1000, 53, ""),
  };
  EXPECT_EQ(Passed(nf.get(), pkts), (std::vector<bool>{false, true, false, true}));
}

/* Galleon's test NF: 200 rules "dst host 198.18.X.Y and udp port N". */
TEST(Bpf, TwoHundredHostAndPortRules) {
  Json filters = Json::array();
  auto host = [](int i) {
    return "198.18." + std::to_string(i / 100) + "." + std::to_string(i % 100);
  };
  for (int i = 0; i < 200; i++)
    filters.push_back("dst host " + host(i) + " and udp port " + std::to_string(1000 + i));
  auto drop = MakeNf("bpf", Json{{"filters", filters}, {"action", "drop"}}.dump());
  auto pass = MakeNf("bpf", Json{{"filters", filters}, {"action", "pass"}}.dump());
  std::vector<TestPacket> pkts;
  std::vector<bool> matches;
  for (int i : {0, 1, 99, 100, 150, 199}) {
    pkts.push_back(UdpPacket("10.0.0.1", host(i), 5, static_cast<uint16_t>(1000 + i), ""));
    pkts.push_back(UdpPacket("10.0.0.1", host(i), static_cast<uint16_t>(1000 + i), 5, ""));
    pkts.push_back(UdpPacket("10.0.0.1", host(i), 5, static_cast<uint16_t>(1001 + i), ""));
    pkts.push_back(UdpPacket(host(i), "10.0.0.1", 5, static_cast<uint16_t>(1000 + i), ""));
    pkts.push_back(TcpPacket("10.0.0.1", host(i), 5, static_cast<uint16_t>(1000 + i), ""));
    matches.insert(matches.end(), {true, true, false, false, false});
  }
  pkts.push_back(UdpPacket("10.0.0.1", "198.18.2.0", 5, 1200, ""));
  matches.push_back(false);
  std::vector<bool> not_matches;
  for (bool m : matches) not_matches.push_back(!m);
  EXPECT_EQ(Passed(pass.get(), pkts), matches);
  EXPECT_EQ(Passed(drop.get(), pkts), not_matches);
  /* Filters are indexed by the IPv4 destination address. */
  EXPECT_EQ(pass->Stats(),
            (Json{{"index_offset", 30}, {"index_size", 4}, {"indexed_filters", 200}}));
}

TEST(Bpf, FiltersSeeVlanTagsAndPayload) {
  auto nf = MakeNf("bpf", R"({"filters":["vlan 42 and udp","udp[8:4] = 0x47455420"]})");
  L4Spec s;
  s.src_ip = "10.0.0.1";
  s.dst_ip = "10.0.0.2";
  s.vlan = 42;
  TestPacket tagged = BuildPacket(s);
  s.vlan = 43;
  TestPacket other_tag = BuildPacket(s);
  std::vector<TestPacket> pkts = {
      tagged, other_tag,
      UdpPacket("10.0.0.1", "10.0.0.2", 1, 2, "GET /"),
      UdpPacket("10.0.0.1", "10.0.0.2", 1, 2, "PUT /"),
  };
  EXPECT_EQ(Passed(nf.get(), pkts), (std::vector<bool>{true, false, true, false}));
}

TEST(Bpf, TruncatedFramesNeverMatch) {
  TestPacket udp = UdpPacket("10.0.0.1", "10.0.0.2", 1, 2, "payload");
  std::vector<uint8_t> cut_ip(udp.bytes().begin(), udp.bytes().begin() + 14 + 12);
  std::vector<uint8_t> cut_udp(udp.bytes().begin(), udp.bytes().begin() + 14 + 20 + 1);
  std::vector<TestPacket> pkts = {TestPacket(std::vector<uint8_t>(5, 0xff)), TestPacket(cut_ip),
                                  TestPacket(cut_udp), TestPacket(std::vector<uint8_t>{0x45}), udp};
  auto pass = MakeNf("bpf", R"({"filters":["udp port 1","ether[1000] = 0"]})");
  EXPECT_EQ(Passed(pass.get(), pkts), (std::vector<bool>{false, false, false, false, true}));
  auto drop = MakeNf("bpf", R"({"filters":["udp port 1","ether[1000] = 0"],"action":"drop"})");
  EXPECT_EQ(Passed(drop.get(), pkts), (std::vector<bool>{true, true, true, true, false}));
}

TEST(Bpf, EmptyExpressionMatchesEverything) {
  auto nf = MakeNf("bpf", R"({"filters":[""],"action":"drop"})");
  RunResult r = RunBatch(nf.get(), {Arp(), UdpPacket("10.0.0.1", "10.0.0.2", 1, 2, "")});
  EXPECT_EQ(r.dropped, 2);
}

TEST(Bpf, NoFiltersMatchNothing) {
  std::vector<TestPacket> pkts = {Arp(), UdpPacket("10.0.0.1", "10.0.0.2", 1, 2, "")};
  auto pass = MakeNf("bpf", R"({"filters":[]})");
  EXPECT_EQ(Passed(pass.get(), pkts), (std::vector<bool>{false, false}));
  auto drop = MakeNf("bpf", R"({"filters":[],"action":"drop"})");
  EXPECT_EQ(Passed(drop.get(), pkts), (std::vector<bool>{true, true}));
}

/* What libpcap alone says of |filter| on |pkt|. */
bool PcapMatches(const std::string& filter, const TestPacket& pkt) {
  pcap_t* dead = pcap_open_dead(DLT_EN10MB, 65535);
  bpf_program prog;
  EXPECT_EQ(pcap_compile(dead, &prog, filter.c_str(), 1, PCAP_NETMASK_UNKNOWN), 0) << filter;
  const auto& b = pkt.bytes();
  bool m = bpf_filter(prog.bf_insns, b.data(), static_cast<u_int>(b.size()),
                      static_cast<u_int>(b.size())) != 0;
  pcap_freecode(&prog);
  pcap_close(dead);
  return m;
}

/* Filters of many shapes, alone and all together, give libpcap's verdicts;
 * several share the field the NF indexes programs by. */
TEST(Bpf, AgreesWithLibpcap) {
  std::vector<std::string> filters = {
      "dst host 10.0.0.2 and udp port 53",
      "dst host 10.0.0.2 and tcp dst port 80",
      "dst host 10.0.0.3 and not udp",
      "dst host 10.0.0.9",
      "src host 10.0.0.1 and ip[8] = 64",
      "not udp",
      "udp and not port 53",
      "tcp[tcpflags] & tcp-syn != 0",
      "ip[6:2] & 0x1fff != 0",
      "ether src 02:00:00:00:00:01 and icmp",
      "greater 100",
      "less 60",
      "net 10.0.0.0/30 and portrange 1000-2000",
      "vlan 7 and dst host 10.0.0.2",
      "ip proto 47",
      "arp",
  };
  std::vector<TestPacket> pkts;
  for (const char* dst : {"10.0.0.2", "10.0.0.3", "10.0.0.9", "10.0.1.2"}) {
    for (uint8_t proto : {kProtoUdp, kProtoTcp, kProtoIcmp, uint8_t{47}}) {
      for (uint16_t port : {53, 80, 1500}) {
        for (int vlan : {-1, 7}) {
          L4Spec s;
          s.src_ip = "10.0.0.1";
          s.dst_ip = dst;
          s.proto = proto;
          s.src_port = 999;
          s.dst_port = port;
          s.vlan = vlan;
          s.tcp_flags = port == 80 ? 0x02 : 0x10;
          s.payload = std::string(port == 1500 ? 80 : 0, 'p');
          pkts.push_back(BuildPacket(s));
        }
      }
    }
  }
  TestPacket frag = UdpPacket("10.0.0.1", "10.0.0.2", 999, 53, "");
  frag.bytes()[14 + 7] = 0x10;
  pkts.push_back(frag);
  pkts.push_back(Arp());
  pkts.push_back(TestPacket(std::vector<uint8_t>(frag.bytes().begin(), frag.bytes().begin() + 33)));

  auto all = MakeNf("bpf", Json{{"filters", filters}}.dump());
  EXPECT_GT(all->Stats()["indexed_filters"].get<int>(), 1);
  int matched = 0;
  for (const TestPacket& pkt : pkts) {
    bool any = false;
    for (const std::string& f : filters) {
      auto one = MakeNf("bpf", Json{{"filters", {f}}}.dump());
      bool want = PcapMatches(f, pkt);
      EXPECT_EQ(Passed(one.get(), {pkt}), std::vector<bool>{want}) << f;
      any |= want;
      matched += want;
    }
    EXPECT_EQ(Passed(all.get(), {pkt}), std::vector<bool>{any});
  }
  EXPECT_GT(matched, 100);
}

TEST(Bpf, ConfigErrors) {
  EXPECT_THROW_MSG(MakeNf("bpf", "{}"), "bpf.filters: missing");
  EXPECT_THROW_MSG(MakeNf("bpf", R"({"filters":"udp"})"),
                   "bpf.filters: expected an array, got string");
  EXPECT_THROW_MSG(MakeNf("bpf", R"({"filters":["udp", 5]})"),
                   "bpf.filters[1]: expected a string, got number");
  EXPECT_THROW_MSG(MakeNf("bpf", R"({"filters":["udp","udp port 70000"]})"),
                   "bpf.filters[1]: 'udp port 70000' does not compile: "
                   "illegal port number 70000 > 65535");
  EXPECT_THROW_MSG(MakeNf("bpf", R"({"filters":["udp and and"]})"),
                   "bpf.filters[0]: 'udp and and' does not compile: "
                   "can't parse filter expression: syntax error");
  EXPECT_THROW_MSG(MakeNf("bpf", R"({"filters":[],"action":"reject"})"),
                   "bpf.action: 'reject' is not pass or drop");
  EXPECT_THROW_MSG(MakeNf("bpf", R"({"filters":[],"mode":"pass"})"), "bpf.mode: unknown field");
}

}  // namespace
}  // namespace keel
