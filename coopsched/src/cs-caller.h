/* SPDX-License-Identifier: Apache-2.0 */
/* Who calls on the NF socket (issue 31 item 2). The NF socket is bind-mounted
 * into every NF container, so its callers are tenants: each RegisterThread is
 * checked against the calling process, known from the connection's
 * SO_PEERCRED (its pid in coopsched's PID namespace) and its start time.
 * An NF may announce one of its own threads, in its own PID namespace, for
 * the chain instance whose directory it was given, with a buffer file that
 * is a regular file; nothing else.
 *
 * Every check reads /proc under a root given by the caller ("/proc", or a
 * fake tree in the tests) and returns the check that refused, with a message
 * that names it. */
#ifndef KEEL_CS_CALLER_H_
#define KEEL_CS_CALLER_H_

#include <stdint.h>
#include <sys/types.h>

#include "cs-error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The process at the other end of an NF socket connection. */
struct cs_caller {
  pid_t pid;      /* in coopsched's PID namespace (SO_PEERCRED) */
  uint64_t start; /* field 22 of its /proc stat: clock ticks after boot */
};

/* Why the NF socket refused a call; the names are what Status and the
 * "refused" events report. */
enum cs_refusal {
  CS_REFUSED_NONE = 0,
  CS_REFUSED_METHOD,       /* "method": only RegisterThread is served there */
  CS_REFUSED_CALLER,       /* "caller": unknown, exited, or its pid names another process now */
  CS_REFUSED_PID_NS,       /* "pid-ns": pid_ns is not the caller's own PID namespace */
  CS_REFUSED_THREAD,       /* "thread": tid is no thread of the calling process */
  CS_REFUSED_PKTBUF_PATH,  /* "pktbuf-path": not <pktbuf-dir>/<group>/pktbuf */
  CS_REFUSED_INSTANCE_DIR, /* "instance-dir": the caller does not see the instance's directory */
  CS_REFUSED_PKTBUF_FILE,  /* "pktbuf-file": not a regular file, or not the group's file */
  CS_REFUSED_N
};

/* The name of a refusal, e.g. "pid-ns"; "" for CS_REFUSED_NONE. */
const char *cs_refusal_name(enum cs_refusal r);

/* Reads the start time (field 22) out of the text of a /proc stat file into
 * *start; 0, or -1 if the text is not one. */
int cs_stat_starttime(const char *text, uint64_t *start);

/* Reads the start time of PROC/PID/stat (tid <= 0) or PROC/PID/task/TID/stat
 * into *start; 0 or -errno (-ENOENT once it is gone). */
int cs_proc_starttime(const char *proc, pid_t pid, pid_t tid, uint64_t *start);

/* What coopsched requires of callers on its NF socket. */
struct cs_caller_policy {
  const char *proc;       /* "/proc" */
  const char *pktbuf_dir; /* the agent's chain-buffer root, <pktbuf-dir>, as coopsched sees it */
  /* 0: <pktbuf-dir>/<group> is a host directory coopsched sees too, bind-mounted into
   * that instance's containers only (Docker). 1: each instance directory is its Pod's own
   * (a Kubernetes emptyDir), which coopsched cannot see on the host: the group is bound
   * to the buffer file its first announcer presents instead (see cs_caller_check). */
  int pod_dirs;
  uint64_t own_pid_ns; /* inode of coopsched's PID namespace; pid_ns 0 means it */
};

/* One RegisterThread as the caller asked it. */
struct cs_caller_ask {
  const char *group;
  pid_t tid;       /* in the caller's PID namespace */
  uint64_t pid_ns; /* 0: coopsched's own */
  const char *pktbuf_path;
};

/* What the checks found. */
struct cs_caller_grant {
  pid_t host_tid;     /* the thread, in coopsched's PID namespace */
  uint64_t tid_start; /* its start time */
  uint64_t buf_dev;   /* the buffer file as the caller sees it */
  uint64_t buf_ino;
};

/* The caller still runs with the start time it had when it connected. */
enum cs_refusal cs_caller_check_alive(const char *proc, const struct cs_caller *c,
                                      struct cs_error *err);

/* pid_ns (0: own_pid_ns) is the caller's PID namespace, PROC/PID/ns/pid. */
enum cs_refusal cs_caller_check_pid_ns(const char *proc, const struct cs_caller *c,
                                       uint64_t pid_ns, uint64_t own_pid_ns,
                                       struct cs_error *err);

/* ns_tid, a thread id in the caller's own PID namespace, is a thread of the
 * caller's process: one of PROC/PID/task/T whose NSpid line ends in ns_tid.
 * Stores T in *host_tid and its start time, which cannot precede the
 * process's, in *tid_start. */
enum cs_refusal cs_caller_check_thread(const char *proc, const struct cs_caller *c, pid_t ns_tid,
                                       pid_t *host_tid, uint64_t *tid_start,
                                       struct cs_error *err);

/* path is exactly <pktbuf_dir>/<group>/pktbuf, group a single name other
 * than "." and ".." that holds neither '/' nor "..". */
enum cs_refusal cs_caller_check_path(const char *pktbuf_dir, const char *group, const char *path,
                                     struct cs_error *err);

/* <pktbuf_dir>/<group>, looked up inside the caller's root (PROC/PID/root,
 * symlinks and ".." kept inside it, the last component not followed), is the
 * very directory coopsched has there: same device and inode. Only the
 * instance's own containers have it mounted. */
enum cs_refusal cs_caller_check_instance_dir(const char *proc, const struct cs_caller *c,
                                             const char *pktbuf_dir, const char *group,
                                             struct cs_error *err);

/* path, looked up inside the caller's root as above, is a regular file, not
 * a symlink, FIFO or device (it is not opened: an O_PATH look-up); stores its
 * device and inode. */
enum cs_refusal cs_caller_check_pktbuf_file(const char *proc, const struct cs_caller *c,
                                            const char *path, uint64_t *dev, uint64_t *ino,
                                            struct cs_error *err);

/* Runs every check above in that order (the instance directory's only when
 * !p->pod_dirs), then the caller's liveness again, so that what was read
 * belonged to the process that connected. With p->pod_dirs the caller must
 * compare the buffer file's (dev, ino) in *out with the file the group is
 * bound to. */
enum cs_refusal cs_caller_check(const struct cs_caller_policy *p, const struct cs_caller *c,
                                const struct cs_caller_ask *ask, struct cs_caller_grant *out,
                                struct cs_error *err);

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_CALLER_H_
