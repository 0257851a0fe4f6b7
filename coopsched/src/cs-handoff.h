/* SPDX-License-Identifier: Apache-2.0 */
/* The cost of one cooperative handoff, T_ctx of Galleon eq. 1. */
#ifndef KEEL_CS_HANDOFF_H_
#define KEEL_CS_HANDOFF_H_

#include <stdint.h>

#include "cs-error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Measures the TSC cycles of one sched_yield handoff between two SCHED_FIFO
 * processes pinned to core at priority, which must be idle of other FIFO
 * work; returns 0 and sets *err if it cannot. */
uint64_t cs_handoff_measure(int core, int priority, struct cs_error *err);

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_HANDOFF_H_
