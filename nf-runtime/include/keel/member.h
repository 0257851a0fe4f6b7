/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One NF of a chain instance in its own process (Galleon §4.3-§4.4).
 *
 * Position 0 owns the DPDK port: at each of its turns it transmits what the
 * last NF finished (the engine's Egress), receives up to B bursts, runs its
 * NF on the NIC's buffers and copies the survivors into the chain's buffer
 * file (Head). Positions 1..N-1 map only that file and run their NF on the
 * packets in place when their turn comes (InPlace). The steps are the
 * chain-buffer engine's (engine.h); what is here is the turn protocol: turns
 * pass in chain order through the scheduling words (chain_sched.h), and
 * coopsched's SCHED_FIFO order makes each yield hand the core to the next NF.
 */
#ifndef KEEL_MEMBER_H_
#define KEEL_MEMBER_H_

#include <rte_mempool.h>

#include <atomic>
#include <memory>
#include <string>

#include "keel/chain.h"
#include "keel/engine.h"
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
   * order hands the core on); it sleeps only while position 0 naps. */
  bool coopsched = false;
  /* Under coopsched, position 0: after this long without a packet the
   * chain is idle, and position 0 sleeps between polls of its port holding
   * the turn (chain_sched.h); 0: never. */
  uint32_t idle_nap_after_ms = 100;
  /* Without coopsched: wait for a turn asleep on this position's semaphore
   * (a futex in the chain's scheduling words) and wake the next position's,
   * the way NFVnice's NFs wait on semaphores (the benchmark baseline). */
  bool wait_futex = false;
  /* Position 0 of a chain of 2+: transmit the packets from the chain buffer
   * itself (DPDK external buffers) instead of copying each into a transmit
   * mbuf; the slots are reused only once the port has let go of them. */
  bool egress_zero_copy = true;
  /* Position 0 of a chain of 2+: the port receives into the chain buffer's
   * slots (its pool is a ChainRxPool over the file, rx_pool.h), so nothing
   * is copied in; false is keel-nf --rx-copy. */
  bool rx_zero_copy = true;
  /* Position 0: how long a flow's direct packets wait for its handover
   * marker (engine.h's EngineOptions::handover_timeout_ms). */
  uint32_t handover_timeout_ms = 500;
};

class Member {
 public:
  /* Position 0's first step: creates the chain's buffer file (with the
   * slots of a ChainRxPool if it is to receive into it) and its scheduling
   * words. nullptr and |*err| on failure. */
  static std::unique_ptr<PktBuf> MakeBuffer(const MemberOptions& opt, std::string* err);
  /* Position 0 takes the buffer MakeBuffer made (|buf|); the others pass
   * none, and wait up to |wait_ms| for the file to appear and map it.
   * |pool| is position 0's port pool (a ChainRxPool's when
   * opt.rx_zero_copy). nullptr and |*err| on failure. */
  static std::unique_ptr<Member> Create(Chain* chain, rte_mempool* pool, std::unique_ptr<PktBuf> buf,
                                        const MemberOptions& opt, int wait_ms, std::string* err);

  /* Takes turns until Stop(), the idle timeout (position 0), the chain
   * closing, or another position's process going away; then writes the
   * statistics file a last time. False and |*err| in the last case. */
  bool Run(std::string* err);
  /* Asks Run to return within about a second; safe from a signal handler. */
  void Stop() { stop_.store(true, std::memory_order_relaxed); }
  ~Member();

  /* This NF's statistics, as the statistics file shows them (keel-nf
   * --help describes them). */
  Json StatsJson() const { return engine_->StatsJson(); }

 private:
  Member(Chain* chain, const MemberOptions& opt);
  /* Locks this position's byte of the chain's buffer file for as long as
   * the process lives; the kernel drops the lock when it dies. */
  bool HoldPosition(std::string* err);
  /* True if position |j| has been there and its process has gone. */
  bool PositionGone(uint32_t j) const;
  /* Waits for this position's turn; false if it should stop instead. */
  bool AwaitTurn(keel_chain_sched* s, std::string* err);
  /* Position 0's turn; false once the chain goes idle for too long. */
  /* |*start| moves past the time the turn spent asleep (IdleNap). */
  bool HeadTurn(keel_chain_sched* s, uint64_t* start);
  /* Position 0 of an idle chain under coopsched: sleeps between polls of
   * its port, holding the turn, until packets come (|*received|, their
   * count) or a detach, stop or the idle exit is due (0). Returns the TSC
   * cycles it slept. */
  uint64_t IdleNap(keel_chain_sched* s, uint32_t* received);

  Chain* chain_;
  MemberOptions opt_;
  std::unique_ptr<PktBuf> buf_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<StatsFile> stats_; /* rewrites opt_.stats_path from a service thread */
  std::atomic<bool> stop_{false};
  int lock_fd_ = -1; /* holds this position's lock (HoldPosition) */
  uint64_t idle_cycles_ = 0;
  uint64_t nap_after_cycles_ = 0; /* 0: never nap (IdleNap) */
};

}  // namespace keel

#endif  // KEEL_MEMBER_H_
