/* SPDX-License-Identifier: Apache-2.0 */
/* The scheduling words of one chain instance (keel/chain_sched.h), mapped
 * from the first page of its buffer file. */
#ifndef KEEL_CS_CHAIN_H_
#define KEEL_CS_CHAIN_H_

#include <stddef.h>
#include <stdint.h>

#include "cs-error.h"
#include "keel/chain_sched.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cs_chain {
  struct keel_chain_sched *w;
  void *map;
  size_t map_len;
};

/* Maps the scheduling words of the buffer file at path and checks the magic
 * and that the chain has nnfs positions; CS_EINVAL with the reason if not. */
enum cs_errclass cs_chain_map(struct cs_chain *c, const char *path, uint32_t nnfs,
                              struct cs_error *err);

/* Unmaps the words; c may be unmapped already. */
void cs_chain_unmap(struct cs_chain *c);

#define CS_LOAD(field) __atomic_load_n(&(field), __ATOMIC_ACQUIRE)
#define CS_STORE(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELEASE)

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_CHAIN_H_
