/* SPDX-License-Identifier: Apache-2.0 */
/* The library NFs the fuzz harnesses drive, each with a configuration it
 * accepts (as functions/testing/catalog_test.cc has them). */
#ifndef KEEL_TESTS_FUZZ_FUZZ_NFS_H_
#define KEEL_TESTS_FUZZ_FUZZ_NFS_H_

#include <rte_eal.h>
#include <unistd.h>

#include <map>
#include <string>

namespace keel::fuzz {

inline const std::map<std::string, std::string>& NfConfigs() {
  static const std::map<std::string, std::string> configs = {
      {"acl", R"({"rules":[{"dst_ip":"198.18.0.0/15","proto":"udp","dst_port":"1-1024","drop":true},
                          {"src_ip":"10.0.0.0/8","proto":"tcp","drop":false}]})"},
      {"bpf", R"({"filters":["udp port 53","tcp and dst port 80"],"action":"drop"})"},
      {"chacha", R"({"key":")" + std::string(64, 'a') + R"(","nonce":")" + std::string(24, '0') + "\"}"},
      {"decrypt", R"({"key":"000102030405060708090a0b0c0d0e0f","iv":"000102030405060708090a0b0c0d0e0f"})"},
      {"dedup", R"({"chunk_bytes":64})"},
      {"detunnel", "{}"},
      {"encrypt", R"({"key":"000102030405060708090a0b0c0d0e0f","iv":"000102030405060708090a0b0c0d0e0f"})"},
      {"ipv4fwd", R"({"routes":[{"prefix":"198.18.0.0/15","dst_mac":"02:00:00:00:00:01","port":0},
                              {"prefix":"0.0.0.0/0","dst_mac":"02:00:00:00:00:02","port":1}]})"},
      {"lb", R"({"backends":["198.18.0.1","198.18.0.2"]})"},
      {"limiter", R"({"rate_bps":1000000,"burst_bytes":15000})"},
      {"macswap", "{}"},
      {"monitor", "{}"},
      {"nat", R"({"external_ip":"198.18.100.1","port_range":[1024,1100]})"},
      {"rededup", R"({"cache_entries":16})"},
      {"stamp", R"({"index":3})"},
      {"tunnel", R"({"vlan":7})"},
      {"urlfilter", R"({"blocklist":["example.com/ads","tracker.net"]})"},
  };
  return configs;
}

/* Starts DPDK's EAL without devices or huge pages, once (ipv4fwd's rte_lpm
 * needs it); false if it would not start. */
inline bool StartEal() {
  static const bool ok = [] {
    char prog[] = "keel-fuzz", a1[] = "--no-huge", a2[] = "--no-pci", a3[] = "-m", a4[] = "64",
         a5[] = "--log-level=error", a6[] = "--no-telemetry", a7[] = "--in-memory";
    char* argv[] = {prog, a1, a2, a3, a4, a5, a6, a7};
    return rte_eal_init(8, argv) >= 0;
  }();
  return ok;
}

}  // namespace keel::fuzz

#endif  // KEEL_TESTS_FUZZ_FUZZ_NFS_H_
