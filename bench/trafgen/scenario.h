/* SPDX-License-Identifier: Apache-2.0 */
/* keel-trafgen's scenario: what traffic to send per chain and what the sink
 * expects each chain to have done to it. The JSON schema is in README.md and
 * in keel-trafgen --help. */
#ifndef KEEL_TRAFGEN_SCENARIO_H_
#define KEEL_TRAFGEN_SCENARIO_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace keel::trafgen {

using Mac = std::array<uint8_t, 6>;

/* An IPv4 prefix, host byte order. */
struct Prefix {
  uint32_t net = 0;
  int len = 0;
  bool Contains(uint32_t ip) const { return len == 0 || (ip >> (32 - len)) == (net >> (32 - len)); }
  /* Usable host addresses (network and broadcast excluded below /31). */
  uint32_t Hosts() const;
  /* The |i|th usable host address, i < Hosts(). */
  uint32_t Host(uint32_t i) const;
};

/* A stretch of a chain's traffic: the bit rate goes linearly from
 * mbps_start to mbps_end; new flows open at new_flows_per_s. */
struct Phase {
  std::string name;
  double seconds = 0;
  double mbps_start = 0, mbps_end = 0;
  double new_flows_per_s = 0;
};

/* HTTP requests at the start of every packet's payload (chain 2); a
 * blocked_fraction of the flows request blocked_path instead of path. */
struct Http {
  std::string host = "example.com";
  std::string path = "/index.html";
  std::string blocked_path = "/ads/banner.gif";
  double blocked_fraction = 0;
};

/* What the chain does to a packet, as the sink checks it. Absent parts mean
 * "unchanged": no VLAN tag, the sink's MAC, the sent source address and
 * port, the sent payload. */
struct Expect {
  std::optional<uint16_t> vlan;
  std::optional<Mac> dst_mac;
  bool encrypt = false;
  std::array<uint8_t, 16> key{}, iv{};
  bool snat = false;
  uint32_t snat_ip = 0;
  uint16_t snat_port_min = 0, snat_port_max = 0;
};

struct Chain {
  std::string name;
  Prefix dst_net;
  uint8_t proto = 17;  /* 17 UDP, 6 TCP */
  uint16_t dport = 5001;
  std::vector<std::pair<uint16_t, double>> sizes;  /* L2 frame bytes, weight */
  double flow_lifetime_s = 5;
  std::vector<Phase> phases;
  std::optional<Http> http;
  Expect expect;
  double Seconds() const;
};

/* Bad frames sent at a bounded rate, each kind in turn. */
struct Malformed {
  double per_s = 0;
  uint32_t dst_ip = 0;
  std::vector<std::string> kinds;
};

struct Scenario {
  Mac src_mac{}, dst_mac{};
  uint32_t src_ip = 0;
  std::vector<Chain> chains;
  Malformed malformed;
  double Seconds() const;  /* the longest chain's phases */
};

/* Limits the scenario is checked against. */
constexpr double kMaxSeconds = 900;
constexpr double kMaxMbpsPerChain = 10000;
constexpr double kMaxNewFlowsPerS = 10000;
constexpr double kMaxMalformedPerS = 1000;
constexpr uint16_t kMinFrame = 64, kMaxFrame = 1514;
constexpr uint16_t kAesBlock = 16;

/* The malformed kinds keel-trafgen can send. */
const std::vector<std::string>& MalformedKinds();

/* Parses and checks a scenario. On error returns false with |*err| naming
 * the field (e.g. "chains[1].phases[0].mbps") and what was expected. */
bool ParseScenario(const nlohmann::json& j, Scenario* out, std::string* err);

/* Parses "a.b.c.d" (host byte order). */
bool ParseIpv4(const std::string& s, uint32_t* ip);
/* Parses "a.b.c.d/len". */
bool ParsePrefix(const std::string& s, Prefix* p);
bool ParseMac(const std::string& s, Mac* mac);
std::string Ipv4String(uint32_t ip);
std::string MacString(const Mac& mac);

/* True if |ip| is in 198.18.0.0/15, the benchmarking range (RFC 2544) that
 * keel's network rules allow tests to use. */
bool InBenchRange(uint32_t ip);

}  // namespace keel::trafgen

#endif  // KEEL_TRAFGEN_SCENARIO_H_
