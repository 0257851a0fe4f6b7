/* SPDX-License-Identifier: Apache-2.0 */
/* The kernel's RT throttling: SCHED_FIFO threads may run only
 * kernel.sched_rt_runtime_us of every sched_rt_period_us, so a managed core
 * whose NF threads do not sleep (a chain with traffic) idles in the gap (50 ms a second
 * by default).
 * keel-coopsched can lift it while it runs (--no-rt-throttle). */
#ifndef KEEL_CS_RT_H_
#define KEEL_CS_RT_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cs-error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads kernel.sched_rt_runtime_us into *us (-1: not throttled). */
enum cs_errclass cs_rt_runtime_read(int64_t *us, struct cs_error *err);

/* Writes kernel.sched_rt_runtime_us. */
enum cs_errclass cs_rt_runtime_write(int64_t us, struct cs_error *err);

/* Why SCHED_FIFO was refused (EPERM) to thread tid, if the cause is cgroup v1 RT group
 * scheduling: with throttling on, the kernel refuses SCHED_FIFO to a thread whose cpu
 * cgroup has cpu.rt_runtime_us 0, which is what a Kubernetes Pod's cgroups and a Docker
 * container without --cpu-rt-runtime get. Writes " (...)" naming the cgroup and the fix
 * into out, or "" when that is not the cause. */
void cs_rt_explain_eperm(pid_t tid, char *out, size_t len);

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_RT_H_
