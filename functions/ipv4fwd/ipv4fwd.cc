/* SPDX-License-Identifier: Apache-2.0 */
/*
 * IPv4Fwd: IPv4 forwarding by longest-prefix match (DPDK rte_lpm). The
 * matching route sets the destination MAC and counts the packet on its
 * output port; the TTL is decremented. Packets with no route or an incoming
 * TTL <= 1, and non-IPv4 frames, are dropped.
 */
#include <rte_errno.h>
#include <rte_lpm.h>
#include <rte_memory.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "keel/nf.h"

namespace keel {

class Ipv4Fwd : public NF {
 public:
  ~Ipv4Fwd() override {
    if (lpm_) rte_lpm_free(lpm_);
  }

  void Init(const Config& config) override {
    config.CheckObject({"routes"});
    std::vector<Config> routes = config["routes"].Array();
    std::vector<Ipv4Prefix> prefixes;
    std::map<std::pair<uint32_t, uint8_t>, std::string> seen;
    std::map<uint16_t, uint32_t> port_index;
    for (const Config& r : routes) {
      r.CheckObject({"prefix", "dst_mac", "port"});
      Ipv4Prefix prefix = r["prefix"].Cidr();
      Route route;
      r["dst_mac"].Mac(route.mac);
      uint16_t port = static_cast<uint16_t>(r["port"].Int(0, 65535));
      auto [it, fresh] = seen.emplace(std::make_pair(prefix.addr, prefix.len), r.path());
      if (!fresh) r["prefix"].Fail("'" + r["prefix"].String() + "' is already routed by " + it->second);
      auto [pit, new_port] = port_index.emplace(port, static_cast<uint32_t>(ports_.size()));
      if (new_port) ports_.push_back(port);
      route.counter = pit->second;
      routes_.push_back(route);
      prefixes.push_back(prefix);
    }
    port_packets_.assign(ports_.size(), 0);
    CreateTable(config, prefixes);
  }

  void ProcessBatch(PacketBatch* batch) override {
    Packet* pkts[kMaxBurst];
    uint32_t dsts[kMaxBurst];
    uint32_t hops[kMaxBurst];
    unsigned n = 0;
    for (Packet* p : *batch) {
      Ipv4Hdr* ip = p->ipv4();
      if (!ip) {
        p->Drop();
        continue;
      }
      if (ip->ttl <= 1) {
        ttl_drops_++;
        p->Drop();
        continue;
      }
      pkts[n] = p;
      dsts[n] = ntohl(ip->dst);
      n++;
    }
    if (n == 0) return;
    rte_lpm_lookup_bulk(lpm_, dsts, hops, n);
    for (unsigned i = 0; i < n; i++) {
      uint32_t hop = hops[i] & RTE_LPM_LOOKUP_SUCCESS ? hops[i] & 0x00ffffff : default_route_;
      if (hop == kNoRoute) {
        no_route_drops_++;
        pkts[i]->Drop();
        continue;
      }
      const Route& route = routes_[hop];
      std::memcpy(pkts[i]->eth()->dst, route.mac, sizeof(route.mac));
      Ipv4Hdr* ip = pkts[i]->ipv4();
      uint16_t old_word, new_word; /* TTL and protocol share a checksum word */
      std::memcpy(&old_word, &ip->ttl, 2);
      ip->ttl--;
      std::memcpy(&new_word, &ip->ttl, 2);
      ChecksumReplace16(&ip->checksum, old_word, new_word);
      port_packets_[route.counter]++;
    }
  }

  Json Stats() const override {
    Json ports = Json::object();
    for (size_t i = 0; i < ports_.size(); i++) ports[std::to_string(ports_[i])] = port_packets_[i];
    return Json{{"port_packets", ports},
                {"no_route_drops", no_route_drops_},
                {"ttl_drops", ttl_drops_}};
  }

 private:
  struct Route {
    uint8_t mac[6];
    uint32_t counter; /* index into port_packets_ */
  };

  static constexpr uint32_t kNoRoute = ~uint32_t{0};

  /* Builds the LPM table; a /0 route becomes the default route (rte_lpm
   * takes depths 1..32 only). Route indices are the next hops. */
  void CreateTable(const Config& config, const std::vector<Ipv4Prefix>& prefixes) {
    static std::atomic<uint32_t> instances{0};
    std::string name = "ipv4fwd_" + std::to_string(instances++);
    rte_lpm_config lc{};
    lc.max_rules = static_cast<uint32_t>(prefixes.size()) + 16;
    lc.number_tbl8s = 1;
    for (const Ipv4Prefix& p : prefixes) lc.number_tbl8s += p.len > 24;
    lpm_ = rte_lpm_create(name.c_str(), SOCKET_ID_ANY, &lc);
    if (!lpm_) config.Fail("cannot create the LPM table: " + std::string(rte_strerror(rte_errno)));
    for (uint32_t i = 0; i < prefixes.size(); i++) {
      if (prefixes[i].len == 0) {
        default_route_ = i;
        continue;
      }
      int rc = rte_lpm_add(lpm_, prefixes[i].addr, prefixes[i].len, i);
      if (rc < 0)
        config.Fail("cannot add route " + std::to_string(i) + ": " + std::string(rte_strerror(-rc)));
    }
  }

  rte_lpm* lpm_ = nullptr;
  std::vector<Route> routes_;
  uint32_t default_route_ = kNoRoute;
  std::vector<uint16_t> ports_; /* distinct output ports, in order of appearance */
  std::vector<uint64_t> port_packets_;
  uint64_t no_route_drops_ = 0;
  uint64_t ttl_drops_ = 0;
};

KEEL_NF(Ipv4Fwd, "ipv4fwd", "IPv4 longest-prefix-match forwarding: sets the next hop's MAC, decrements TTL");
KEEL_NF_ARGS(Ipv4Fwd, R"json([
  {"name": "routes", "required": true, "type": "array",
   "doc": "routes; the longest matching prefix wins, packets without a route are dropped",
   "items": {"type": "object", "fields": [
     {"name": "prefix", "required": true, "type": "cidr", "doc": "destination prefix (0.0.0.0/0: default route)"},
     {"name": "dst_mac", "required": true, "type": "mac", "doc": "next hop's MAC address"},
     {"name": "port", "required": true, "type": "integer", "minimum": 0, "maximum": 65535,
      "doc": "output port, counted per port in the NF's statistics"}]}}
])json");

}  // namespace keel
