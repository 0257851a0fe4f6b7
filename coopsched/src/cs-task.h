/* SPDX-License-Identifier: Apache-2.0 */
/* A host thread under coopsched's control: what it was before (policy,
 * affinity) and the kernel operations coopsched applies to it. */
#ifndef KEEL_CS_TASK_H_
#define KEEL_CS_TASK_H_

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdint.h>
#include <sys/types.h>

#include "cs-error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cs_task {
  pid_t tid;
  pid_t pid; /* the thread's process (thread group) */
  int pidfd; /* of the thread itself, -1 if the kernel has none (before 6.9) */
  int orig_policy;
  int orig_priority;
  cpu_set_t orig_affinity;
};

/* Looks tid up in /proc and saves its policy and affinity; CS_ENOENT if it
 * does not exist. */
enum cs_errclass cs_task_open(struct cs_task *t, pid_t tid, struct cs_error *err);

/* Releases what cs_task_open holds; the thread is not touched. */
void cs_task_close(struct cs_task *t);

/* Returns nonzero if the thread has exited, zombie or reaped. Cheap enough
 * for every tick: one poll of its pidfd (a tgkill and, for a process's main
 * thread, its /proc state on kernels without thread pidfds). */
int cs_task_gone(const struct cs_task *t);

/* Returns the /proc state letter of the thread (R, S, T, ...), or 0 if it is gone. */
char cs_task_state(const struct cs_task *t);

/* Returns nonzero if the thread is stopped by a signal (or traced). */
int cs_task_is_stopped(const struct cs_task *t);

/* Sends SIGSTOP (stop != 0) or SIGCONT to the thread's process; -errno on failure. */
int cs_task_signal_stop(const struct cs_task *t, int stop);

/* Sets SCHED_FIFO at the given priority; -errno on failure. */
int cs_task_set_fifo(const struct cs_task *t, int priority);

/* Pins the thread to one core; -errno on failure. */
int cs_task_set_core(const struct cs_task *t, int core);

/* Moves the thread out of SCHED_FIFO: SCHED_OTHER with its original affinity. */
int cs_task_demote(const struct cs_task *t);

/* Gives back the original policy, priority and affinity. */
int cs_task_restore(const struct cs_task *t);

/* Returns the CPU time the thread has used, in ns (schedstat), or 0 if unknown. */
uint64_t cs_task_cpu_ns(const struct cs_task *t);

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_TASK_H_
