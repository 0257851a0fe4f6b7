/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The scheduling words of a chain instance, shared by its NF processes and
 * keel-coopsched (Galleon §4.3.1). They live in the first page of the
 * chain's buffer file (pktbuf.h), at KEEL_SCHED_OFFSET, so coopsched finds
 * them by mapping that page. Plain C so the C scheduler and the C++ runtime
 * read the same layout; every access goes through __atomic builtins.
 *
 * The protocol, for a chain of N NFs at positions 0..N-1:
 *  - Position k works only while turn == k. It sets busy_since_tsc to the
 *    TSC when it starts, does its work, clears busy_since_tsc, sets
 *    turn = (k + 1) % N, increments handoffs and calls sched_yield(). Under
 *    SCHED_FIFO on one core this hands the core to the next NF in chain
 *    order (coopsched queues them in that order).
 *  - Position 0's turn is a batch boundary: it first transmits what NF N-1
 *    finished, then, unless detach_req is set, receives up to `batch`
 *    bursts, runs NF 0 and copies the survivors into the chain buffer
 *    (the steps are nf-runtime's engine.h: Egress, Head, InPlace). With
 *    detach_req set it sets parked = 1 instead and passes the turn without
 *    receiving: nothing is in flight, and coopsched may stop the chain.
 *  - Whoever stops first sets closing = 1: position 0 after transmitting at
 *    its turn (or, asked to stop, if its turn does not come within 500 ms),
 *    the others at once. Every position exits when it sees closing, at its
 *    turn or while waiting for it.
 *  - Each position holds an OFD write lock on byte k of the buffer file while
 *    its process lives (the kernel drops it when the process dies, in any
 *    PID namespace). A position waiting for its turn checks every 100 ms
 *    whether the position whose turn it is (tids[turn] != 0) still holds its
 *    lock, and exits with a message if not. Without coopsched it waits with
 *    sched_yield for 1 ms, then in 200 us sleeps.
 *  - The watchdog: busy_since_tsc != 0 for longer than the yield timeout
 *    means position `turn` does not yield.
 *  - A chain of one NF hands off to no one (Galleon §4.2's single-NF case):
 *    it yields only while core_shared is 1, which coopsched sets while
 *    another sgroup is attached to the same core.
 *  - An idle chain leaves its core idle. Under coopsched, once position 0
 *    has received nothing for the idle-nap time (keel-nf --idle-nap-after-ms, 100 ms)
 *    it keeps the turn at a batch boundary (nothing in flight) and sleeps
 *    between polls of its port, 10 us doubling to 100 us (1 ms once idle
 *    for a second), with idle_nap = 1;
 *    a waiting position that sees idle_nap sleeps on wake[k] (100 ms at most)
 *    instead of yielding. Position 0 clears idle_nap and wakes them all when
 *    packets come or a detach or stop is asked. Without this, the attached
 *    chains' FIFO threads keep the core busy and every SCHED_OTHER thread
 *    confined to it (an NF's statistics and Redis threads, a new instance
 *    starting up) waits for the kernel's fair-server slot, 50 ms a second.
 *  - Without coopsched, with keel-nf --wait-futex (the NFVnice-style
 *    baseline of bench/chain_length.py), a position sleeps on wake[k] until
 *    its predecessor increments it and wakes it (a semaphore per NF).
 *  - Cycle accounting (issue 15, item 0): each position adds the TSC cycles
 *    of its turns to cycles[k][...], by what they went to (enum
 *    keel_cycles_kind), and stamps handoff_tsc as it passes the turn; the
 *    next position counts the cycles from that stamp to its own start as
 *    KEEL_CYCLES_HANDOFF (the yield, the context switch, the scheduler and
 *    anything else the core ran in between). The words are statistics only:
 *    nothing schedules by them.
 */
#ifndef KEEL_CHAIN_SCHED_H_
#define KEEL_CHAIN_SCHED_H_

#include <stdint.h>

#define KEEL_SCHED_OFFSET 2048u
#define KEEL_SCHED_MAX_NFS 16

/* What a position's cycles went to (cycles[k][kind]). BUSY is the whole of
 * its turns; BUSY minus the kinds before it is the turn's own overhead. */
enum keel_cycles_kind {
  KEEL_CYCLES_RX = 0,     /* rte_eth_rx_burst returning packets, and parsing them */
  KEEL_CYCLES_RX_IDLE,    /* rte_eth_rx_burst returning none */
  KEEL_CYCLES_NF,         /* the NF's ProcessBatch */
  KEEL_CYCLES_COPY_IN,    /* position 0: copying survivors into the chain buffer */
  KEEL_CYCLES_VIEW,       /* reading and writing the chain buffer's descriptors */
  KEEL_CYCLES_COPY_OUT,   /* egress: packets into transmit buffers */
  KEEL_CYCLES_TX,         /* rte_eth_tx_burst */
  KEEL_CYCLES_SOJOURN,    /* position 0: recording each packet's sojourn (sojourn.h) */
  KEEL_CYCLES_BUSY,       /* from the start of each turn to passing it on */
  KEEL_CYCLES_HANDOFF,    /* from the predecessor's handoff_tsc to this turn's start */
  KEEL_CYCLES_TURNS,      /* turns taken (a count, not cycles) */
  KEEL_CYCLES_KINDS
};
#define KEEL_SCHED_MAGIC 0x6b65656c73636864ull /* "keelschd" */

struct keel_chain_sched {
  uint64_t magic;          /* KEEL_SCHED_MAGIC once the words are valid */
  uint32_t nnfs;           /* N */
  uint32_t turn;           /* position whose turn it is */
  uint32_t batch;          /* B, the batch's size in bursts: position 0 receives up to B
                              bursts of up to 32 packets per turn (coopsched SetBatch;
                              the controller picks B by Galleon eqs. 1-3) */
  uint32_t detach_req;     /* coopsched: 1 = stop at the next batch boundary */
  uint32_t parked;         /* position 0: 1 = at a boundary with detach_req seen */
  uint32_t closing;        /* position 0: 1 = the chain is shutting down; the others exit */
  uint64_t busy_since_tsc; /* TSC when the current turn's work began; 0 = between turns */
  uint64_t handoffs;       /* turns passed, all positions */
  uint64_t rounds;         /* batches position 0 started */
  uint64_t packets;        /* packets position 0 received */
  uint64_t tids[KEEL_SCHED_MAX_NFS]; /* thread id of each position's packet thread, in its
                                        own PID namespace; nonzero once the position is there */
  uint64_t handoff_tsc;    /* TSC when the last turn was passed on */
  uint32_t wake[KEEL_SCHED_MAX_NFS]; /* --wait-futex: position k's semaphore */
  uint32_t core_shared;    /* coopsched: 1 = another sgroup is attached to this one's core */
  uint32_t idle_nap;       /* position 0 naps holding the turn (the chain is idle): the others
                              wait asleep on wake[k] rather than yield (see above) */
  uint64_t cycles[KEEL_SCHED_MAX_NFS][KEEL_CYCLES_KINDS]; /* accounting, see above */
};

#endif  // KEEL_CHAIN_SCHED_H_
