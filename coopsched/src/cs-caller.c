/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-caller.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cs-chain.h"
#include "cs-pidns.h"

static const char *const kNames[CS_REFUSED_N] = {
    [CS_REFUSED_NONE] = "",
    [CS_REFUSED_METHOD] = "method",
    [CS_REFUSED_CALLER] = "caller",
    [CS_REFUSED_PID_NS] = "pid-ns",
    [CS_REFUSED_THREAD] = "thread",
    [CS_REFUSED_PKTBUF_PATH] = "pktbuf-path",
    [CS_REFUSED_INSTANCE_DIR] = "instance-dir",
    [CS_REFUSED_PKTBUF_FILE] = "pktbuf-file",
};

const char *cs_refusal_name(enum cs_refusal r) {
  return r >= CS_REFUSED_NONE && r < CS_REFUSED_N ? kNames[r] : "?";
}

/* Sets *err to "check NAME: ..." and returns r. */
__attribute__((format(printf, 3, 4))) static enum cs_refusal refuse(struct cs_error *err,
                                                                    enum cs_refusal r,
                                                                    const char *fmt, ...) {
  char why[sizeof err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  cs_error_set(err, CS_EINVAL, "check %s: %s", cs_refusal_name(r), why);
  return r;
}

int cs_stat_starttime(const char *text, uint64_t *start) {
  const char *p = strrchr(text, ')'); /* the command may hold spaces and parentheses */
  if (!p || p[1] != ' ') return -1;
  unsigned long long v;
  /* after ") ": the state is field 3, the start time field 22, the 20th after the state */
  if (sscanf(p + 2, "%*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
             &v) != 1)
    return -1;
  *start = v;
  return 0;
}

int cs_proc_starttime(const char *proc, pid_t pid, pid_t tid, uint64_t *start) {
  char path[512], buf[2048];
  if (tid > 0) snprintf(path, sizeof path, "%s/%d/task/%d/stat", proc, (int)pid, (int)tid);
  else snprintf(path, sizeof path, "%s/%d/stat", proc, (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  int e = errno;
  close(fd);
  if (n < 0) return -e;
  buf[n] = '\0';
  return cs_stat_starttime(buf, start) == 0 ? 0 : -EINVAL;
}

enum cs_refusal cs_caller_check_alive(const char *proc, const struct cs_caller *c,
                                      struct cs_error *err) {
  uint64_t now;
  int rc = cs_proc_starttime(proc, c->pid, 0, &now);
  if (rc < 0)
    return refuse(err, CS_REFUSED_CALLER, "the calling process %d is gone (%s)", (int)c->pid,
                  strerror(-rc));
  if (now != c->start)
    return refuse(err, CS_REFUSED_CALLER,
                  "pid %d names another process now (started at tick %llu, the caller at %llu)",
                  (int)c->pid, (unsigned long long)now, (unsigned long long)c->start);
  return CS_REFUSED_NONE;
}

enum cs_refusal cs_caller_check_pid_ns(const char *proc, const struct cs_caller *c,
                                       uint64_t pid_ns, uint64_t own_pid_ns,
                                       struct cs_error *err) {
  char path[512];
  snprintf(path, sizeof path, "%s/%d/ns/pid", proc, (int)c->pid);
  struct stat st;
  if (stat(path, &st) != 0)
    return refuse(err, CS_REFUSED_PID_NS, "cannot read the PID namespace of process %d: %s",
                  (int)c->pid, strerror(errno));
  uint64_t want = pid_ns ? pid_ns : own_pid_ns;
  if ((uint64_t)st.st_ino != want)
    return refuse(err, CS_REFUSED_PID_NS,
                  "pid_ns %llu%s is not the PID namespace of the calling process %d, pid:[%llu]",
                  (unsigned long long)pid_ns, pid_ns ? "" : " (keel-coopsched's own)", (int)c->pid,
                  (unsigned long long)st.st_ino);
  return CS_REFUSED_NONE;
}

enum cs_refusal cs_caller_check_thread(const char *proc, const struct cs_caller *c, pid_t ns_tid,
                                       pid_t *host_tid, uint64_t *tid_start,
                                       struct cs_error *err) {
  if (ns_tid <= 0) return refuse(err, CS_REFUSED_THREAD, "tid %d is not a thread id", (int)ns_tid);
  char path[512];
  snprintf(path, sizeof path, "%s/%d/task", proc, (int)c->pid);
  DIR *d = opendir(path);
  if (!d)
    return refuse(err, CS_REFUSED_THREAD, "cannot list the threads of process %d: %s",
                  (int)c->pid, strerror(errno));
  pid_t found = 0;
  struct dirent *e;
  while (!found && (e = readdir(d))) {
    if (!isdigit((unsigned char)e->d_name[0])) continue;
    pid_t first, last;
    snprintf(path, sizeof path, "%s/%d/task/%.32s/status", proc, (int)c->pid, e->d_name);
    if (cs_pidns_nspid(path, &first, &last) && last == ns_tid) found = (pid_t)atoi(e->d_name);
  }
  closedir(d);
  if (!found)
    return refuse(err, CS_REFUSED_THREAD,
                  "tid %d is not a thread of the calling process %d (in its PID namespace)",
                  (int)ns_tid, (int)c->pid);
  uint64_t start;
  if (cs_proc_starttime(proc, c->pid, found, &start) < 0 || start < c->start)
    return refuse(err, CS_REFUSED_THREAD, "thread %d of process %d is gone or not its own",
                  (int)found, (int)c->pid);
  *host_tid = found;
  *tid_start = start;
  return CS_REFUSED_NONE;
}

enum cs_refusal cs_caller_check_path(const char *pktbuf_dir, const char *group, const char *path,
                                     struct cs_error *err) {
  if (!group[0] || strchr(group, '/') || strstr(group, "..") || !strcmp(group, "."))
    return refuse(err, CS_REFUSED_PKTBUF_PATH,
                  "group \"%s\" cannot name an instance directory (empty, '/' or '..')", group);
  char want[1024];
  int n = snprintf(want, sizeof want, "%s/%s/pktbuf", pktbuf_dir, group);
  if (n < 0 || (size_t)n >= sizeof want || strcmp(path, want) != 0)
    return refuse(err, CS_REFUSED_PKTBUF_PATH, "pktbuf %s is not %s, the buffer of group \"%s\"",
                  path, want, group);
  return CS_REFUSED_NONE;
}

/* Opens PROC/PID/root, the caller's root directory, as an O_PATH descriptor; -errno. */
static int caller_root(const char *proc, const struct cs_caller *c) {
  char path[512];
  snprintf(path, sizeof path, "%s/%d/root", proc, (int)c->pid);
  int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  return fd < 0 ? -errno : fd;
}

enum cs_refusal cs_caller_check_instance_dir(const char *proc, const struct cs_caller *c,
                                             const char *pktbuf_dir, const char *group,
                                             struct cs_error *err) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/%s", pktbuf_dir, group);
  struct stat own, theirs;
  int fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &own) != 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    return refuse(err, CS_REFUSED_INSTANCE_DIR, "keel-coopsched has no instance directory %s: %s",
                  dir, strerror(e));
  }
  close(fd);
  int root = caller_root(proc, c);
  if (root < 0)
    return refuse(err, CS_REFUSED_INSTANCE_DIR, "cannot open the root of process %d: %s",
                  (int)c->pid, strerror(-root));
  fd = cs_open_in_root(root, dir, O_PATH | O_DIRECTORY);
  close(root);
  if (fd < 0)
    return refuse(err, CS_REFUSED_INSTANCE_DIR,
                  "process %d does not see the instance directory %s: %s", (int)c->pid, dir,
                  strerror(-fd));
  int ok = fstat(fd, &theirs) == 0 && theirs.st_dev == own.st_dev && theirs.st_ino == own.st_ino;
  close(fd);
  if (!ok)
    return refuse(err, CS_REFUSED_INSTANCE_DIR,
                  "%s in the root of process %d is not the instance's directory (another "
                  "instance's containers have it, not this one)",
                  dir, (int)c->pid);
  return CS_REFUSED_NONE;
}

enum cs_refusal cs_caller_check_pktbuf_file(const char *proc, const struct cs_caller *c,
                                            const char *path, uint64_t *dev, uint64_t *ino,
                                            struct cs_error *err) {
  int root = caller_root(proc, c);
  if (root < 0)
    return refuse(err, CS_REFUSED_PKTBUF_FILE, "cannot open the root of process %d: %s",
                  (int)c->pid, strerror(-root));
  int fd = cs_open_in_root(root, path, O_PATH);
  close(root);
  if (fd < 0)
    return refuse(err, CS_REFUSED_PKTBUF_FILE, "pktbuf %s in the root of process %d: %s", path,
                  (int)c->pid, strerror(-fd));
  struct stat st;
  int rc = fstat(fd, &st);
  close(fd);
  if (rc != 0 || !S_ISREG(st.st_mode))
    return refuse(err, CS_REFUSED_PKTBUF_FILE,
                  "pktbuf %s in the root of process %d is not a regular file%s", path,
                  (int)c->pid, rc == 0 && S_ISLNK(st.st_mode) ? " (a symlink)" : "");
  *dev = (uint64_t)st.st_dev;
  *ino = (uint64_t)st.st_ino;
  return CS_REFUSED_NONE;
}

enum cs_refusal cs_caller_check(const struct cs_caller_policy *p, const struct cs_caller *c,
                                const struct cs_caller_ask *ask, struct cs_caller_grant *out,
                                struct cs_error *err) {
  enum cs_refusal r;
  memset(out, 0, sizeof *out);
  if ((r = cs_caller_check_alive(p->proc, c, err)) ||
      (r = cs_caller_check_pid_ns(p->proc, c, ask->pid_ns, p->own_pid_ns, err)) ||
      (r = cs_caller_check_thread(p->proc, c, ask->tid, &out->host_tid, &out->tid_start, err)) ||
      (r = cs_caller_check_path(p->pktbuf_dir, ask->group, ask->pktbuf_path, err)) ||
      (!p->pod_dirs &&
       (r = cs_caller_check_instance_dir(p->proc, c, p->pktbuf_dir, ask->group, err))) ||
      (r = cs_caller_check_pktbuf_file(p->proc, c, ask->pktbuf_path, &out->buf_dev,
                                       &out->buf_ino, err)))
    return r;
  /* The pid was read at each step: it still names the process that connected. */
  return cs_caller_check_alive(p->proc, c, err);
}
