/* SPDX-License-Identifier: Apache-2.0 */
/* The test chain's buffer file: the first page holds struct keel_chain_sched
 * at KEEL_SCHED_OFFSET as a real chain buffer does; the second page holds
 * the test's one packet slot and the counters that check order, loss and
 * duplication. A trace file, shared by several chains, records which chain
 * started each batch. */
#ifndef KEEL_COOPSCHED_TEST_CHAIN_H_
#define KEEL_COOPSCHED_TEST_CHAIN_H_

#include <stdint.h>

#include "keel/chain_sched.h"

#define TC_AREA_OFFSET 4096u
#define TC_FILE_SIZE 8192u
#define TC_TRACE_MAX (1u << 20)
#define TC_PACKETS_PER_BURST 32u

struct tc_area {
  uint64_t slot_seq;    /* round the slot carries */
  uint32_t slot_fresh;  /* 1 from position 0's receive to its transmit */
  uint32_t slot_count;  /* stamps in the slot */
  uint8_t stamps[KEEL_SCHED_MAX_NFS];
  uint64_t ok_rounds;   /* transmitted with stamps 0..N-1 in order */
  uint64_t bad_rounds;  /* transmitted with anything else */
  uint64_t lost;        /* a position saw a round skipped */
  uint64_t dup;         /* a position saw a round again */
  uint64_t overlap;     /* a position worked while another was busy */
  uint64_t done[KEEL_SCHED_MAX_NFS];
  uint64_t last_seq[KEEL_SCHED_MAX_NFS];
  uint64_t spin_req;    /* set by the test: a --spin position spins at its next turn */
  uint64_t spin_tsc;    /* when the spinning position began to spin */
  uint64_t close_req;   /* set by the test: position 0 closes the chain at its next turn */
};

struct tc_trace {
  uint64_t len;
  uint8_t tag[TC_TRACE_MAX];
};

#endif  // KEEL_COOPSCHED_TEST_CHAIN_H_
