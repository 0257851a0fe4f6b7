/* SPDX-License-Identifier: Apache-2.0 */
/* An NF announces its chain buffer by the path it sees. In a container that
 * path lives in the container's mount namespace, under the container's root:
 * on Kubernetes the file is in a hugepages emptyDir whose host path is
 * elsewhere (/var/lib/kubelet/pods/...), so coopsched, a host process, opens
 * the path inside the NF thread's root, /proc/PID/task/TID/root, with
 * openat2(2):
 *
 *  - RESOLVE_IN_ROOT makes "/" and "..", in the path and in every symlink met
 *    on the way, stop at that root. The NF is not trusted: a symlink it
 *    plants (say, to /etc/passwd or to another chain's buffer) resolves
 *    inside its own root and never reaches a host file.
 *  - RESOLVE_NO_MAGICLINKS refuses /proc/PID/fd/N-style links, which jump to
 *    whatever file they name wherever it is. RESOLVE_IN_ROOT refuses them
 *    today too, but openat2(2) asks callers to say so explicitly.
 *  - O_NOFOLLOW still refuses a symlink as the last component, as the plain
 *    open(2) before did: the buffer itself must be a regular file. It is
 *    looked up as an O_PATH descriptor and opened for reading and writing,
 *    through that descriptor, only once fstat says it is a regular file.
 *
 * RESOLVE_NO_XDEV is not used: a real buffer is always across a mount point
 * from the NF's root (the agent's bind mount under Docker, the emptyDir's
 * hugetlbfs under Kubernetes, /dev/shm on a bare host), so it would refuse
 * every one of them. It would buy nothing either: mounts are made by the
 * container runtime, and an NF's container has no CAP_SYS_ADMIN to add its
 * own (agent/internal/agent/spec.go), while RESOLVE_IN_ROOT already keeps
 * the lookup inside what the NF can see. */
#include "cs-chain.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CS_CHAIN_PAGE 4096u

/* openat2 fails with EAGAIN when a rename elsewhere raced a ".." of the
 * lookup and the kernel cannot prove it stayed inside the root; the call is
 * safe to repeat, a few times. */
#define CS_CHAIN_OPEN_TRIES 8

/* Opens thread t's root directory, the one "/" means to it, as an O_PATH
 * descriptor; -errno. t is held by its pidfd (cs-task.h): if t still lives
 * after the open, its number was not given to another thread in between
 * and the directory is t's own. */
static int open_root(const struct cs_task *t) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task/%d/root", (int)t->pid, (int)t->tid);
  int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -errno;
  if (cs_task_gone(t)) {
    close(fd);
    return -ESRCH;
  }
  return fd;
}

/* Returns 1 if thread t, whose root directory is root, sees paths as
 * coopsched does: the same mount namespace and the same root directory. */
static int same_view(const struct cs_task *t, int root) {
  char ns[64];
  snprintf(ns, sizeof ns, "/proc/%d/task/%d/ns/mnt", (int)t->pid, (int)t->tid);
  struct stat own_root, nf_root, own_ns, nf_ns;
  return stat("/", &own_root) == 0 && fstat(root, &nf_root) == 0 &&
         own_root.st_dev == nf_root.st_dev && own_root.st_ino == nf_root.st_ino &&
         stat("/proc/self/ns/mnt", &own_ns) == 0 && stat(ns, &nf_ns) == 0 &&
         own_ns.st_ino == nf_ns.st_ino;
}

int cs_open_in_root(int root, const char *path, int flags) {
  struct open_how how = {
      .flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
      .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
  };
  int e = EAGAIN;
  for (int i = 0; i < CS_CHAIN_OPEN_TRIES && e == EAGAIN; i++) {
    int fd = (int)syscall(SYS_openat2, root, path, &how, sizeof how);
    if (fd >= 0) return fd;
    e = errno;
  }
  return -e;
}

/* Opens path as thread t sees it, a regular file, into *fd and *st; sets
 * where to what messages about the file append. */
static enum cs_errclass open_as(const struct cs_task *t, const char *path, int *fd,
                                struct stat *st, char *where, size_t where_len,
                                struct cs_error *err) {
  int root = open_root(t);
  if (root < 0)
    return cs_error_set(err, root == -ESRCH || root == -ENOENT ? CS_ENOENT : CS_EINTERNAL,
                        "pktbuf %s: cannot open the root directory of thread %d: %s", path,
                        (int)t->tid, strerror(-root));
  if (same_view(t, root)) where[0] = '\0';
  else snprintf(where, where_len, " (resolved inside the root of thread %d)", (int)t->tid);
  /* Looked up as an O_PATH descriptor, which opens nothing: only a regular file is then
   * opened, through that descriptor. Opening a device node an NF made (it may have
   * CAP_MKNOD, and keel-coopsched is not bound by its container's device cgroup) can act
   * by itself: a watchdog device starts counting down when it is opened. */
  int pfd = cs_open_in_root(root, path, O_PATH);
  close(root);
  if (pfd == -ENOSYS)
    return cs_error_set(err, CS_EINTERNAL,
                        "pktbuf %s: cannot open: this kernel has no openat2 (Linux 5.6 or later "
                        "is needed to open it inside the NF's root)",
                        path);
  /* O_PATH | O_NOFOLLOW gives a symlink itself where a plain open fails with ELOOP. */
  if (pfd >= 0 && fstat(pfd, st) == 0 && S_ISLNK(st->st_mode)) {
    close(pfd);
    pfd = -ELOOP;
  }
  if (pfd < 0)
    return cs_error_set(err, CS_EINVAL, "pktbuf %s: cannot open: %s%s", path, strerror(-pfd),
                        where);
  if (fstat(pfd, st) < 0 || !S_ISREG(st->st_mode)) {
    close(pfd);
    return cs_error_set(err, CS_EINVAL, "pktbuf %s: not a regular file%s", path, where);
  }
  char self[64];
  snprintf(self, sizeof self, "/proc/self/fd/%d", pfd);
  *fd = open(self, O_RDWR | O_CLOEXEC);
  int e = errno;
  close(pfd);
  if (*fd < 0)
    return cs_error_set(err, CS_EINVAL, "pktbuf %s: cannot open: %s%s", path, strerror(e),
                        where);
  return CS_OK;
}

enum cs_errclass cs_chain_map(struct cs_chain *c, const char *path, const struct cs_task *tasks,
                              uint32_t nnfs, struct cs_error *err) {
  memset(c, 0, sizeof *c);
  if (!path || path[0] != '/')
    return cs_error_set(err, CS_EINVAL, "pktbuf path \"%s\" is not absolute", path ? path : "");
  if (nnfs == 0) return cs_error_set(err, CS_EINVAL, "pktbuf %s: a chain has no threads", path);
  int fd;
  struct stat st;
  if (open_as(&tasks[0], path, &fd, &st, c->where, sizeof c->where, err)) return err->cls;
  /* Every position must map this very file: one that sees another file
   * there would never see its turn come. */
  for (uint32_t i = 1; i < nnfs; i++) {
    int other;
    struct stat ost;
    char where[sizeof c->where];
    if (open_as(&tasks[i], path, &other, &ost, where, sizeof where, err)) {
      close(fd);
      return err->cls;
    }
    close(other);
    if (ost.st_dev != st.st_dev || ost.st_ino != st.st_ino) {
      close(fd);
      return cs_error_set(err, CS_EINVAL,
                          "pktbuf %s is not the same file for threads %d and %d (each resolved "
                          "inside its own root)",
                          path, (int)tasks[0].tid, (int)tasks[i].tid);
    }
  }
  if ((size_t)st.st_size < KEEL_SCHED_OFFSET + sizeof(struct keel_chain_sched)) {
    close(fd);
    return cs_error_set(err, CS_EINVAL,
                        "pktbuf %s: %lld bytes, too small for the scheduling words%s", path,
                        (long long)st.st_size, c->where);
  }
  void *map = mmap(NULL, CS_CHAIN_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (map == MAP_FAILED)
    return cs_error_set(err, CS_EINVAL, "pktbuf %s: mmap: %s%s", path, strerror(e), c->where);
  struct keel_chain_sched *w = (struct keel_chain_sched *)((char *)map + KEEL_SCHED_OFFSET);
  uint64_t magic = CS_LOAD(w->magic);
  uint32_t n = CS_LOAD(w->nnfs);
  if (magic != KEEL_SCHED_MAGIC) {
    munmap(map, CS_CHAIN_PAGE);
    return cs_error_set(err, CS_EINVAL, "pktbuf %s: no scheduling words (magic %#llx)%s", path,
                        (unsigned long long)magic, c->where);
  }
  if (n != nnfs) {
    munmap(map, CS_CHAIN_PAGE);
    return cs_error_set(err, CS_EINVAL, "pktbuf %s: chain has %u positions, request has %u%s",
                        path, n, nnfs, c->where);
  }
  c->w = w;
  c->map = map;
  c->map_len = CS_CHAIN_PAGE;
  return CS_OK;
}

void cs_chain_unmap(struct cs_chain *c) {
  if (c->map) munmap(c->map, c->map_len);
  memset(c, 0, sizeof *c);
}
