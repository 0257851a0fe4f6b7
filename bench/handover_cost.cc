/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keel-handover-bench: what the order-preserving handover (issue 34,
 * nf-runtime handover_rx.h) costs position 0 per packet of a flow that is
 * not in handover, in TSC cycles, over bursts of 32 as Engine::Head takes
 * them:
 *  - idle: no flow in handover (the common case): the test for the mark on
 *    every packet of the burst (HandoverRx::AnyMarked);
 *  - busy: 64 other flows in handover: each packet's 5-tuple is parsed and
 *    looked up, and it goes through the release ring (Feed + Take).
 * Medians of rounds, like keel-sojourn-bench (bench/sojourn_cost.cc).
 *
 * Usage: keel-handover-bench [--out FILE] [--rounds N]
 */
#include <rte_mbuf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "keel/config.h"
#include "keel/handover_rx.h"
#include "keel/inband.h"
#include "keel/monitor.h"
#include "keel/port.h"

namespace {

constexpr int kBurst = 32;
constexpr int kBurstsPerRound = 100000;
constexpr int kOtherFlows = 64;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/* A 64-byte UDP frame of flow |sport|; with the ingress' mark if |marked|. */
rte_mbuf* Frame(rte_mempool* pool, uint16_t sport, bool marked) {
  uint8_t f[64] = {};
  f[0] = 2;
  f[6] = 2;
  size_t off = 12;
  if (marked) {
    keel::inband::Put16(f + off, keel::inband::kTpidVlan);
    keel::inband::Put16(f + off + 2, keel::inband::kMarkVid);
    off += 4;
  }
  keel::inband::Put16(f + off, 0x0800);
  uint8_t* ip = f + off + 2;
  ip[0] = 0x45;
  ip[9] = 17;
  keel::inband::Put32(ip + 12, 0xC6120001);
  keel::inband::Put32(ip + 16, 0xC6130001);
  keel::inband::Put16(ip + 20, sport);
  keel::inband::Put16(ip + 22, 53);
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (m) std::memcpy(rte_pktmbuf_append(m, sizeof(f)), f, sizeof(f));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  int rounds = 11;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) {
      out = argv[++i];
    } else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: keel-handover-bench [--out FILE] [--rounds N]\n");
      return 2;
    }
  }
  std::string err;
  const std::string prefix = "--file-prefix=keel-handover-bench-" + std::to_string(getpid());
  if (!keel::EalInit({"keel-handover-bench", "--no-pci", "--no-huge", "-m", "64", "--log-level=error",
                      "--no-telemetry", prefix},
                     &err)) {
    std::fprintf(stderr, "keel-handover-bench: %s\n", err.c_str());
    return 1;
  }
  rte_mempool* pool = keel::MbufPool("handover_bench", 1023, 0, &err);
  if (!pool) {
    std::fprintf(stderr, "keel-handover-bench: %s\n", err.c_str());
    return 1;
  }
  rte_mbuf* burst[kBurst];
  for (int i = 0; i < kBurst; i++) burst[i] = Frame(pool, static_cast<uint16_t>(1000 + i), false);

  keel::HandoverConfig cfg;
  cfg.timeout = cfg.forget = UINT64_MAX / 2; /* nothing expires during the run */
  keel::HandoverRx rx(cfg);
  for (int f = 0; f < kOtherFlows; f++) {
    rte_mbuf* m = Frame(pool, static_cast<uint16_t>(20000 + f), true);
    rx.Feed(&m, 1, 0);
    rte_mbuf* back;
    while (rx.Take(&back, 1)) rte_pktmbuf_free(back);
  }
  if (!rx.table().active()) {
    std::fprintf(stderr, "keel-handover-bench: the other flows did not go into handover\n");
    return 1;
  }

  std::vector<double> idle_cost, busy_cost;
  uint64_t marked_seen = 0;
  for (int r = 0; r < rounds; r++) {
    uint64_t idle = 0, busy = 0;
    for (int b = 0; b < kBurstsPerRound; b++) {
      uint64_t t0 = keel::Rdtsc();
      marked_seen += keel::HandoverRx::AnyMarked(burst, kBurst);
      uint64_t t1 = keel::Rdtsc();
      rx.Feed(burst, kBurst, t1);
      const uint16_t k = rx.Take(burst, kBurst);
      uint64_t t2 = keel::Rdtsc();
      if (k != kBurst) {
        std::fprintf(stderr, "keel-handover-bench: %u of %d packets came back\n", k, kBurst);
        return 1;
      }
      idle += t1 - t0;
      busy += t2 - t1;
    }
    idle_cost.push_back(static_cast<double>(idle) / (kBurstsPerRound * double{kBurst}));
    busy_cost.push_back(static_cast<double>(busy) / (kBurstsPerRound * double{kBurst}));
  }
  uint64_t t0 = keel::Rdtsc(), t1 = keel::Rdtsc();
  for (int i = 0; i < 1000; i++) t1 = keel::Rdtsc();
  const double rdtsc_cycles = static_cast<double>(t1 - t0) / 1000.0;
  keel::Json j = {
      {"method", "bursts of 32 64-byte UDP frames (32 flows) already in memory, " + std::to_string(kBurstsPerRound) +
                     " bursts a round, " + std::to_string(rounds) + " rounds, medians; rdtsc around each loop (included)"},
      {"tsc_hz", keel::TscHz()},
      {"rdtsc_per_packet_included", rdtsc_cycles / kBurst},
      {"idle_cycles_per_pkt", Median(idle_cost)},
      {"idle_means", "no flow in handover: the test for the mark (HandoverRx::AnyMarked)"},
      {"busy_cycles_per_pkt", Median(busy_cost)},
      {"busy_means", std::to_string(kOtherFlows) + " other flows in handover: parse, lookup, release ring (Feed + Take)"},
      {"marked_seen", marked_seen},
      {"held", rx.table().count(keel::HandoverCount::kHeld)}};
  std::printf("%s\n", j.dump(2).c_str());
  if (!out.empty()) std::ofstream(out) << j.dump(2) << "\n";
  return marked_seen == 0 && rx.table().count(keel::HandoverCount::kHeld) == 0 ? 0 : 1;
}
