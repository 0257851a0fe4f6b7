/* SPDX-License-Identifier: Apache-2.0 */
/* One keel-coopsched per managed core: two schedulers of one core would
 * queue their sgroups' FIFO threads together and break run-to-completion
 * order (Galleon §4.3.1 gives each managed core one enforcer). Each managed
 * core has a lock file, <dir>/coopsched-cpu<N>.lock, flock'ed by the daemon
 * that manages it and holding its pid. */
#ifndef KEEL_CS_CORELOCK_H_
#define KEEL_CS_CORELOCK_H_

#include "cs-error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Takes the lock of core in dir (created 0755 if missing) and writes our pid
 * into it; returns the locked fd. Returns -1 with CS_EEXIST naming the core
 * and the holder's pid if another process holds the lock, or another class
 * if the file cannot be used. */
int cs_corelock_take(const char *dir, int core, struct cs_error *err);

/* Empties and releases a lock taken by cs_corelock_take; fd may be -1. */
void cs_corelock_release(int fd);

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_CORELOCK_H_
