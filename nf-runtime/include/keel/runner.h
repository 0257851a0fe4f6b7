/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keel-chain's packet loop: a whole chain in one process, run to
 * completion, turn after turn, with the chain-buffer engine's steps
 * (engine.h). A turn receives a burst and runs every NF on it.
 *
 * With a chain buffer (Galleon Fig. 2), the first NF works on the NIC's
 * buffers and the engine then copies the survivors into the chain's shared
 * packet buffer, where the other NFs work in place; the egress copies them
 * back out to transmit, as a chain of keel-nf processes does in one turn of
 * each position. Without one, every NF works on the NIC's buffers. A
 * service thread, kept off the packet core, publishes the statistics
 * (stats_file.h) in the schema keel-nf's files have.
 */
#ifndef KEEL_RUNNER_H_
#define KEEL_RUNNER_H_

#include <rte_mempool.h>

#include <atomic>
#include <memory>
#include <string>

#include "keel/chain.h"
#include "keel/chain_sched.h"
#include "keel/engine.h"
#include "keel/pktbuf.h"

namespace keel {

struct RunnerOptions {
  uint16_t rx_port = 0;
  uint16_t tx_port = 0;
  int burst = kMaxBurst;          /* packets per receive burst, 1..kMaxBurst */
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

 private:
  Runner(Chain* chain, const RunnerOptions& opt) : chain_(chain), opt_(opt) {}

  Chain* chain_;
  RunnerOptions opt_;
  std::unique_ptr<PktBuf> pktbuf_;
  /* Where the loop's cycles went, by keel_cycles_kind (chain_sched.h);
   * written by the packet thread only, read by the statistics thread. */
  uint64_t cycles_[KEEL_CYCLES_KINDS] = {};
  std::unique_ptr<Engine> engine_;
  std::atomic<bool> stop_{false};
};

}  // namespace keel

#endif  // KEEL_RUNNER_H_
