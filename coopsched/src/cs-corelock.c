/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-corelock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CS_CORELOCK_PID_WAIT_MS 100

/* Creates dir and its missing parents, mode 0755. */
static int make_dirs(const char *dir) {
  char part[4096];
  size_t len = strlen(dir);
  if (len == 0 || len >= sizeof part) return -ENAMETOOLONG;
  for (size_t i = 1; i <= len; i++) {
    if (i != len && dir[i] != '/') continue;
    memcpy(part, dir, i);
    part[i] = '\0';
    if (mkdir(part, 0755) == 0) {
      if (chmod(part, 0755) < 0) return -errno; /* whatever the umask */
    } else if (errno != EEXIST) {
      return -errno;
    }
  }
  return 0;
}

/* The pid a holder wrote into the lock file, 0 if none yet. It writes it
 * right after taking the lock: wait a little for it. */
static long holder_pid(int fd) {
  for (int ms = 0; ms <= CS_CORELOCK_PID_WAIT_MS; ms++) {
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n > 0) {
      buf[n] = '\0';
      long pid = strtol(buf, NULL, 10);
      if (pid > 0) return pid;
    }
    struct timespec one = {0, 1000000};
    nanosleep(&one, NULL);
  }
  return 0;
}

int cs_corelock_take(const char *dir, int core, struct cs_error *err) {
  char path[4096];
  int rc = make_dirs(dir);
  if (rc < 0) {
    cs_error_set(err, CS_EINVAL, "cannot create the lock directory %s: %s", dir, strerror(-rc));
    return -1;
  }
  snprintf(path, sizeof path, "%s/coopsched-cpu%d.lock", dir, core);
  int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    cs_error_set(err, CS_EINVAL, "cannot open the lock of core %d, %s: %s", core, path,
                 strerror(errno));
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    int e = errno;
    if (e == EWOULDBLOCK) {
      long pid = holder_pid(fd);
      char who[32] = "an unknown pid";
      if (pid > 0) snprintf(who, sizeof who, "pid %ld", pid);
      cs_error_set(err, CS_EEXIST, "core %d is managed by another keel-coopsched (%s holds %s)",
                   core, who, path);
    } else {
      cs_error_set(err, CS_EINTERNAL, "flock %s: %s", path, strerror(e));
    }
    close(fd);
    return -1;
  }
  char buf[32];
  int len = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)len, 0) != len) {
    cs_error_set(err, CS_EINTERNAL, "cannot write our pid into %s: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

void cs_corelock_release(int fd) {
  if (fd < 0) return;
  /* No pid of ours is left behind to be mistaken for the next holder's. */
  if (ftruncate(fd, 0) < 0) perror("keel-coopsched: truncate core lock");
  close(fd);
}
