/* SPDX-License-Identifier: Apache-2.0 */
/* The time-stamp counter: reading it and measuring its rate. */
#ifndef KEEL_CS_TSC_H_
#define KEEL_CS_TSC_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline uint64_t cs_rdtsc(void) {
  uint32_t lo, hi;
  __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
  return ((uint64_t)hi << 32) | lo;
}

/* Measures the TSC rate in Hz against CLOCK_MONOTONIC_RAW over about 50 ms. */
uint64_t cs_tsc_measure_hz(void);

/* Returns CLOCK_MONOTONIC in nanoseconds. */
uint64_t cs_mono_ns(void);

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_TSC_H_
