/* SPDX-License-Identifier: Apache-2.0 */
/* The kernel's RT throttling: SCHED_FIFO threads may run only
 * kernel.sched_rt_runtime_us of every sched_rt_period_us, so a managed core
 * whose NF threads never sleep idles in the gap (50 ms a second by default).
 * keel-coopsched can lift it while it runs (--no-rt-throttle). */
#ifndef KEEL_CS_RT_H_
#define KEEL_CS_RT_H_

#include <stdint.h>

#include "cs-error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads kernel.sched_rt_runtime_us into *us (-1: not throttled). */
enum cs_errclass cs_rt_runtime_read(int64_t *us, struct cs_error *err);

/* Writes kernel.sched_rt_runtime_us. */
enum cs_errclass cs_rt_runtime_write(int64_t us, struct cs_error *err);

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_RT_H_
