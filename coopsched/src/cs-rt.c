/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-rt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CS_RT_RUNTIME "/proc/sys/kernel/sched_rt_runtime_us"

/* Reads the integer in file path (a sysctl or cgroup file) into *v. */
static enum cs_errclass read_i64(const char *path, int64_t *v, struct cs_error *err) {
  char buf[32];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
  int e = errno;
  if (fd >= 0) close(fd);
  if (n <= 0) return cs_error_set(err, CS_EINTERNAL, "cannot read %s: %s", path,
                                  n == 0 ? "empty" : strerror(e));
  buf[n] = '\0';
  char *end;
  *v = strtoll(buf, &end, 10);
  if (end == buf) return cs_error_set(err, CS_EINTERNAL, "%s: not a number", path);
  return CS_OK;
}

enum cs_errclass cs_rt_runtime_read(int64_t *us, struct cs_error *err) {
  return read_i64(CS_RT_RUNTIME, us, err);
}

enum cs_errclass cs_rt_runtime_write(int64_t us, struct cs_error *err) {
  char buf[32];
  int len = snprintf(buf, sizeof buf, "%" PRId64 "\n", us);
  int fd = open(CS_RT_RUNTIME, O_WRONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : write(fd, buf, (size_t)len);
  int e = errno;
  if (fd >= 0) close(fd);
  if (n != len)
    return cs_error_set(err, CS_EINTERNAL, "cannot write %" PRId64 " to %s: %s", us,
                        CS_RT_RUNTIME, n < 0 ? strerror(e) : "short write");
  return CS_OK;
}

/* The cgroup v1 cpu controller's path of /proc/TID/cgroup, e.g. "4:cpu,cpuacct:/docker/ID". */
static int cpu_cgroup_of(pid_t tid, char *out, size_t len) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/cgroup", (int)tid);
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  char line[1024];
  int found = -1;
  while (found < 0 && fgets(line, sizeof line, f)) {
    char *ctl = strchr(line, ':');
    char *dir = ctl ? strchr(ctl + 1, ':') : NULL;
    if (!dir) continue;
    *dir++ = '\0';
    dir[strcspn(dir, "\n")] = '\0';
    for (char *save = NULL, *c = strtok_r(ctl + 1, ",", &save); c; c = strtok_r(NULL, ",", &save))
      if (strcmp(c, "cpu") == 0) {
        snprintf(out, len, "%s", dir);
        found = 0;
        break;
      }
  }
  fclose(f);
  return found;
}

void cs_rt_explain_eperm(pid_t tid, char *out, size_t len) {
  int64_t us = 0;
  struct cs_error err;
  char cg[512];
  out[0] = '\0';
  if (cs_rt_runtime_read(&us, &err) != CS_OK || us < 0 || cpu_cgroup_of(tid, cg, sizeof cg) < 0 ||
      strcmp(cg, "/") == 0)
    return;
  char file[640];
  snprintf(file, sizeof file, "/sys/fs/cgroup/cpu%s/cpu.rt_runtime_us", cg);
  int64_t budget;
  if (read_i64(file, &budget, &err) == CS_OK) {
    if (budget != 0) return;
  } else if (access("/sys/fs/cgroup/cpu/cpu.rt_runtime_us", F_OK) != 0) {
    return; /* no RT group scheduling: the EPERM has another cause */
  }
  snprintf(out, len,
           " (its cpu cgroup %s has no real-time budget, cpu.rt_runtime_us 0, and the kernel "
           "refuses SCHED_FIFO there while RT throttling is on: run keel-coopsched with "
           "--no-rt-throttle, or give the cgroup and its parents a budget)",
           cg);
}
