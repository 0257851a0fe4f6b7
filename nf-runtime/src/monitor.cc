/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/monitor.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

namespace keel {

static uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t TscHz() {
  static const uint64_t hz = [] {
    uint64_t t0 = MonotonicNs(), c0 = Rdtsc();
    timespec d{0, 50 * 1000 * 1000};
    nanosleep(&d, nullptr);
    uint64_t t1 = MonotonicNs(), c1 = Rdtsc();
    return (c1 - c0) * 1000000000ull / (t1 - t0);
  }();
  return hz;
}

void MoveOffCore(pthread_t t, int core) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 2 || core < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (long c = 0; c < n; c++)
    if (c != core) CPU_SET(c, &set);
  pthread_setaffinity_np(t, sizeof(set), &set);
  sched_param other{};
  pthread_setschedparam(t, SCHED_OTHER, &other);
}

int PinnedCore(pid_t tid) {
  cpu_set_t set;
  if (sched_getaffinity(tid, sizeof(set), &set) != 0 || CPU_COUNT(&set) != 1) return -1;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) return c;
  return -1;
}

void FollowOffCore(pid_t packet_tid, int* core) {
  int now = PinnedCore(packet_tid);
  if (now == *core) return;
  *core = now;
  MoveOffCore(pthread_self(), now);
}

}  // namespace keel
