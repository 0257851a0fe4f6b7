/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Monitoring of a chain instance (Galleon §5.1): packet rate, NIC queue
 * length, cycles per batch sampled with rdtsc, and drops.
 *
 * Counters have one writer, the packet thread, which adds with plain
 * relaxed stores (no locked instructions on the packet path). Any other
 * thread may read them at any time; Snapshot() gives a consistent-enough
 * copy for rates and reports.
 */
#ifndef KEEL_MONITOR_H_
#define KEEL_MONITOR_H_

#include <pthread.h>
#include <sys/types.h>
#include <x86intrin.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace keel {

/* A counter written by one thread and read by others. */
class Counter {
 public:
  void Add(uint64_t n) { v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  void Set(uint64_t n) { v_.store(n, std::memory_order_relaxed); }
  uint64_t Get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

inline uint64_t Rdtsc() { return __rdtsc(); }

/* The TSC frequency in Hz, measured once against CLOCK_MONOTONIC. */
uint64_t TscHz();

/* Moves thread |t| to every online CPU but |core| and to SCHED_OTHER, so
 * service threads never run on the packet core (if there is another CPU).
 * The packet thread calls it right after starting |t|: a new thread inherits
 * the packet thread's core and policy, and under SCHED_FIFO it would never
 * get to run to move itself while the packet thread polls. */
void MoveOffCore(pthread_t t, int core);

/* The CPU thread |tid| is pinned to, or -1 if it may run on several. */
int PinnedCore(pid_t tid);

/* Keeps the calling service thread off the core packet thread |packet_tid|
 * is pinned to, following it when it moves (coopsched pins an NF's thread
 * after it started): when that core is no longer |*core|, moves the caller
 * with MoveOffCore and updates |*core|. */
void FollowOffCore(pid_t packet_tid, int* core);

/* What one NF of the chain did. */
struct NfCounters {
  Counter packets_in;
  Counter packets_out;
  Counter dropped;
  Counter bursts; /* ProcessBatch calls: each gets one burst */
  Counter cycles; /* rdtsc around ProcessBatch, summed */
  /* Flow moves' control frames the NF's position ran MoveAt on (issue 37):
   * exports, imports, and those whose status it set to a failure. */
  Counter move_exports;
  Counter move_imports;
  Counter move_failed;
};

/* What the chain's ports did. */
struct PortCounters {
  Counter rx_packets;
  Counter rx_bytes;
  Counter rx_malformed;   /* dropped before the first NF: truncated or bad headers */
  Counter tx_packets;
  Counter tx_bytes;
  Counter tx_dropped;     /* the TX queue was full, or no mbuf was left */
  Counter tx_too_long;    /* longer than an mbuf, and the port sends no segment chains */
  Counter copied;         /* copied into the chain's packet buffer (the isolation copy) */
  Counter copy_dropped;   /* the chain's packet buffer was full */
  Counter rx_queue_len;   /* RX descriptors in use at the last sample; see rx_queue_len_known */
  Counter rx_queue_len_known; /* 1 if the PMD reports RX queue occupancy */
  Counter batches;        /* turns that received packets */
  Counter batch_cycles;   /* rdtsc over those turns, summed (Engine::EndTurn) */
};

}  // namespace keel

#endif  // KEEL_MONITOR_H_
