/* SPDX-License-Identifier: Apache-2.0 */
/*
 * coopsched_test_nf: one position of a test chain that follows the
 * keel/chain_sched.h protocol on a buffer file laid out as test_chain.h says.
 *
 *   coopsched_test_nf PKTBUF POSITION [--spin | --spin-hidden] [--turn-us N]
 *                     [--exit-busy-ms N] [--trace FILE --tag C]
 *
 * Position 0 "receives" a batch by starting a round in the slot and
 * "transmits" it at its next turn, checking that positions 0..N-1 stamped it
 * in order. Every position checks that it sees each round exactly once.
 * --spin makes this position spin forever, busy, in its first turn after the
 * test sets spin_req in the area. --spin-hidden spins the same way but keeps
 * writing busy_since_tsc = 0 and counting handoffs, as an NF that hides from
 * a watchdog reading the shared words would. --turn-us makes every turn of
 * this position last N us of busy CPU.
 *
 * Closing (chain_sched.h): position 0 sets closing at its first turn after
 * the test sets close_req; every position that sees closing at its turn
 * passes the turn on, yields and exits with 0, after --exit-busy-ms N ms of
 * busy CPU (what a real NF's clean-up may take).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "test_chain.h"

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)

static inline uint64_t rdtsc(void) {
  uint32_t lo, hi;
  __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
  return ((uint64_t)hi << 32) | lo;
}

static void *map_file(const char *path, size_t len) {
  int fd = open(path, O_RDWR);
  if (fd < 0) {
    perror(path);
    exit(2);
  }
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(2);
  }
  return p;
}

static void spin_forever(struct keel_chain_sched *w, struct tc_area *a, int hidden) {
  STORE(a->spin_tsc, rdtsc());
  for (;;) {
    if (hidden) {
      STORE(w->busy_since_tsc, 0ull);
      STORE(w->handoffs, LOAD(w->handoffs) + 1);
    }
    __asm__ __volatile__("pause");
  }
}

/* Keeps the CPU busy for us microseconds of wall time. */
static void busy_us(uint64_t us) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    __asm__ __volatile__("pause");
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000000u + (uint64_t)(t.tv_nsec - t0.tv_nsec) / 1000u <
           us);
}

/* Position 0's turn: transmit the finished round, then park or receive. */
static void head_turn(struct keel_chain_sched *w, struct tc_area *a, uint32_t n,
                      struct tc_trace *trace, uint8_t tag) {
  if (LOAD(w->parked) && !LOAD(w->detach_req)) STORE(w->parked, 0u);
  if (a->slot_fresh) {
    int ok = a->slot_count == n;
    for (uint32_t i = 0; ok && i < n; i++) ok = a->stamps[i] == i;
    if (ok) a->ok_rounds++;
    else a->bad_rounds++;
    a->slot_fresh = 0;
  }
  if (LOAD(w->detach_req)) {
    STORE(w->parked, 1u);
    return;
  }
  uint32_t batch = LOAD(w->batch);
  uint64_t seq = LOAD(w->rounds) + 1;
  STORE(w->rounds, seq);
  STORE(w->packets, LOAD(w->packets) + (uint64_t)(batch ? batch : 1) * TC_PACKETS_PER_BURST);
  if (seq != a->last_seq[0] + 1) a->lost++;
  a->last_seq[0] = seq;
  a->slot_seq = seq;
  a->slot_count = 1;
  a->stamps[0] = 0;
  a->slot_fresh = 1;
  a->done[0]++;
  if (trace) {
    uint64_t i = __atomic_fetch_add(&trace->len, 1, __ATOMIC_ACQ_REL);
    if (i < TC_TRACE_MAX) trace->tag[i] = tag;
  }
}

/* Position k's turn: stamp the round in the slot, if there is one. */
static void member_turn(struct tc_area *a, uint32_t k) {
  if (!a->slot_fresh) return;
  uint64_t seq = a->slot_seq;
  if (seq == a->last_seq[k]) a->dup++;
  else if (seq != a->last_seq[k] + 1) a->lost++;
  a->last_seq[k] = seq;
  if (a->slot_count < KEEL_SCHED_MAX_NFS) a->stamps[a->slot_count++] = (uint8_t)k;
  a->done[k]++;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr,
            "usage: %s PKTBUF POSITION [--spin | --spin-hidden] [--turn-us N] [--exit-busy-ms N] "
            "[--trace FILE --tag C]\n",
            argv[0]);
    return 2;
  }
  uint32_t k = (uint32_t)atoi(argv[2]);
  int spin = 0, hidden = 0;
  uint64_t turn_us = 0, exit_busy_ms = 0;
  struct tc_trace *trace = NULL;
  uint8_t tag = '?';
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--spin")) spin = 1;
    else if (!strcmp(argv[i], "--spin-hidden")) spin = hidden = 1;
    else if (!strcmp(argv[i], "--turn-us") && i + 1 < argc)
      turn_us = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--exit-busy-ms") && i + 1 < argc)
      exit_busy_ms = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--trace") && i + 1 < argc)
      trace = map_file(argv[++i], sizeof *trace);
    else if (!strcmp(argv[i], "--tag") && i + 1 < argc)
      tag = (uint8_t)argv[++i][0];
  }
  char *base = map_file(argv[1], TC_FILE_SIZE);
  struct keel_chain_sched *w = (struct keel_chain_sched *)(base + KEEL_SCHED_OFFSET);
  struct tc_area *a = (struct tc_area *)(base + TC_AREA_OFFSET);
  if (LOAD(w->magic) != KEEL_SCHED_MAGIC || k >= LOAD(w->nnfs)) {
    fprintf(stderr, "%s: no scheduling words for position %u\n", argv[1], k);
    return 2;
  }
  uint32_t n = LOAD(w->nnfs);
  STORE(w->tids[k], (uint64_t)gettid());
  for (;;) {
    if (LOAD(w->turn) != k) {
      sched_yield();
      continue;
    }
    if (LOAD(w->busy_since_tsc) != 0) a->overlap++;
    if (k == 0 && LOAD(a->close_req)) STORE(w->closing, 1u);
    if (LOAD(w->closing)) {
      STORE(w->turn, (k + 1) % n);
      sched_yield();
      busy_us(exit_busy_ms * 1000u);
      return 0;
    }
    STORE(w->busy_since_tsc, rdtsc() | 1);
    if (spin && LOAD(a->spin_req)) spin_forever(w, a, hidden);
    if (k == 0) head_turn(w, a, n, trace, tag);
    else member_turn(a, k);
    if (turn_us) busy_us(turn_us);
    STORE(w->busy_since_tsc, 0ull);
    STORE(w->handoffs, LOAD(w->handoffs) + 1);
    STORE(w->turn, (k + 1) % n);
    sched_yield();
  }
}
