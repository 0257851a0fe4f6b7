/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-tsc.h"

#include <time.h>

static uint64_t ns_of(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t cs_mono_ns(void) { return ns_of(CLOCK_MONOTONIC); }

uint64_t cs_tsc_measure_hz(void) {
  uint64_t t0 = ns_of(CLOCK_MONOTONIC_RAW);
  uint64_t c0 = cs_rdtsc();
  struct timespec pause = {0, 50 * 1000 * 1000};
  nanosleep(&pause, NULL);
  uint64_t t1 = ns_of(CLOCK_MONOTONIC_RAW);
  uint64_t c1 = cs_rdtsc();
  return (uint64_t)((double)(c1 - c0) * 1e9 / (double)(t1 - t0));
}
