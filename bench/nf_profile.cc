/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keel-nfbench: cycles per packet of every NF of the library (rdtsc around
 * ProcessBatch, median of several runs) at 80 and 1500 bytes, ACL and BPF at
 * 10/100/1000 rules, and the first NF's copy into the chain buffer. Writes
 * bench/results/nf_profile.json, which the placer reads as NF profiles
 * (Lemur §3.2 profiles cost as a linear function of table size).
 */
#include <arpa/inet.h>
#include <rte_eal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "keel/monitor.h"
#include "keel/nf.h"
#include "keel/pktbuf.h"

namespace {

using keel::Json;

constexpr int kRuns = 5;
constexpr int kBatchesPerRun = 400;
constexpr int kFlows = 64;
/* ACL and BPF cache verdicts per flow; profiling them over more flows than
 * their caches hold measures the rule scan, the cost a table size adds. */
constexpr int kTableFlows = 16384;

/* A frame of |size| bytes: Ethernet, IPv4, TCP or UDP, |payload| at the start
 * of the L4 payload and filler after it. Checksums are right. */
std::vector<uint8_t> Frame(size_t size, int flow, bool tcp, const std::string& payload, int vlan = -1) {
  size_t l4h = tcp ? 20 : 8, hdr = 14 + (vlan >= 0 ? 4 : 0) + 20 + l4h;
  std::vector<uint8_t> b(std::max(size, hdr + payload.size()), 0);
  const uint8_t macs[12] = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1};
  std::memcpy(b.data(), macs, 12);
  size_t off = 12;
  auto put16 = [&](size_t at, uint16_t v) { b[at] = v >> 8; b[at + 1] = v & 0xff; };
  if (vlan >= 0) {
    put16(off, keel::kEtherTypeVlan);
    put16(off + 2, static_cast<uint16_t>(vlan));
    off += 4;
  }
  put16(off, keel::kEtherTypeIpv4);
  size_t l3 = off + 2;
  b[l3] = 0x45;
  put16(l3 + 2, static_cast<uint16_t>(b.size() - l3));
  b[l3 + 8] = 64;
  b[l3 + 9] = tcp ? keel::kProtoTcp : keel::kProtoUdp;
  uint32_t src = htonl(0xc6120000u + 1 + static_cast<uint32_t>(flow % 65000));
  uint32_t dst = htonl(0xc6130000u + 1 + static_cast<uint32_t>(flow % 8));
  std::memcpy(&b[l3 + 12], &src, 4);
  std::memcpy(&b[l3 + 16], &dst, 4);
  size_t l4 = l3 + 20;
  put16(l4, static_cast<uint16_t>(10000 + flow % 50000));
  put16(l4 + 2, tcp ? 80 : 5001);
  if (tcp)
    b[l4 + 12] = 0x50;
  else
    put16(l4 + 4, static_cast<uint16_t>(b.size() - l4));
  size_t pl = l4 + l4h;
  std::memcpy(&b[pl], payload.data(), payload.size());
  for (size_t i = pl + payload.size(); i < b.size(); i++) b[i] = static_cast<uint8_t>('a' + (i * 7 + flow) % 26);
  keel::Packet p;
  p.Reset(b.data(), 0, static_cast<uint16_t>(b.size()), static_cast<uint16_t>(b.size()));
  keel::Ipv4UpdateChecksum(p.ipv4());
  keel::L4UpdateChecksum(&p);
  return b;
}

struct Traffic {
  std::vector<std::vector<uint8_t>> frames; /* one per flow; batches cycle over them */
};

Traffic Make(size_t size, bool tcp = false, const std::string& payload = "", int vlan = -1,
             int flows = kFlows) {
  Traffic t;
  for (int f = 0; f < flows; f++) t.frames.push_back(Frame(size, f, tcp, payload, vlan));
  return t;
}

/* Median cycles per packet of |nf| over |traffic|. Packets are restored
 * before each batch (untimed), so NFs that grow or rewrite packets always
 * see the same input. */
double Measure(keel::NF* nf, const Traffic& traffic) {
  std::vector<std::vector<uint8_t>> slots(keel::kMaxBurst, std::vector<uint8_t>(keel::kSlotSize));
  keel::Packet views[keel::kMaxBurst];
  std::vector<double> runs;
  size_t next = 0;
  for (int run = 0; run < kRuns + 1; run++) {
    uint64_t cycles = 0, pkts = 0;
    for (int b = 0; b < kBatchesPerRun; b++) {
      keel::PacketBatch batch;
      for (int i = 0; i < keel::kMaxBurst; i++) {
        const auto& f = traffic.frames[next++ % traffic.frames.size()];
        std::memcpy(slots[i].data() + keel::kSlotHeadroom, f.data(), f.size());
        views[i].Reset(slots[i].data(), keel::kSlotHeadroom, static_cast<uint16_t>(f.size()),
                       static_cast<uint16_t>(keel::kSlotSize));
        batch.Add(&views[i]);
      }
      uint64_t t0 = keel::Rdtsc();
      nf->ProcessBatch(&batch);
      cycles += keel::Rdtsc() - t0;
      pkts += keel::kMaxBurst;
    }
    if (run > 0) runs.push_back(static_cast<double>(cycles) / static_cast<double>(pkts)); /* run 0 warms up */
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

/* Runs |nf| once over |in| and returns what it emits: the input of its
 * inverse (decrypt after encrypt, rededup after dedup). */
Traffic Output(keel::NF* nf, const Traffic& in) {
  Traffic out;
  for (const auto& f : in.frames) {
    std::vector<uint8_t> slot(keel::kSlotSize);
    std::memcpy(slot.data() + keel::kSlotHeadroom, f.data(), f.size());
    keel::Packet p;
    p.Reset(slot.data(), keel::kSlotHeadroom, static_cast<uint16_t>(f.size()), keel::kSlotSize);
    keel::PacketBatch batch;
    batch.Add(&p);
    nf->ProcessBatch(&batch);
    if (!p.dropped()) out.frames.emplace_back(p.data(), p.data() + p.len());
  }
  return out;
}

std::string AclRules(int n) {
  Json rules = Json::array();
  for (int i = 0; i < n - 1; i++)
    rules.push_back({{"src_ip", "198.19." + std::to_string(i / 250) + "." + std::to_string(i % 250) + "/32"},
                     {"dst_port", 1000 + i}, {"proto", "tcp"}, {"drop", true}});
  rules.push_back({{"dst_ip", "198.18.0.0/15"}, {"drop", false}});
  return Json{{"rules", rules}}.dump();
}

std::string BpfFilters(int n) {
  Json filters = Json::array();
  for (int i = 0; i < n - 1; i++)
    filters.push_back("dst host 198.19.200." + std::to_string(i % 250) + " and udp port " + std::to_string(2000 + i));
  filters.push_back("net 198.18.0.0/15");
  return Json{{"filters", filters}, {"action", "pass"}}.dump();
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path = "bench/results/nf_profile.json";
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: keel-nfbench [--out FILE]\n"
                   "Measures cycles per packet of every keel NF at 80 and 1500 bytes and writes\n"
                   "them as JSON (default %s).\n", out_path.c_str());
      return a == "--help" ? 0 : 2;
    }
  }
  std::string prefix = "--file-prefix=keel_nfbench_" + std::to_string(getpid());
  const char* eal[] = {"keel-nfbench", "--no-huge", "--no-pci", "-m", "128", "--log-level=error",
                       "--no-telemetry", prefix.c_str()};
  if (rte_eal_init(8, const_cast<char**>(eal)) < 0) {
    std::fprintf(stderr, "keel-nfbench: cannot start DPDK EAL\n");
    return 1;
  }

  const std::string key = R"("key":"000102030405060708090a0b0c0d0e0f","iv":"f0e0d0c0b0a090807060504030201000")";
  const std::string http = "GET /index.html HTTP/1.1\r\nHost: www.example.org\r\nUser-Agent: keel\r\n\r\n";
  Json blocklist = Json::array();
  for (int i = 0; i < 100; i++) blocklist.push_back("blocked" + std::to_string(i) + ".example.com/ads");
  Json backends = Json::array();
  for (int i = 0; i < 8; i++) backends.push_back("198.19.100." + std::to_string(i + 1));

  struct Case {
    std::string nf, config;
    int rules; /* 0: no table */
    bool tcp;
    std::string payload;
    int vlan;
    std::string before; /* NF whose output is this NF's input */
    std::string before_config;
  };
  std::vector<Case> cases;
  for (int n : {10, 100, 1000}) {
    cases.push_back({"acl", AclRules(n), n, false, "", -1, "", ""});
    cases.push_back({"bpf", BpfFilters(n), n, false, "", -1, "", ""});
  }
  std::string enc = "{" + key + "}";
  std::string cha = R"({"key":")" + std::string(64, '1') + R"(","nonce":")" + std::string(24, '2') + R"("})";
  cases.insert(cases.end(), {
      {"nat", R"({"external_ip":"198.18.255.1","port_range":[1024,65535]})", 0, false, "", -1, "", ""},
      {"tunnel", R"({"vlan":7})", 0, false, "", -1, "", ""},
      {"detunnel", "{}", 0, false, "", 7, "", ""},
      {"ipv4fwd", R"({"routes":[{"prefix":"198.18.0.0/15","dst_mac":"02:00:00:00:01:01","port":0},)"
                  R"({"prefix":"198.19.0.0/24","dst_mac":"02:00:00:00:01:02","port":1},)"
                  R"({"prefix":"0.0.0.0/0","dst_mac":"02:00:00:00:01:03","port":0}]})", 0, false, "", -1, "", ""},
      {"urlfilter", Json{{"blocklist", blocklist}}.dump(), 0, true, http, -1, "", ""},
      {"encrypt", enc, 0, false, "", -1, "", ""},
      {"decrypt", enc, 0, false, "", -1, "encrypt", enc},
      {"chacha", cha, 0, false, "", -1, "", ""},
      {"dedup", "{}", 0, false, "", -1, "", ""},
      {"rededup", "{}", 0, false, "", -1, "dedup", "{}"},
      {"limiter", R"({"rate_bps":1000000000000,"burst_bytes":1000000000})", 0, false, "", -1, "", ""},
      {"monitor", "{}", 0, false, "", -1, "", ""},
      {"lb", Json{{"backends", backends}}.dump(), 0, false, "", -1, "", ""},
      {"macswap", "{}", 0, false, "", -1, "", ""},
  });

  Json rows = Json::array();
  for (const Case& c : cases) {
    int flows = c.rules ? kTableFlows : kFlows;
    for (size_t size : {80, 1500}) {
      Traffic t = Make(size, c.tcp, c.payload, c.vlan, flows);
      if (!c.before.empty()) t = Output(keel::MakeNf(c.before, c.before_config).get(), t);
      auto nf = keel::MakeNf(c.nf, c.config);
      double cpp = Measure(nf.get(), t);
      Json row = {{"nf", c.nf}, {"pkt_bytes", size}, {"flows", flows},
                  {"cycles_per_pkt", std::round(cpp * 10) / 10}};
      if (c.rules) row["rules"] = c.rules;
      rows.push_back(row);
      std::printf("%-10s %5s rules %5zu B  %9.1f cycles/packet\n", c.nf.c_str(),
                  c.rules ? std::to_string(c.rules).c_str() : "-", size, cpp);
    }
  }

  /* The first NF's copy into the chain buffer (Galleon Fig. 7: 247 cycles at
   * 100 B, 467 at 1500 B, including their packet allocation). */
  std::string path = "/dev/shm/keel-nfbench-" + std::to_string(getpid());
  std::string err;
  auto buf = keel::PktBuf::Create(path, keel::kMaxBurst, &err);
  if (!buf) {
    std::fprintf(stderr, "keel-nfbench: %s\n", err.c_str());
    return 1;
  }
  for (size_t size : {100, 1500}) {
    Traffic t = Make(size);
    std::vector<double> runs;
    for (int run = 0; run < kRuns + 1; run++) {
      uint64_t cycles = 0, pkts = 0;
      for (int b = 0; b < kBatchesPerRun; b++) {
        uint64_t t0 = keel::Rdtsc();
        for (int i = 0; i < keel::kMaxBurst; i++) {
          const auto& f = t.frames[(b * keel::kMaxBurst + i) % t.frames.size()];
          buf->Push(f.data(), static_cast<uint16_t>(f.size()));
        }
        cycles += keel::Rdtsc() - t0;
        pkts += keel::kMaxBurst;
        buf->Release(buf->used());
      }
      if (run > 0) runs.push_back(static_cast<double>(cycles) / static_cast<double>(pkts));
    }
    std::sort(runs.begin(), runs.end());
    double cpp = runs[runs.size() / 2];
    rows.push_back({{"nf", "copy"}, {"pkt_bytes", size}, {"cycles_per_pkt", std::round(cpp * 10) / 10}});
    std::printf("%-10s %5s rules %5zu B  %9.1f cycles/packet\n", "copy", "-", size, cpp);
  }
  buf.reset();

  Json out = {{"tsc_hz", keel::TscHz()},
              {"method", "rdtsc around ProcessBatch of 32-packet batches cycling over |flows| "
                         "flows, median of " + std::to_string(kRuns) + " runs of " +
                         std::to_string(kBatchesPerRun) + " batches; copy: PktBuf::Push per packet"},
              {"rows", rows}};
  std::ofstream(out_path) << out.dump(2) << "\n";
  std::printf("wrote %s\n", out_path.c_str());
  rte_eal_cleanup();
  return 0;
}
