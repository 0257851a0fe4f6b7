/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-handoff.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cs-tsc.h"

#define HANDOFF_ROUNDS 20000u

struct handoff_shared {
  uint32_t turn;
  uint32_t pad;
  uint64_t start_tsc;
  uint64_t end_tsc;
};

/* One of the two ping-pong processes: waits on its pipe until the parent has
 * made it FIFO on the core, then passes the turn HANDOFF_ROUNDS times.
 *
 * It must never outlive keel-coopsched: killed mid-probe (make down during
 * start-up), the parent would leave one child spinning at SCHED_FIFO on the
 * managed core for good, its partner gone, and holding every descriptor it
 * inherited, the core lock among them (the next keel-coopsched then finds
 * "core N is managed by another keel-coopsched"). So the child dies with its
 * parent and keeps nothing but its own pipe. */
static void handoff_child(struct handoff_shared *sh, int me, int rfd, pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (getppid() != parent) _exit(2); /* the parent died before the line above */
  if (rfd > 3) syscall(SYS_close_range, 3U, (unsigned)rfd - 1, 0U);
  syscall(SYS_close_range, (unsigned)rfd + 1, ~0U, 0U);
  char c;
  if (read(rfd, &c, 1) != 1) _exit(2);
  for (uint32_t i = 0; i < HANDOFF_ROUNDS; i++) {
    while (__atomic_load_n(&sh->turn, __ATOMIC_ACQUIRE) != (uint32_t)me) sched_yield();
    if (me == 0 && i == 1) sh->start_tsc = cs_rdtsc();
    __atomic_store_n(&sh->turn, 1u - (uint32_t)me, __ATOMIC_RELEASE);
    sched_yield();
  }
  if (me == 0) sh->end_tsc = cs_rdtsc();
  _exit(0);
}

uint64_t cs_handoff_measure(int core, int priority, struct cs_error *err) {
  struct handoff_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    cs_error_set(err, CS_EINTERNAL, "handoff probe: mmap: %s", strerror(errno));
    return 0;
  }
  memset(sh, 0, sizeof *sh);
  pid_t kids[2] = {-1, -1};
  int pipes[2][2] = {{-1, -1}, {-1, -1}};
  uint64_t cycles = 0;
  const pid_t self = getpid();
  for (int i = 0; i < 2; i++) {
    if (pipe(pipes[i]) < 0) {
      cs_error_set(err, CS_EINTERNAL, "handoff probe: pipe: %s", strerror(errno));
      goto out;
    }
    kids[i] = fork();
    if (kids[i] < 0) {
      cs_error_set(err, CS_EINTERNAL, "handoff probe: fork: %s", strerror(errno));
      goto out;
    }
    if (kids[i] == 0) handoff_child(sh, i, pipes[i][0], self);
  }
  /* Policy and affinity are set while the children block on their pipes, so
   * neither runs on the core before it is FIFO there. */
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  struct sched_param sp = {.sched_priority = priority};
  for (int i = 0; i < 2; i++) {
    if (sched_setscheduler(kids[i], SCHED_FIFO, &sp) < 0 ||
        sched_setaffinity(kids[i], sizeof set, &set) < 0) {
      cs_error_set(err, CS_EINVAL, "handoff probe: SCHED_FIFO on core %d refused: %s", core,
                   strerror(errno));
      goto out;
    }
  }
  for (int i = 0; i < 2; i++)
    if (write(pipes[i][1], "g", 1) != 1) goto out;
  for (int waited_ms = 0; waited_ms < 5000; waited_ms++) {
    int done = 0;
    for (int i = 0; i < 2; i++) {
      if (kids[i] > 0 && waitpid(kids[i], NULL, WNOHANG) == kids[i]) kids[i] = -1;
      done += kids[i] < 0;
    }
    if (done == 2) break;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  if (kids[0] < 0 && kids[1] < 0 && sh->end_tsc > sh->start_tsc)
    cycles = (sh->end_tsc - sh->start_tsc) / (2ull * (HANDOFF_ROUNDS - 1));
  else
    cs_error_set(err, CS_EINTERNAL, "handoff probe did not finish in 5 s");
out:
  for (int i = 0; i < 2; i++) {
    if (kids[i] > 0) {
      kill(kids[i], SIGKILL);
      waitpid(kids[i], NULL, 0);
    }
    for (int j = 0; j < 2; j++)
      if (pipes[i][j] >= 0) close(pipes[i][j]);
  }
  munmap(sh, sizeof *sh);
  return cycles;
}
