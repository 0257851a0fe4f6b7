/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-task.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* pidfd_open(2) of one thread rather than of its process (Linux 6.9). */
#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif

static int read_small(const char *path, char *buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = read(fd, buf, size - 1);
  int e = errno;
  close(fd);
  if (n < 0) return -e;
  buf[n] = '\0';
  return (int)n;
}

static pid_t tgid_of(pid_t tid) {
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/status", (int)tid);
  if (read_small(path, buf, sizeof buf) < 0) return -1;
  const char *p = strstr(buf, "\nTgid:");
  return p ? (pid_t)strtol(p + 6, NULL, 10) : -1;
}

enum cs_errclass cs_task_open(struct cs_task *t, pid_t tid, struct cs_error *err) {
  memset(t, 0, sizeof *t);
  t->pidfd = -1;
  if (tid <= 0) return cs_error_set(err, CS_EINVAL, "tid %d is not a thread id", (int)tid);
  pid_t pid = tgid_of(tid);
  if (pid <= 0) return cs_error_set(err, CS_ENOENT, "thread %d does not exist", (int)tid);
  t->tid = tid;
  t->pid = pid;
  struct sched_param sp;
  t->orig_policy = sched_getscheduler(tid);
  if (t->orig_policy < 0 || sched_getparam(tid, &sp) < 0 ||
      sched_getaffinity(tid, sizeof t->orig_affinity, &t->orig_affinity) < 0)
    return cs_error_set(err, CS_ENOENT, "thread %d: %s", (int)tid, strerror(errno));
  t->orig_priority = sp.sched_priority;
  t->pidfd = (int)syscall(SYS_pidfd_open, tid, PIDFD_THREAD);
  return CS_OK;
}

void cs_task_close(struct cs_task *t) {
  if (t->pidfd >= 0) close(t->pidfd);
  t->pidfd = -1;
}

int cs_task_gone(const struct cs_task *t) {
  if (t->pidfd >= 0) {
    struct pollfd p = {.fd = t->pidfd, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
  }
  if (syscall(SYS_tgkill, t->pid, t->tid, 0) < 0 && errno == ESRCH) return 1;
  /* Only a process's main thread stays behind as a zombie. */
  if (t->tid != t->pid) return 0;
  char st = cs_task_state(t);
  return st == 0 || st == 'Z' || st == 'X';
}

char cs_task_state(const struct cs_task *t) {
  char path[96], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)t->pid, (int)t->tid);
  if (read_small(path, buf, sizeof buf) < 0) return 0;
  const char *p = strrchr(buf, ')');
  return (p && p[1] == ' ') ? p[2] : 0;
}

int cs_task_is_stopped(const struct cs_task *t) {
  char s = cs_task_state(t);
  return s == 'T' || s == 't';
}

int cs_task_signal_stop(const struct cs_task *t, int stop) {
  return kill(t->pid, stop ? SIGSTOP : SIGCONT) < 0 ? -errno : 0;
}

int cs_task_set_fifo(const struct cs_task *t, int priority) {
  struct sched_param sp = {.sched_priority = priority};
  return sched_setscheduler(t->tid, SCHED_FIFO, &sp) < 0 ? -errno : 0;
}

int cs_task_set_core(const struct cs_task *t, int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  return sched_setaffinity(t->tid, sizeof set, &set) < 0 ? -errno : 0;
}

int cs_task_demote(const struct cs_task *t) {
  struct sched_param sp = {.sched_priority = 0};
  if (sched_setscheduler(t->tid, SCHED_OTHER, &sp) < 0) return -errno;
  return sched_setaffinity(t->tid, sizeof t->orig_affinity, &t->orig_affinity) < 0 ? -errno : 0;
}

int cs_task_restore(const struct cs_task *t) {
  struct sched_param sp = {.sched_priority = t->orig_priority};
  if (sched_setscheduler(t->tid, t->orig_policy, &sp) < 0) return -errno;
  return sched_setaffinity(t->tid, sizeof t->orig_affinity, &t->orig_affinity) < 0 ? -errno : 0;
}

uint64_t cs_task_cpu_ns(const struct cs_task *t) {
  char path[96], buf[128];
  snprintf(path, sizeof path, "/proc/%d/task/%d/schedstat", (int)t->pid, (int)t->tid);
  if (read_small(path, buf, sizeof buf) < 0) return 0;
  return strtoull(buf, NULL, 10);
}
