/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The yield watchdog's rule (Galleon footnote 2), on the kernel's account of
 * the threads attached to one managed core. Its evidence lives in
 * coopsched's memory and comes from the kernel (schedstat, wchan, stat),
 * never from the chain's shared page, which every NF can write.
 *
 * The rule rests on SCHED_FIFO: the attached threads of a core share one
 * priority, sched_yield puts the caller at the tail of that priority's
 * queue and a blocking thread leaves the core. So while a thread W of the
 * core waits on the run queue at that priority and is never switched in,
 * no thread of the core yields past it or sleeps: every other thread runs
 * at most one stretch without yielding. The enforcer's own wake-ups do not
 * count: a FIFO thread preempted by a higher priority stays at the head.
 *
 * A window opens at a look where some thread W, other than the one that ran
 * most since the last look, is on the run queue (it watches up to two such
 * threads). It stays open while the switch count of one of them, W, has not
 * moved and W is still runnable on this core, SCHED_FIFO at the run
 * priority and not exiting (checked at every look). While it is open, the
 * CPU time another thread S has used since the window opened was used in one
 * stretch without yielding; once that reaches the yield timeout, S held the
 * core that long while W waited: the verdict. A thread that is exiting is
 * given no verdict (the kernel is ending it). A lone thread that yields to
 * nobody, a thread that blocks, and any turn shorter than the timeout,
 * however it falls between looks, never meet the rule.
 *
 * A look that comes late is evidence of a stall: the enforcer runs at the
 * highest priority on its core and is due every tick, so if it wakes
 * milliseconds after its timer the core itself was lost (the host
 * descheduled the vCPU, or the kernel ran with interrupts off), and the
 * kernel charges that time to whichever thread was running. Seen on the
 * shared VMs keel's CI runs on: a 9 ms turn charged 14.7 ms. An open window
 * credits its holders with the lateness of its looks, up to one timeout in
 * all, so a turn stretched by a stall is not held, and a thread that keeps
 * every look late (long non-preemptible work in the kernel) is still held
 * within twice the timeout.
 *
 * cs_wd_look is pure: the enforcer reads the threads and passes callbacks
 * for the reads it needs only sometimes, so tests drive it with made-up
 * threads.
 */
#ifndef KEEL_CS_WATCHDOG_H_
#define KEEL_CS_WATCHDOG_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads attached to one core that the watchdog watches at most. */
#define CS_WD_MAX_THREADS 128

/* One thread as the kernel accounts for it now (schedstat). */
struct cs_wd_now {
  int alive;       /* read: the thread exists */
  uint64_t cpu_ns; /* CPU time used */
  uint64_t pcount; /* times switched in */
};

/* What the watchdog remembers of a thread attached to a core. */
struct cs_wd_thread {
  uint64_t key;    /* unique among the threads coopsched holds */
  int known;       /* a look was taken since the thread came onto the core */
  uint64_t cpu_ns; /* at the last look */
  uint64_t win_id; /* the window win_cpu_ns belongs to */
  uint64_t win_cpu_ns;
};

/* Threads a window watches wait: two, since one of the threads on the run
 * queue at a look is the one the enforcer's wake-up preempted. */
#define CS_WD_WAITERS 2

/* A core's window. */
struct cs_wd_window {
  uint64_t id; /* of the last window opened; 0 before the first */
  int open;
  uint64_t since_ns;
  uint64_t stall_ns; /* lateness of the looks since it opened, at most the timeout */
  size_t nwaiters;
  uint64_t waiter_key[CS_WD_WAITERS];
  uint64_t waiter_pcount[CS_WD_WAITERS];
};

/* The reads the rule needs only for some threads, by index. */
struct cs_wd_ops {
  /* On the run queue now (running or waiting for the CPU). */
  int (*runnable)(void *ctx, size_t i);
  /* Runnable on this core, SCHED_FIFO at the run priority, not exiting. */
  int (*waiting)(void *ctx, size_t i);
  /* Exiting (the kernel is ending it) or gone. */
  int (*exiting)(void *ctx, size_t i);
};

struct cs_wd_verdict {
  size_t holder;    /* index of the thread that held the core */
  size_t waiter;    /* index of a thread that waited meanwhile */
  uint64_t held_ns; /* CPU time the holder used without yielding */
};

/* Takes one look at the n (<= CS_WD_MAX_THREADS) threads attached to a core (th[i] and now[i]) at
 * now_ns, late_ns after the enforcer meant to (0 if on time or woken early).
 * Returns 1 and fills *v if a thread has held the core for timeout_ns while
 * another waited; else 0. *recheck_ns, if not 0, is how soon the next look
 * could give a verdict. */
int cs_wd_look(struct cs_wd_window *w, struct cs_wd_thread *const *th, const struct cs_wd_now *now,
               size_t n, uint64_t now_ns, uint64_t late_ns, uint64_t timeout_ns,
               const struct cs_wd_ops *ops, void *ctx, struct cs_wd_verdict *v,
               uint64_t *recheck_ns);

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_WATCHDOG_H_
