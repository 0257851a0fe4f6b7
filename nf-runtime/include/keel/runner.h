/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The packet loop of a chain run to completion in one process: receive a
 * burst, prefetch its headers, drop and count malformed packets, run the
 * NFs, transmit. A service thread, kept off the packet core, publishes the
 * statistics (stats_file.h).
 *
 * With a chain buffer (Galleon Fig. 2), the first NF works on the NIC's
 * buffers and the runtime then copies the survivors into the chain's shared
 * packet buffer, where the other NFs work in place; the egress copies them
 * back out to transmit. Without one, every NF works on the NIC's buffers.
 */
#ifndef KEEL_RUNNER_H_
#define KEEL_RUNNER_H_

#include <rte_mbuf.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "keel/chain.h"
#include "keel/chain_sched.h"
#include "keel/monitor.h"
#include "keel/pktbuf.h"
#include "keel/stats_file.h"

namespace keel {

struct RunnerOptions {
  uint16_t rx_port = 0;
  uint16_t tx_port = 0;
  int burst = kMaxBurst;          /* packets per RX burst, 1..kMaxBurst */
  int exit_when_idle_ms = 0;      /* 0: run until stopped */
  std::string pktbuf_path;        /* empty: no chain buffer */
  std::string stats_path;         /* empty: no statistics file */
  int stats_interval_ms = 1000;
};

class Runner {
 public:
  /* |chain| and |pool| outlive the runner. Returns nullptr and sets |*err|
   * if the chain buffer cannot be created. */
  static std::unique_ptr<Runner> Create(Chain* chain, rte_mempool* pool, const RunnerOptions& opt,
                                        std::string* err);

  /* Runs the packet loop on the calling thread until Stop() or the idle
   * timeout; writes the statistics file at the end. */
  void Run();
  /* Asks Run to return; safe from a signal handler. */
  void Stop() { stop_.store(true, std::memory_order_relaxed); }

  /* Everything measured so far, as written to the statistics file; the
   * NFs' own figures only once the packet loop has ended. */
  Json StatsJson() const;

 private:
  Runner(Chain* chain, rte_mempool* pool, const RunnerOptions& opt);
  /* |t| is the TSC at the start of the receive that got the burst. */
  void ProcessBurst(rte_mbuf** mbufs, int n, uint64_t t);
  void RunFromChainBuffer();
  /* The statistics with the receive rate since the last call (service thread). */
  Json PeriodicStats();

  Chain* chain_;
  rte_mempool* pool_;
  RunnerOptions opt_;
  std::unique_ptr<PktBuf> pktbuf_;
  PortCounters port_;
  bool tx_chains_ = false; /* the TX port sends multi-segment mbufs */
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  uint64_t start_tsc_ = 0;
  /* Where the loop's cycles went, by keel_cycles_kind (chain_sched.h);
   * written by the packet thread only, read by the statistics thread. */
  uint64_t cycles_[KEEL_CYCLES_KINDS] = {};
  void Charge(int kind, uint64_t c) { ChargeCycles(cycles_, kind, c); }
  std::atomic<uint64_t> end_tsc_{0};
  std::atomic<double> rx_pps_{0};
  uint64_t rate_rx_ = 0;                            /* service thread only */
  std::chrono::steady_clock::time_point rate_since_{}; /* service thread only */
};

}  // namespace keel

#endif  // KEEL_RUNNER_H_
