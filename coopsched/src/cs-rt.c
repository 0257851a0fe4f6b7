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

enum cs_errclass cs_rt_runtime_read(int64_t *us, struct cs_error *err) {
  char buf[32];
  int fd = open(CS_RT_RUNTIME, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
  int e = errno;
  if (fd >= 0) close(fd);
  if (n <= 0) return cs_error_set(err, CS_EINTERNAL, "cannot read %s: %s", CS_RT_RUNTIME,
                                  n == 0 ? "empty" : strerror(e));
  buf[n] = '\0';
  char *end;
  *us = strtoll(buf, &end, 10);
  if (end == buf) return cs_error_set(err, CS_EINTERNAL, "%s: not a number", CS_RT_RUNTIME);
  return CS_OK;
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
