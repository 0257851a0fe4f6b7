/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The statistics file of a packet process (keel-chain, keel-nf): a service
 * thread rewrites it every interval, each time whole (written beside it,
 * then renamed over it), so a reader such as keel-agent never sees half a
 * file. The thread, named keel-stats, runs SCHED_OTHER off the packet
 * thread's core.
 */
#ifndef KEEL_STATS_FILE_H_
#define KEEL_STATS_FILE_H_

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "keel/config.h"
#include "keel/monitor.h"

namespace keel {

/* The figures of a chain's ports, as every statistics file shows them;
 * rx_queue_len is null where the PMD cannot tell. */
Json PortJson(const PortCounters& c);

/* Adds |c| to |row|[|kind|], a row of the cycle accounting (keel_cycles_kind,
 * chain_sched.h). Only the packet thread writes a row, so no locked add; the
 * statistics thread reads it. */
inline void ChargeCycles(uint64_t* row, int kind, uint64_t c) {
  __atomic_store_n(&row[kind], __atomic_load_n(&row[kind], __ATOMIC_RELAXED) + c, __ATOMIC_RELAXED);
}
/* |row| by kind, as the statistics files show it ("cycles"). */
Json CyclesJson(const uint64_t* row);

class StatsFile {
 public:
  /* Writes |report()| to |path| every |interval_ms| once started; an empty
   * |path| writes nothing. */
  StatsFile(std::string path, int interval_ms, std::function<Json()> report);
  ~StatsFile() { Stop(); }

  /* Starts the service thread. The caller is the packet thread: the service
   * thread keeps off its core, and follows it when coopsched moves it. */
  void Start();
  /* Ends the service thread (within 10 ms). */
  void Stop();
  /* Writes |j| to the file at once. */
  void Write(const Json& j) const;

 private:
  void Loop(pid_t packet_tid);

  std::string path_;
  int interval_ms_;
  std::function<Json()> report_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace keel

#endif  // KEEL_STATS_FILE_H_
