/* SPDX-License-Identifier: Apache-2.0 */
/* keel-coopsched's state file: the sgroups in service, written after every change to the
 * table, so that a keel-coopsched started after this one died takes its chains back where
 * they were (cs_sched_adopt) instead of leaving the agent to rebuild every instance.
 *
 * One line per sgroup; the id and the pktbuf path are hex-encoded (any byte is allowed in
 * them), each thread is named by its tid and its start time (field 22 of /proc/TID/stat),
 * so that a tid the kernel gave to another thread since is never adopted:
 *
 *   keel-coopsched-state 1
 *   g <hex id> <hex pktbuf path> <core or -1> <tid>/<start> <tid>/<start> ...
 */
#ifndef KEEL_CS_STATE_H_
#define KEEL_CS_STATE_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cs-error.h"
#include "cs-sched.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cs_state_entry {
  char id[CS_GROUP_ID_MAX];
  char path[CS_PATH_MAX];
  int core; /* -1: detached */
  uint32_t n;
  pid_t tids[KEEL_SCHED_MAX_NFS];
  uint64_t starts[KEEL_SCHED_MAX_NFS];
};

/* Writes n entries to file (a new file renamed over the old one: a reader sees the old
 * table or the new, never half of one). */
enum cs_errclass cs_state_write(const char *file, const struct cs_state_entry *e, size_t n,
                                struct cs_error *err);

/* Reads file into *out (malloc'ed, *n entries; NULL and 0 if the file does not exist).
 * A malformed file is CS_EINVAL naming the line: nothing of it is adopted. */
enum cs_errclass cs_state_read(const char *file, struct cs_state_entry **out, size_t *n,
                               struct cs_error *err);

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_STATE_H_
