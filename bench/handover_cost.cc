/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keel-handover-bench: what the order-preserving handover (issue 34,
 * nf-runtime handover_rx.h) costs position 0 per packet of a flow that is
 * not in handover (handed over already), in TSC cycles, over bursts of 32
 * as Engine::Head takes them: the test for the mark, the 5-tuple's parse,
 * the lookup in a table that knows 10,000 other flows, and the release ring
 * (HandoverRx::Feed + Take); and, for an instance that is not behind
 * keel-ingress (no marked frame came yet), the test for the mark alone
 * (HandoverRx::AnyMarked). Medians of rounds, like keel-sojourn-bench
 * (bench/sojourn_cost.cc).
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
constexpr int kOtherFlows = 10000;

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
  /* Every flow handed over as on the stack: its first packet via the ingress, then its marker. */
  for (int f = 0; f < kOtherFlows + kBurst; f++) {
    /* The burst's flows last: the most recently seen of their buckets, as live flows are. */
    const uint16_t sport = static_cast<uint16_t>(f < kOtherFlows ? 20000 + f : 1000 + f - kOtherFlows);
    rte_mbuf* m[2] = {Frame(pool, sport, true), rte_pktmbuf_alloc(pool)};
    const uint8_t mac[6] = {2, 0, 0, 0, 0, 1};
    keel::inband::WriteMarker(rte_pktmbuf_mtod(m[1], uint8_t*), mac, mac, {0xC6120001, 0xC6130001, sport, 53, 17}, 1);
    rte_pktmbuf_append(m[1], keel::inband::kMarkerFrameLen);
    rx.Feed(m, 2, static_cast<uint64_t>(f));
    rte_mbuf* back;
    while (rx.Take(&back, 1)) rte_pktmbuf_free(back);
  }
  if (rx.table().active() || rx.table().count(keel::HandoverCount::kMarkers) != kOtherFlows + kBurst) {
    std::fprintf(stderr, "keel-handover-bench: the flows were not handed over\n");
    return 1;
  }

  std::vector<double> cost, unarmed_cost;
  uint64_t marked_seen = 0;
  for (int r = 0; r < rounds; r++) {
    uint64_t c = 0, u = 0;
    for (int b = 0; b < kBurstsPerRound; b++) {
      uint64_t tu = keel::Rdtsc();
      marked_seen += keel::HandoverRx::AnyMarked(burst, kBurst);
      uint64_t t0 = keel::Rdtsc();
      u += t0 - tu;
      rx.Feed(burst, kBurst, t0);
      const uint16_t k = rx.Take(burst, kBurst);
      uint64_t t1 = keel::Rdtsc();
      if (k != kBurst) {
        std::fprintf(stderr, "keel-handover-bench: %u of %d packets came back\n", k, kBurst);
        return 1;
      }
      c += t1 - t0;
    }
    cost.push_back(static_cast<double>(c) / (kBurstsPerRound * double{kBurst}));
    unarmed_cost.push_back(static_cast<double>(u) / (kBurstsPerRound * double{kBurst}));
  }
  uint64_t t0 = keel::Rdtsc(), t1 = keel::Rdtsc();
  for (int i = 0; i < 1000; i++) t1 = keel::Rdtsc();
  const double rdtsc_cycles = static_cast<double>(t1 - t0) / 1000.0;
  keel::Json j = {
      {"method", "bursts of 32 64-byte UDP frames (32 flows) already in memory, " + std::to_string(kBurstsPerRound) +
                     " bursts a round, " + std::to_string(rounds) + " rounds, medians; rdtsc around each loop (included)"},
      {"tsc_hz", keel::TscHz()},
      {"rdtsc_per_packet_included", rdtsc_cycles / kBurst},
      {"flows_known", kOtherFlows + kBurst},
      {"cycles_per_pkt", Median(cost)},
      {"cycles_per_pkt_min_round", *std::min_element(cost.begin(), cost.end())},
      {"cycles_per_pkt_max_round", *std::max_element(cost.begin(), cost.end())},
      {"means", "a packet of a flow handed over already: mark test, 5-tuple parse, lookup, release ring (Feed + Take)"},
      {"not_behind_ingress_cycles_per_pkt", Median(unarmed_cost)},
      {"not_behind_ingress_means", "no marked frame came yet: the test for the mark alone (HandoverRx::AnyMarked)"},
      {"held", rx.table().count(keel::HandoverCount::kHeld)}};
  std::printf("%s\n", j.dump(2).c_str());
  if (!out.empty()) std::ofstream(out) << j.dump(2) << "\n";
  return marked_seen == 0 && rx.table().count(keel::HandoverCount::kHeld) == 0 ? 0 : 1;
}
