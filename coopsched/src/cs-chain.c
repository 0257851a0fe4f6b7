/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-chain.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CS_CHAIN_PAGE 4096u

enum cs_errclass cs_chain_map(struct cs_chain *c, const char *path, uint32_t nnfs,
                              struct cs_error *err) {
  memset(c, 0, sizeof *c);
  if (!path || path[0] != '/')
    return cs_error_set(err, CS_EINVAL, "pktbuf path \"%s\" is not absolute", path ? path : "");
  int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return cs_error_set(err, CS_EINVAL, "pktbuf %s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return cs_error_set(err, CS_EINVAL, "pktbuf %s: not a regular file", path);
  }
  if ((size_t)st.st_size < KEEL_SCHED_OFFSET + sizeof(struct keel_chain_sched)) {
    close(fd);
    return cs_error_set(err, CS_EINVAL, "pktbuf %s: %lld bytes, too small for the scheduling words",
                        path, (long long)st.st_size);
  }
  void *map = mmap(NULL, CS_CHAIN_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (map == MAP_FAILED)
    return cs_error_set(err, CS_EINVAL, "pktbuf %s: mmap: %s", path, strerror(e));
  struct keel_chain_sched *w = (struct keel_chain_sched *)((char *)map + KEEL_SCHED_OFFSET);
  uint64_t magic = CS_LOAD(w->magic);
  uint32_t n = CS_LOAD(w->nnfs);
  if (magic != KEEL_SCHED_MAGIC) {
    munmap(map, CS_CHAIN_PAGE);
    return cs_error_set(err, CS_EINVAL, "pktbuf %s: no scheduling words (magic %#llx)", path,
                        (unsigned long long)magic);
  }
  if (n != nnfs) {
    munmap(map, CS_CHAIN_PAGE);
    return cs_error_set(err, CS_EINVAL, "pktbuf %s: chain has %u positions, request has %u", path,
                        n, nnfs);
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
