/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-guardian.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cs-caller.h"
#include "cs-rt.h"

/* One message from keel-coopsched: H(old), R(eleased) or S(top). */
struct guard_msg {
  char op;
  pid_t tid, pid;
  unsigned long long start; /* the thread's start time (clock ticks after boot) */
  int policy, priority;
  cpu_set_t affinity;
};

/* Field 22 of /proc/TID/stat: when the thread started; 0 if it is gone. */
static unsigned long long start_time(pid_t tid) {
  uint64_t v;
  return cs_proc_starttime("/proc", tid, 0, &v) == 0 ? v : 0;
}

static void send_msg(struct cs_guardian *g, const struct guard_msg *m) {
  if (g->fd < 0) return;
  while (send(g->fd, m, sizeof *m, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

void cs_guardian_hold(struct cs_guardian *g, const struct cs_task *t) {
  struct guard_msg m = {.op = 'H', .tid = t->tid, .pid = t->pid, .start = start_time(t->tid),
                        .policy = t->orig_policy, .priority = t->orig_priority,
                        .affinity = t->orig_affinity};
  send_msg(g, &m);
}

void cs_guardian_release(struct cs_guardian *g, const struct cs_task *t) {
  struct guard_msg m = {.op = 'R', .tid = t->tid};
  send_msg(g, &m);
}

void cs_guardian_stop(struct cs_guardian *g) {
  if (g->fd < 0) return;
  struct guard_msg m = {.op = 'S'};
  send_msg(g, &m);
  close(g->fd);
  g->fd = -1;
  /* It exits at once; reap it so no zombie is left (it is our child). */
  while (waitpid(g->pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

/* Gives a thread back what keel-coopsched took; 1 if it did. */
static int restore(const struct guard_msg *m) {
  if (m->start == 0 || start_time(m->tid) != m->start) return 0; /* gone, or the tid reused */
  struct sched_param sp = {.sched_priority = m->priority};
  sched_setscheduler(m->tid, m->policy, &sp);
  sched_setaffinity(m->tid, sizeof m->affinity, &m->affinity);
  kill(m->pid, SIGCONT);
  return 1;
}

static void guard(int fd, int rt_lifted, int64_t rt_saved_us) {
  static struct guard_msg held[CS_GUARDIAN_MAX_TASKS];
  int n = 0, full = 0;
  for (;;) {
    struct guard_msg m;
    ssize_t r = recv(fd, &m, sizeof m, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == (ssize_t)sizeof m && m.op == 'S') _exit(0);
    if (r != (ssize_t)sizeof m) break; /* keel-coopsched's end closed: it died */
    if (m.op == 'H') {
      int i = 0;
      while (i < n && held[i].tid != m.tid) i++;
      if (i < n) {
        held[i] = m;
      } else if (n < CS_GUARDIAN_MAX_TASKS) {
        held[n++] = m;
      } else if (!full) {
        full = 1;
        dprintf(2, "keel-coopsched's guardian: more than %d threads held; the newest are not tracked\n",
                CS_GUARDIAN_MAX_TASKS);
      }
    } else if (m.op == 'R') {
      for (int i = 0; i < n; i++)
        if (held[i].tid == m.tid) {
          held[i] = held[--n];
          break;
        }
    }
  }
  int restored = 0;
  for (int i = 0; i < n; i++) restored += restore(&held[i]);
  struct cs_error err;
  int rt_ok = !rt_lifted || cs_rt_runtime_write(rt_saved_us, &err) == CS_OK;
  dprintf(2,
          "keel-coopsched's guardian: keel-coopsched ended without releasing the host: %d of %d "
          "thread(s) given back their policy and continued%s%s\n",
          restored, n, rt_lifted ? (rt_ok ? "; RT throttling restored" : "; RT throttling NOT restored: ") : "",
          rt_lifted && !rt_ok ? err.msg : "");
  _exit(0);
}

enum cs_errclass cs_guardian_start(struct cs_guardian *g, int rt_lifted, int64_t rt_saved_us,
                                   struct cs_error *err) {
  g->fd = -1;
  g->pid = -1;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
    return cs_error_set(err, CS_EINTERNAL, "guardian: socketpair: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return cs_error_set(err, CS_EINTERNAL, "guardian: fork: %s", strerror(errno));
  }
  if (pid == 0) {
    /* Only its end of the socket stays open: the core locks and everything else keel-coopsched
     * holds must close when keel-coopsched dies, not live on here. */
    if (dup2(sv[1], 3) < 0) _exit(3);
    syscall(SYS_close_range, 4U, ~0U, 0U);
    prctl(PR_SET_NAME, "cs-guardian", 0, 0, 0);
    /* A terminal's ^C or a stop of keel-coopsched's process group must not end it first. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    struct sched_param sp = {.sched_priority = 0};
    sched_setscheduler(0, SCHED_OTHER, &sp);
    guard(3, rt_lifted, rt_saved_us);
  }
  close(sv[1]);
  g->fd = sv[0];
  g->pid = pid;
  return CS_OK;
}
