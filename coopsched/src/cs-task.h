/* SPDX-License-Identifier: Apache-2.0 */
/* A host thread under coopsched's control: what it was before (policy,
 * affinity) and the kernel operations coopsched applies to it.
 *
 * A thread is held by file descriptors, not by its number: its process's
 * pidfd (signals go through pidfd_send_signal), its own pidfd where the
 * kernel has thread pidfds (6.9), and its /proc stat and schedstat files.
 * Once the thread has exited, none of them reaches another thread that is
 * given the same number later. The calls that only take a number
 * (sched_setscheduler, sched_setaffinity) are made after a look at the
 * pidfd says the thread still lives. */
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
  int pidfd;      /* of the thread itself, -1 if the kernel has none (before 6.9) */
  int proc_pidfd; /* of its process: what signals go through */
  int stat_fd;    /* /proc/PID/task/TID/stat, opened once */
  int sched_fd;   /* /proc/PID/task/TID/schedstat, opened once */
  int wchan_fd;   /* /proc/PID/task/TID/wchan, opened once */
  int orig_policy;
  int orig_priority;
  cpu_set_t orig_affinity;
};

/* Looks tid up in /proc, opens the descriptors that hold it and saves its
 * policy and affinity; CS_ENOENT if it does not exist (or exits meanwhile). */
enum cs_errclass cs_task_open(struct cs_task *t, pid_t tid, struct cs_error *err);

/* Releases what cs_task_open holds; the thread is not touched. */
void cs_task_close(struct cs_task *t);

/* Returns nonzero if the thread has exited, zombie or reaped. Cheap enough
 * for every tick: one poll of its pidfd (of its process's pidfd, a tgkill
 * and, for a process's main thread, its /proc state on kernels without
 * thread pidfds). */
int cs_task_gone(const struct cs_task *t);

/* Returns the /proc state letter of the thread (R, S, T, ...), or 0 if it is gone. */
char cs_task_state(const struct cs_task *t);

/* Returns nonzero if the thread is stopped by a signal (or traced). */
int cs_task_is_stopped(const struct cs_task *t);

/* Sends SIGSTOP (stop != 0) or SIGCONT to the thread's process through its
 * pidfd; -errno on failure (-ESRCH once the process has exited). */
int cs_task_signal_stop(const struct cs_task *t, int stop);

/* Sets SCHED_FIFO at the given priority; -errno on failure. */
int cs_task_set_fifo(const struct cs_task *t, int priority);

/* How a detached, stopped thread waits: SCHED_FIFO at priority if it is above 0, else
 * SCHED_OTHER (the default: a thread killed while it waits must get the CPU to exit, which
 * a FIFO priority below the running chain's never gives it; CFS does, through the kernel's
 * fair server from Linux 6.12). */
int cs_task_set_waiting(const struct cs_task *t, int priority);

/* Pins the thread to one core; -errno on failure. */
int cs_task_set_core(const struct cs_task *t, int core);

/* Moves the thread out of SCHED_FIFO: SCHED_OTHER with its original affinity. */
int cs_task_demote(const struct cs_task *t);

/* Gives back the original policy, priority and affinity. */
int cs_task_restore(const struct cs_task *t);

/* Returns nonzero if the thread runs under SCHED_FIFO (0 if it is gone). */
int cs_task_is_fifo(const struct cs_task *t);

/* The kernel's account of a thread's time (schedstat): CPU time used, time
 * spent runnable waiting for a CPU, and how many times it was switched in. */
struct cs_task_sched {
  uint64_t cpu_ns;
  uint64_t wait_ns;
  uint64_t switches;
};

/* Reads the thread's schedstat into *out; -errno (-ESRCH once it is gone). */
int cs_task_schedstat(const struct cs_task *t, struct cs_task_sched *out);

/* What /proc stat says of a thread. */
struct cs_task_stat {
  char state;      /* R, S, T, Z, ... */
  int policy;      /* SCHED_OTHER, SCHED_FIFO, ... */
  int rt_priority; /* its FIFO priority, 0 for the others */
  int exiting;     /* the kernel is ending it (PF_EXITING) */
  int cpu;         /* the CPU it last ran on, or is queued on */
};

/* Reads the thread's /proc stat into *out; -errno (-ESRCH once it is gone). */
int cs_task_stat(const struct cs_task *t, struct cs_task_stat *out);

/* Returns nonzero if the thread is on a run queue (running or waiting for a
 * CPU): its wchan is 0. Cheaper than cs_task_stat. */
int cs_task_runnable(const struct cs_task *t);

/* Once the thread's process has exited, whoever reaps it: returns 1 and
 * sets *status to its wait status (waitpid(2)), or -1 if the kernel cannot
 * tell (a zombie's exit code is in its /proc stat, a reaped process's in its
 * pidfd since Linux 6.15). Returns 0 while the process lives. */
int cs_task_exit_status(const struct cs_task *t, int *status);

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_TASK_H_
