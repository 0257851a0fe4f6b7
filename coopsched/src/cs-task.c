/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-task.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* pidfd_open(2) of one thread rather than of its process (Linux 6.9). */
#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif

/* PIDFD_GET_INFO (Linux 6.13) with its exit information (6.15), for C
 * libraries whose headers predate them; the layout is the kernel's ABI. */
struct cs_pidfd_info {
  uint64_t mask;
  uint64_t cgroupid;
  uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
  int32_t exit_code;
  uint32_t coredump_mask;
  uint32_t spare;
};
#define CS_PIDFD_GET_INFO _IOWR(0xFF, 11, struct cs_pidfd_info)
#define CS_PIDFD_INFO_EXIT (1ull << 3)

/* The kernel's flag of a task in do_exit (include/linux/sched.h). */
#define CS_PF_EXITING 0x00000004u

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

static int open_task_file(pid_t pid, pid_t tid, const char *name) {
  char path[96];
  snprintf(path, sizeof path, "/proc/%d/task/%d/%s", (int)pid, (int)tid, name);
  return open(path, O_RDONLY | O_CLOEXEC);
}

/* Reads a file held open from its start. */
static int pread_small(int fd, char *buf, size_t size) {
  if (fd < 0) return -EBADF;
  ssize_t n = pread(fd, buf, size - 1, 0);
  if (n < 0) return -errno;
  buf[n] = '\0';
  return (int)n;
}

static int pidfd_exited(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, 0) == 1;
}

enum cs_errclass cs_task_open(struct cs_task *t, pid_t tid, struct cs_error *err) {
  memset(t, 0, sizeof *t);
  t->pidfd = t->proc_pidfd = t->stat_fd = t->sched_fd = t->wchan_fd = -1;
  if (tid <= 0) return cs_error_set(err, CS_EINVAL, "tid %d is not a thread id", (int)tid);
  pid_t pid = tgid_of(tid);
  if (pid <= 0) return cs_error_set(err, CS_ENOENT, "thread %d does not exist", (int)tid);
  t->tid = tid;
  t->pid = pid;
  t->proc_pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (t->proc_pidfd < 0) {
    int e = errno;
    cs_task_close(t);
    return cs_error_set(err, e == ESRCH ? CS_ENOENT : CS_EINTERNAL, "thread %d: pidfd_open(%d): %s",
                        (int)tid, (int)pid, strerror(e));
  }
  t->pidfd = (int)syscall(SYS_pidfd_open, tid, PIDFD_THREAD);
  t->stat_fd = open_task_file(pid, tid, "stat");
  t->sched_fd = open_task_file(pid, tid, "schedstat");
  t->wchan_fd = open_task_file(pid, tid, "wchan");
  /* The descriptors were opened after the look-up: if the number was given
   * to another thread in between, the process's pidfd names a process that
   * the thread is not part of, or the thread is already gone. */
  if (t->stat_fd < 0 || t->sched_fd < 0 || t->wchan_fd < 0 || tgid_of(tid) != pid ||
      cs_task_gone(t)) {
    cs_task_close(t);
    return cs_error_set(err, CS_ENOENT, "thread %d does not exist", (int)tid);
  }
  struct sched_param sp;
  t->orig_policy = sched_getscheduler(tid);
  if (t->orig_policy < 0 || sched_getparam(tid, &sp) < 0 ||
      sched_getaffinity(tid, sizeof t->orig_affinity, &t->orig_affinity) < 0) {
    int e = errno;
    cs_task_close(t);
    return cs_error_set(err, CS_ENOENT, "thread %d: %s", (int)tid, strerror(e));
  }
  t->orig_priority = sp.sched_priority;
  return CS_OK;
}

void cs_task_close(struct cs_task *t) {
  int *fds[] = {&t->pidfd, &t->proc_pidfd, &t->stat_fd, &t->sched_fd, &t->wchan_fd};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) {
    if (*fds[i] >= 0) close(*fds[i]);
    *fds[i] = -1;
  }
}

int cs_task_gone(const struct cs_task *t) {
  if (t->pidfd >= 0) return pidfd_exited(t->pidfd);
  if (t->proc_pidfd < 0 || pidfd_exited(t->proc_pidfd)) return 1;
  /* The process lives, so its id is not free for reuse and tgkill asks
   * about a thread of that very process. */
  if (syscall(SYS_tgkill, t->pid, t->tid, 0) < 0 && errno == ESRCH) return 1;
  /* Only a process's main thread stays behind as a zombie. */
  if (t->tid != t->pid) return 0;
  char st = cs_task_state(t);
  return st == 0 || st == 'Z' || st == 'X';
}

char cs_task_state(const struct cs_task *t) {
  char buf[1024];
  if (pread_small(t->stat_fd, buf, sizeof buf) <= 0) return 0;
  const char *p = strrchr(buf, ')');
  return (p && p[1] == ' ') ? p[2] : 0;
}

int cs_task_is_stopped(const struct cs_task *t) {
  char s = cs_task_state(t);
  return s == 'T' || s == 't';
}

int cs_task_signal_stop(const struct cs_task *t, int stop) {
  if (t->proc_pidfd < 0) return -EBADF;
  return syscall(SYS_pidfd_send_signal, t->proc_pidfd, stop ? SIGSTOP : SIGCONT, NULL, 0) < 0
             ? -errno
             : 0;
}

int cs_task_is_fifo(const struct cs_task *t) {
  return !cs_task_gone(t) && sched_getscheduler(t->tid) == SCHED_FIFO;
}

int cs_task_set_fifo(const struct cs_task *t, int priority) {
  if (cs_task_gone(t)) return -ESRCH;
  struct sched_param sp = {.sched_priority = priority};
  return sched_setscheduler(t->tid, SCHED_FIFO, &sp) < 0 ? -errno : 0;
}

int cs_task_set_waiting(const struct cs_task *t, int priority) {
  if (priority > 0) return cs_task_set_fifo(t, priority);
  if (cs_task_gone(t)) return -ESRCH;
  struct sched_param sp = {.sched_priority = 0};
  return sched_setscheduler(t->tid, SCHED_OTHER, &sp) < 0 ? -errno : 0;
}

int cs_task_set_core(const struct cs_task *t, int core) {
  if (cs_task_gone(t)) return -ESRCH;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  return sched_setaffinity(t->tid, sizeof set, &set) < 0 ? -errno : 0;
}

int cs_task_demote(const struct cs_task *t) {
  if (cs_task_gone(t)) return -ESRCH;
  struct sched_param sp = {.sched_priority = 0};
  if (sched_setscheduler(t->tid, SCHED_OTHER, &sp) < 0) return -errno;
  return sched_setaffinity(t->tid, sizeof t->orig_affinity, &t->orig_affinity) < 0 ? -errno : 0;
}

int cs_task_restore(const struct cs_task *t) {
  if (cs_task_gone(t)) return -ESRCH;
  struct sched_param sp = {.sched_priority = t->orig_priority};
  if (sched_setscheduler(t->tid, t->orig_policy, &sp) < 0) return -errno;
  return sched_setaffinity(t->tid, sizeof t->orig_affinity, &t->orig_affinity) < 0 ? -errno : 0;
}

int cs_task_schedstat(const struct cs_task *t, struct cs_task_sched *out) {
  char buf[128];
  int n = pread_small(t->sched_fd, buf, sizeof buf);
  if (n < 0) return n;
  unsigned long long cpu, wait, switches;
  if (sscanf(buf, "%llu %llu %llu", &cpu, &wait, &switches) != 3) return -ESRCH;
  out->cpu_ns = cpu;
  out->wait_ns = wait;
  out->switches = switches;
  return 0;
}

/* Splits the fields after the command name of a /proc stat line in buf:
 * field[k] points at field k + 3 (stat(5) numbers from 1; 3 is the state). */
static int stat_fields(char *buf, char **field, int max) {
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return 0;
  int n = 0;
  for (p += 2; *p && n < max; n++) {
    field[n] = p;
    while (*p && *p != ' ') p++;
    if (*p) *p++ = '\0';
  }
  return n;
}

int cs_task_stat(const struct cs_task *t, struct cs_task_stat *out) {
  char buf[1024];
  char *f[50];
  int n = pread_small(t->stat_fd, buf, sizeof buf);
  if (n < 0) return n;
  /* 3 state, 9 flags, 39 processor, 40 rt_priority, 41 policy */
  if (stat_fields(buf, f, 50) < 39) return -ESRCH;
  out->state = f[0][0];
  out->exiting = (strtoul(f[6], NULL, 10) & CS_PF_EXITING) != 0;
  out->cpu = (int)strtol(f[36], NULL, 10);
  out->rt_priority = (int)strtol(f[37], NULL, 10);
  out->policy = (int)strtol(f[38], NULL, 10);
  return 0;
}

int cs_task_runnable(const struct cs_task *t) {
  char buf[64];
  return pread_small(t->wchan_fd, buf, sizeof buf) > 0 && strcmp(buf, "0") == 0;
}

/* A zombie's wait status from field 52 (exit_code) of its /proc stat. */
static int zombie_status(const struct cs_task *t, int *status) {
  char buf[1024];
  char *f[50];
  if (pread_small(t->stat_fd, buf, sizeof buf) <= 0 || stat_fields(buf, f, 50) < 50) return 0;
  if (f[0][0] != 'Z') return 0;
  *status = (int)strtol(f[49], NULL, 10);
  return 1;
}

static int reaped_status(const struct cs_task *t, int *status) {
  struct cs_pidfd_info info;
  memset(&info, 0, sizeof info);
  info.mask = CS_PIDFD_INFO_EXIT;
  if (ioctl(t->proc_pidfd, CS_PIDFD_GET_INFO, &info) != 0 || !(info.mask & CS_PIDFD_INFO_EXIT))
    return 0;
  *status = info.exit_code;
  return 1;
}

int cs_task_exit_status(const struct cs_task *t, int *status) {
  if (t->proc_pidfd < 0) return -1;
  if (!pidfd_exited(t->proc_pidfd)) return 0;
  /* A zombie has no exit information in its pidfd yet; once reaped it has
   * no /proc stat: the second look at the pidfd covers a reap in between. */
  if (reaped_status(t, status) || (t->tid == t->pid && zombie_status(t, status)) ||
      reaped_status(t, status))
    return 1;
  return -1;
}
