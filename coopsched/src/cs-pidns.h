/* SPDX-License-Identifier: Apache-2.0 */
/* Thread ids across PID namespaces: an NF in a container announces the id
 * its own namespace gives its thread; coopsched works with host ids. */
#ifndef KEEL_CS_PIDNS_H_
#define KEEL_CS_PIDNS_H_

#include <stdint.h>
#include <sys/types.h>

#include "cs-error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returns the inode of the PID namespace of the calling process
 * (/proc/self/ns/pid), or 0 if it cannot be read. */
uint64_t cs_pidns_self(void);

/* Finds the thread whose id is ns_tid inside the PID namespace with inode
 * pid_ns and stores its id in coopsched's own namespace in *host_tid: the
 * first field of the NSpid line of /proc/P/task/T/status, for a process P
 * whose /proc/P/ns/pid is that namespace and whose line ends in ns_tid.
 * CS_ENOENT, naming the namespace and the thread, if there is none. */
enum cs_errclass cs_pidns_host_tid(uint64_t pid_ns, pid_t ns_tid, pid_t *host_tid,
                                   struct cs_error *err);

/* Returns the id host thread host_tid has in its own (innermost) PID
 * namespace, the id it knows itself by: the last field of its NSpid line.
 * host_tid itself outside containers; -1 if the thread does not exist. */
pid_t cs_pidns_inner_tid(pid_t host_tid);

/* Reads the NSpid line of a /proc status file: its first id (in the PID
 * namespace of that /proc) into *first, its last (in the task's own
 * namespace) into *last. Returns 1, or 0 if the file or the line is missing. */
int cs_pidns_nspid(const char *status_path, pid_t *first, pid_t *last);

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_PIDNS_H_
