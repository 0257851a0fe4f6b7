/* SPDX-License-Identifier: Apache-2.0 */
/* Internals shared by the scheduler's table (cs-sched.c), its enforcers
 * (cs-enforcer.c) and its exit watcher (cs-watcher.c). One lock, s->mu,
 * guards the table and every sgroup's state; control requests are
 * serialised by s->ctl_mu so that the master thread can do slow work
 * (stopping threads) without holding s->mu. An Attach is the exception:
 * it waits for its enforcer without ctl_mu, and a request that finds one
 * under way for its sgroup waits for it (cs-sched.c, wait_idle). */
#ifndef KEEL_CS_SCHED_PRIVATE_H_
#define KEEL_CS_SCHED_PRIVATE_H_

#include <pthread.h>

#include "cs-caller.h"
#include "cs-chain.h"
#include "cs-guardian.h"
#include "cs-sched.h"
#include "cs-task.h"
#include "cs-watchdog.h"

/* What the master asked an enforcer to do for an sgroup. */
enum cs_op {
  CS_OP_NONE = 0,
  CS_OP_ATTACH,
  CS_OP_DETACH,
};

/* Where a detaching sgroup is. */
enum cs_phase {
  CS_PHASE_PARK = 1, /* detach_req set, waiting for parked at turn 0 */
  CS_PHASE_STOP,     /* SIGSTOP sent, waiting for every thread to stop */
};

struct cs_group {
  struct cs_group *next;
  uint64_t serial; /* unique among the sgroups this process registered */
  char id[CS_GROUP_ID_MAX];
  char path[CS_PATH_MAX];
  uint32_t n;
  struct cs_task tasks[KEEL_SCHED_MAX_NFS];
  uint64_t starts[KEEL_SCHED_MAX_NFS]; /* each thread's start time (/proc stat field 22) */
  struct cs_chain chain;
  enum cs_group_state state;
  int core; /* the core it is attached to, -1 when detached */

  /* The master's request, done when op_done is set (under s->mu). */
  enum cs_op op;
  int op_core;
  int op_done;
  struct cs_error op_err;
  int at_boundary;
  uint64_t op_start_ns;

  /* Detaching. */
  enum cs_phase phase;
  int cut;              /* stopping because the watchdog cut it off */
  uint64_t deadline_ns; /* of the current phase */

  /* Exits, as the kernel tells them: a position's thread is gone, its
   * process's wait status is known and what it is. A chain that closes on
   * purpose ends with every process exiting with 0: from the first clean
   * exit the others have until end_by_ns to do the same. */
  unsigned char gone[KEEL_SCHED_MAX_NFS];
  unsigned char status_known[KEEL_SCHED_MAX_NFS];
  int status[KEEL_SCHED_MAX_NFS];
  uint64_t end_by_ns;

  /* Watchdog (cs-watchdog.h): what it remembers of each thread, in
   * coopsched's own memory; the threads it demoted for holding the core,
   * the first of them and by when the chain must have begun to exit. */
  struct cs_wd_thread wd[KEEL_SCHED_MAX_NFS];
  uint32_t demoted_mask;
  uint32_t demoted_pos;
  uint64_t demoted_busy_us;
  uint64_t demoted_by_ns;
};

struct cs_enforcer {
  struct cs_sched *s;
  int core;
  pthread_t thread;
  pthread_cond_t cv; /* signalled when there is work; waited on with s->mu */
  int started;
  /* The watchdog's window on this core and its look at the threads. */
  struct cs_wd_window wd;
  struct cs_group *wd_groups[CS_WD_MAX_THREADS];
  uint32_t wd_pos[CS_WD_MAX_THREADS];
  struct cs_wd_thread *wd_threads[CS_WD_MAX_THREADS];
  struct cs_wd_now wd_now[CS_WD_MAX_THREADS];
  /* What the enforcer costs its core (Status): TSC cycles of its ticks'
   * work, and how many times it woke (each wake-up also costs two context
   * switches on the core, counted in the NFs' handoffs and turns). */
  uint64_t work_cycles;
  uint64_t wakeups;
};

struct cs_sched {
  struct cs_options opt;
  uint64_t tsc_hz;
  uint64_t handoff_cycles;
  pthread_mutex_t ctl_mu;
  pthread_mutex_t persist_mu; /* the state file's writes, in order (persist_locked) */
  pthread_mutex_t mu;
  pthread_cond_t done_cv; /* broadcast when a request completes */
  int stopping;
  struct cs_group *groups;
  struct cs_enforcer enforcers[CS_MAX_CORES];
  struct cs_events events;
  struct cs_events_logger logger;
  struct cs_announce *announces;
  uint64_t last_serial;
  int watch_fd; /* eventfd: the set of watched threads changed */
  pthread_t watcher;
  int watcher_started;
  int lock_fds[CS_MAX_CORES]; /* the managed cores' locks, -1 if not taken */
  int rt_lifted;              /* RT throttling lifted: restore rt_saved_us at exit */
  int64_t rt_saved_us;
  struct cs_guardian guardian; /* undoes the above and the held threads if this process dies */
  /* Calls the NF socket refused, by check (cs-caller.h), and when each check last posted
   * a "refused" event: at most one a second each, so that a caller cannot flush the
   * event log. Under mu. */
  uint64_t refused[CS_REFUSED_N];
  uint64_t refused_posted_ns[CS_REFUSED_N];
  uint64_t refused_unposted[CS_REFUSED_N];
};

/* The enforcer thread of one managed core. */
void *cs_enforcer_main(void *arg);

/* Looks at what has become of g's threads (s->mu held): fails g if one has
 * exited other than cleanly, or if the others have not followed a clean
 * exit by g->end_by_ns (at once if g is detached: its threads are stopped);
 * finishes g once all have exited cleanly. Returns 1 if g is out of service
 * (cut off, failed or finished). */
int cs_group_check_threads(struct cs_sched *s, struct cs_group *g, uint64_t now_ns);

/* The exit watcher: checks an sgroup's threads as soon as a pidfd of theirs
 * says a thread or process has exited, whatever the sgroup's state. */
void *cs_watcher_main(void *arg);

/* Tells the exit watcher that sgroups came or went. */
void cs_watcher_wake(struct cs_sched *s);

/* Returns the enforcer of core, or NULL if the core is not managed. */
struct cs_enforcer *cs_sched_enforcer(struct cs_sched *s, int core);

#endif  // KEEL_CS_SCHED_PRIVATE_H_
