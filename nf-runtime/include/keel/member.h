/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One NF of a chain instance in its own process (Galleon §4.3-§4.4).
 *
 * Position 0 owns the DPDK port: at each of its turns it transmits what the
 * last NF finished, receives up to B bursts, runs its NF on the NIC's
 * buffers and copies the survivors into the chain's buffer file (the
 * spatial-isolation copy). Positions 1..N-1 map only that file and run
 * their NF on the packets in place when their turn comes. Turns pass in
 * chain order through the scheduling words (chain_sched.h); coopsched's
 * SCHED_FIFO order makes each yield hand the core to the next NF.
 */
#ifndef KEEL_MEMBER_H_
#define KEEL_MEMBER_H_

#include <rte_mbuf.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "keel/chain.h"
#include "keel/monitor.h"
#include "keel/pktbuf.h"
#include "keel/stats_file.h"

namespace keel {

struct MemberOptions {
  int position = 0;
  int count = 1;
  std::string pktbuf_path;
  uint16_t port = 0;           /* position 0 only: RX and TX */
  int exit_when_idle_ms = 0;   /* position 0 only; 0: run until stopped */
  std::string stats_path;       /* empty: no statistics file */
  int stats_interval_ms = 1000; /* how often the statistics file is rewritten */
  /* Positions > 0: work on a private copy of each packet (a buffer from this
   * process's own pool) and copy it back, the isolation-by-copying of
   * EdgeOS/NFVnice (a benchmark baseline). */
  bool copy_each_hop = false;
  /* keel-coopsched schedules the chain: waiting for a turn yields (FIFO
   * order hands the core on) and never sleeps. */
  bool coopsched = false;
  /* Without coopsched: wait for a turn asleep on this position's semaphore
   * (a futex in the chain's scheduling words) and wake the next position's,
   * the way NFVnice's NFs wait on semaphores (the benchmark baseline). */
  bool wait_futex = false;
  /* Position 0 of a chain of 2+: transmit the packets from the chain buffer
   * itself (DPDK external buffers) instead of copying each into a transmit
   * mbuf; the slots are reused only once the port has let go of them. */
  bool egress_zero_copy = true;
};

class Member {
 public:
  /* Position 0 creates the chain's buffer file; the others wait up to
   * |wait_ms| for it to appear and map it. nullptr and |*err| on failure. */
  static std::unique_ptr<Member> Create(Chain* chain, rte_mempool* pool, const MemberOptions& opt,
                                        int wait_ms, std::string* err);

  /* Takes turns until Stop(), the idle timeout (position 0), the chain
   * closing, or another position's process going away; then writes the
   * statistics file a last time. False and |*err| in the last case. */
  bool Run(std::string* err);
  /* Asks Run to return within about a second; safe from a signal handler. */
  void Stop() { stop_.store(true, std::memory_order_relaxed); }
  ~Member();

  /* This NF's statistics, as the statistics file shows them (keel-nf
   * --help describes them). |final|: the packet loop has ended, so the
   * NF's own figures (NF::Stats) are included. */
  Json StatsJson(bool final) const;

 private:
  Member(Chain* chain, rte_mempool* pool, const MemberOptions& opt);
  /* Locks this position's byte of the chain's buffer file for as long as
   * the process lives; the kernel drops the lock when it dies. */
  bool HoldPosition(std::string* err);
  /* True if position |j| has been there and its process has gone. */
  bool PositionGone(uint32_t j) const;
  /* Waits for this position's turn; false if it should stop instead. */
  bool AwaitTurn(keel_chain_sched* s, std::string* err);
  /* Position 0's turn; false once the chain goes idle for too long. */
  bool HeadTurn(keel_chain_sched* s);
  void Egress();
  void InPlaceTurn();
  /* copy_each_hop: runs the NF on private copies of |batch|, copies back. */
  void RunOnPrivateCopies(PacketBatch* batch);
  /* Egress without a copy: mbufs attached to the chain buffer's slots. */
  /* |slots|: each packet's slot index, by its place among |batch|'s views. */
  int AttachOut(PacketBatch* batch, const Packet* views, const uint32_t* slots, rte_mbuf** out);
  /* Before the slots are written again: waits (bounded) for the port to
   * release every slot it transmits from; false if it did not, and then
   * egress copies from now on. */
  bool SlotsReleased();
  static void OnTxDone(void* addr, void* opaque);
  /* Adds |cycles| to this position's row of the cycle accounting. */
  void Charge(int kind, uint64_t cycles) { ChargeCycles(cycles_, kind, cycles); }

  Chain* chain_;
  rte_mempool* pool_; /* position 0: the port's; others: private (copy_each_hop) */
  MemberOptions opt_;
  std::unique_ptr<PktBuf> buf_;
  std::unique_ptr<StatsFile> stats_; /* rewrites opt_.stats_path from a service thread */
  PortCounters port_;
  bool tx_chains_ = false; /* position 0: the port sends multi-segment mbufs */
  Counter turns_;
  Counter order_violations_; /* packets whose predecessor had not finished them */
  std::atomic<bool> stop_{false};
  int lock_fd_ = -1; /* holds this position's lock (HoldPosition) */
  uint64_t idle_cycles_ = 0;
  uint64_t last_rx_ = 0;
  uint32_t last_received_ = 0;  /* position 0: packets its last turn received */
  uint64_t* cycles_ = nullptr;  /* this position's row of the cycle accounting */
  /* Zero-copy egress: one shared-info per slot (its reference count and
   * the callback the mbuf's last free calls), and the slots in flight. */
  std::vector<rte_mbuf_ext_shared_info> shinfo_;
  uint32_t in_flight_ = 0;
  bool zero_copy_ = false;
  Counter zero_copy_packets_;
  Counter zero_copy_fallbacks_;
};

}  // namespace keel

#endif  // KEEL_MEMBER_H_
