/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-pidns.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t ns_inode(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

uint64_t cs_pidns_self(void) { return ns_inode("/proc/self/ns/pid"); }

int cs_pidns_nspid(const char *status_path, pid_t *first, pid_t *last) {
  char buf[4096];
  int fd = open(status_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *p = strstr(buf, "\nNSpid:");
  if (!p) return 0;
  p += 7;
  char *end;
  long v = strtol(p, &end, 10);
  if (end == p) return 0;
  *first = *last = (pid_t)v;
  for (p = end; *p == ' ' || *p == '\t'; p = end) {
    v = strtol(p, &end, 10);
    if (end == p) break;
    *last = (pid_t)v;
  }
  return 1;
}

/* Looks for ns_tid among the threads of process pid; the host id or 0. */
static pid_t find_in_process(const char *pid, pid_t ns_tid) {
  char path[sizeof "/proc//task//status" + 2 * sizeof ((struct dirent *)0)->d_name];
  snprintf(path, sizeof path, "/proc/%s/task", pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  pid_t found = 0;
  struct dirent *e;
  while (!found && (e = readdir(d))) {
    if (!isdigit((unsigned char)e->d_name[0])) continue;
    pid_t first, last;
    snprintf(path, sizeof path, "/proc/%s/task/%s/status", pid, e->d_name);
    if (cs_pidns_nspid(path, &first, &last) && last == ns_tid) found = first;
  }
  closedir(d);
  return found;
}

enum cs_errclass cs_pidns_host_tid(uint64_t pid_ns, pid_t ns_tid, pid_t *host_tid,
                                   struct cs_error *err) {
  if (ns_tid <= 0) return cs_error_set(err, CS_EINVAL, "tid %d is not a thread id", (int)ns_tid);
  DIR *proc = opendir("/proc");
  if (!proc) return cs_error_set(err, CS_EINTERNAL, "cannot list /proc");
  pid_t found = 0;
  struct dirent *e;
  while (!found && (e = readdir(proc))) {
    if (!isdigit((unsigned char)e->d_name[0])) continue;
    char path[300];
    snprintf(path, sizeof path, "/proc/%s/ns/pid", e->d_name);
    if (ns_inode(path) == pid_ns) found = find_in_process(e->d_name, ns_tid);
  }
  closedir(proc);
  if (!found)
    return cs_error_set(err, CS_ENOENT, "no thread %d in PID namespace pid:[%llu]", (int)ns_tid,
                        (unsigned long long)pid_ns);
  *host_tid = found;
  return CS_OK;
}

pid_t cs_pidns_inner_tid(pid_t host_tid) {
  char path[64];
  pid_t first, last;
  snprintf(path, sizeof path, "/proc/%d/status", (int)host_tid);
  return cs_pidns_nspid(path, &first, &last) ? last : -1;
}
