/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keel-sojourn-bench: what measuring each packet's server sojourn costs
 * position 0 (issue 32), per packet in TSC cycles, on this machine: the
 * receive side's stamp (one store per packet into the TSC array indexed by
 * ring index, Engine::StampRx) and the transmit side's read of it plus
 * LatencyHist::RecordBurst (Engine::Egress), over bursts of 32 as the engine does
 * them, with a spread of sojourns that touches many buckets. Medians of
 * rounds. The chain_length bench shows the same cost inside whole turns
 * (its cycle kind "sojourn").
 *
 * Usage: keel-sojourn-bench [--out FILE] [--rounds N]
 */
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "keel/monitor.h"
#include "keel/sojourn.h"

namespace {

constexpr int kBurst = 32;
constexpr uint32_t kSlots = 2048; /* a chain buffer's ring: 64 bursts of 32 */
constexpr int kBurstsPerRound = 200000;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
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
      std::fprintf(stderr, "usage: keel-sojourn-bench [--out FILE] [--rounds N]\n");
      return 2;
    }
  }
  std::vector<uint64_t> rx_tsc(kSlots, 0);
  keel::LatencyHist hist;
  std::mt19937_64 rng(32);
  /* Sojourns from 1 to ~100 us at 2.6 GHz: a spread over ~8 octaves. */
  std::vector<uint64_t> jitter(4096);
  for (auto& j : jitter) j = 2600 + rng() % 260000;
  std::vector<double> stamp_cost, record_cost;
  for (int r = 0; r < rounds; r++) {
    uint64_t stamp = 0, record = 0;
    uint32_t head = 0;
    for (int b = 0; b < kBurstsPerRound; b++) {
      const uint64_t t_rx = keel::Rdtsc();
      const uint32_t first = head;
      uint64_t t0 = keel::Rdtsc();
      for (int i = 0; i < kBurst; i++) rx_tsc[(first + i) & (kSlots - 1)] = t_rx;
      uint64_t t1 = keel::Rdtsc();
      head += kBurst;
      /* Not timed: spread the sojourns, as packets of bursts received at
       * different turns would have. */
      for (int i = 0; i < kBurst; i++) rx_tsc[(first + i) & (kSlots - 1)] -= jitter[(b * kBurst + i) & 4095];
      uint64_t t2 = keel::Rdtsc();
      uint64_t stamps[kBurst];
      for (int i = 0; i < kBurst; i++) stamps[i] = rx_tsc[(first + i) & (kSlots - 1)];
      hist.RecordBurst(keel::Rdtsc(), stamps, kBurst);
      uint64_t t3 = keel::Rdtsc();
      stamp += t1 - t0;
      record += t3 - t2;
    }
    stamp_cost.push_back(static_cast<double>(stamp) / (kBurstsPerRound * double{kBurst}));
    record_cost.push_back(static_cast<double>(record) / (kBurstsPerRound * double{kBurst}));
  }
  const double s = Median(stamp_cost), rec = Median(record_cost);
  /* The rdtsc pair around each loop, per packet: the figures include it. */
  uint64_t t0 = keel::Rdtsc(), t1 = keel::Rdtsc();
  for (int i = 0; i < 1000; i++) t1 = keel::Rdtsc();
  const double rdtsc_cycles = static_cast<double>(t1 - t0) / 1000.0;
  keel::Json j = {{"method", "bursts of 32, " + std::to_string(kBurstsPerRound) + " bursts a round, " +
                                 std::to_string(rounds) + " rounds, medians; rdtsc around each loop (included)"},
                  {"tsc_hz", keel::TscHz()},
                  {"rdtsc_cycles", rdtsc_cycles},
                  {"rdtsc_per_packet_included", rdtsc_cycles / kBurst},
                  {"stamp_cycles_per_pkt", s},
                  {"record_cycles_per_pkt", rec},
                  {"total_cycles_per_pkt", s + rec},
                  {"budget_cycles_per_pkt", 10},
                  {"histogram_bytes", sizeof(keel::LatencyHist)},
                  {"packets_recorded", hist.count()}};
  std::printf("%s\n", j.dump(2).c_str());
  if (!out.empty()) std::ofstream(out) << j.dump(2) << "\n";
  return 0;
}
