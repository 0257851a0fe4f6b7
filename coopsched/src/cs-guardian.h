/* SPDX-License-Identifier: Apache-2.0 */
/* The guardian: a small process keel-coopsched forks at start that undoes what keel-coopsched
 * did to the host when keel-coopsched dies, however it dies (SIGKILL and crashes included).
 *
 * keel-coopsched makes NF threads SCHED_FIFO on its managed cores, stops them (SIGSTOP) between
 * their turns and may lift the kernel's RT throttling (--no-rt-throttle). If it died without
 * undoing that, threads would stay stopped or spin at FIFO priority on a core nobody schedules,
 * and RT throttling would stay off for the whole host. The guardian holds one end of a socket
 * pair; keel-coopsched tells it every thread it takes and gives back. When keel-coopsched's
 * end closes (the kernel closes it on any death) without a clean "stop", the guardian gives each
 * thread it still knows its policy, priority and affinity back, continues it (SIGCONT), puts
 * kernel.sched_rt_runtime_us back if it was lifted, and exits. A thread whose start time changed
 * (its tid reused by another thread) is left alone. */
#ifndef KEEL_CS_GUARDIAN_H_
#define KEEL_CS_GUARDIAN_H_

#include <stdint.h>
#include <sys/types.h>

#include "cs-error.h"
#include "cs-task.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads the guardian tracks at most; beyond that, the newest are not tracked (said once). */
#define CS_GUARDIAN_MAX_TASKS 1024

struct cs_guardian {
  int fd;    /* keel-coopsched's end of the socket pair, -1 when there is no guardian */
  pid_t pid; /* the guardian process */
};

/* Forks the guardian. rt_lifted and rt_saved_us: whether keel-coopsched lifted RT throttling
 * and the value to restore. Call before any other thread starts (it forks). */
enum cs_errclass cs_guardian_start(struct cs_guardian *g, int rt_lifted, int64_t rt_saved_us,
                                   struct cs_error *err);

/* keel-coopsched has taken t (stopped, FIFO, on a managed core). */
void cs_guardian_hold(struct cs_guardian *g, const struct cs_task *t);

/* keel-coopsched has given t back. */
void cs_guardian_release(struct cs_guardian *g, const struct cs_task *t);

/* A clean exit: keel-coopsched undid everything itself; the guardian exits doing nothing. */
void cs_guardian_stop(struct cs_guardian *g);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_CS_GUARDIAN_H_ */
