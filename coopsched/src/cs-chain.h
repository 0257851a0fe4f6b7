/* SPDX-License-Identifier: Apache-2.0 */
/* The scheduling words of one chain instance (keel/chain_sched.h), mapped
 * from the first page of its buffer file, which is found as the chain's NFs
 * see it: inside their own root directory and mount namespace. */
#ifndef KEEL_CS_CHAIN_H_
#define KEEL_CS_CHAIN_H_

#include <stddef.h>
#include <stdint.h>

#include "cs-error.h"
#include "cs-task.h"
#include "keel/chain_sched.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cs_chain {
  struct keel_chain_sched *w;
  void *map;
  size_t map_len;
  /* Appended to messages about the file: "" when the NFs see paths as
   * coopsched does, else which thread's root the path was resolved in. */
  char where[64];
};

/* Maps the scheduling words of the buffer file that path names for the
 * chain's nnfs threads, tasks[0..nnfs-1]. An NF names the file by the path
 * it sees, so path is resolved inside each thread's own root directory
 * (/proc/PID/task/TID/root, in its mount namespace) and never leaves it,
 * whatever symlinks are on the way; it must be the same regular file for
 * every thread. Checks its size, the magic and that the chain has nnfs
 * positions; CS_EINVAL with the reason if not (CS_EINTERNAL if the kernel
 * has no openat2, Linux 5.6). */
enum cs_errclass cs_chain_map(struct cs_chain *c, const char *path, const struct cs_task *tasks,
                              uint32_t nnfs, struct cs_error *err);

/* Opens path inside the directory root with openat2(2) and flags, O_NOFOLLOW
 * added: RESOLVE_IN_ROOT keeps "/", ".." and every symlink on the way inside
 * root, RESOLVE_NO_MAGICLINKS refuses /proc/PID/fd-style links, the last
 * component is never a symlink followed (see cs-chain.c). Returns the
 * descriptor or -errno (-ENOSYS: the kernel is older than 5.6). */
int cs_open_in_root(int root, const char *path, int flags);

/* Unmaps the words; c may be unmapped already. */
void cs_chain_unmap(struct cs_chain *c);

#define CS_LOAD(field) __atomic_load_n(&(field), __ATOMIC_ACQUIRE)
#define CS_STORE(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELEASE)

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_CHAIN_H_
