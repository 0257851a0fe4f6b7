/* SPDX-License-Identifier: Apache-2.0 */
/* keel-coopsched's scheduling core (Galleon §4.3.1): the sgroups registered
 * on this worker, their attach/detach life cycle on the managed cores, one
 * enforcer thread per managed core and the yield watchdog. The gRPC service
 * is a thin layer over this interface. */
#ifndef KEEL_CS_SCHED_H_
#define KEEL_CS_SCHED_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cs-caller.h"
#include "cs-error.h"
#include "cs-event.h"
#include "keel/chain_sched.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CS_MAX_CORES 64
#define CS_PATH_MAX 256

struct cs_options {
  int cores[CS_MAX_CORES]; /* managed cores */
  int ncores;
  uint64_t yield_timeout_us;  /* watchdog: longest turn an NF may hold */
  uint64_t detach_timeout_us; /* longest wait for a batch boundary on Detach */
  int wait_priority;          /* FIFO priority of detached threads; 0: SCHED_OTHER */
  int run_priority;           /* FIFO priority of attached threads */
  int probe_handoff;          /* measure the handoff cost at start-up */
  char lock_dir[CS_PATH_MAX]; /* where the lock file of each managed core is */
  int no_rt_throttle;         /* lift the kernel's RT throttling while running */
  char state_file[CS_PATH_MAX]; /* the sgroups in service, for a successor (cs-state.h); "" none */
};

enum cs_group_state {
  CS_DETACHED = 1,
  CS_ATTACHED = 2,
  CS_DETACHING = 3,
  CS_CUT_OFF = 4,
  CS_FAILED = 5,   /* a thread exited; the others are stopped under their original policy */
  CS_FINISHED = 6, /* every thread exited with 0: the chain closed */
};

struct cs_thread_info {
  uint32_t position;
  pid_t tid;
  pid_t pid;
  char state; /* /proc state letter, 0 if the thread is gone */
  uint64_t cpu_ns; /* CPU time the kernel accounts to it (schedstat), 0 if gone */
};

struct cs_group_info {
  char id[CS_GROUP_ID_MAX];
  char path[CS_PATH_MAX];
  enum cs_group_state state;
  int core; /* -1 when detached */
  uint32_t n;
  uint32_t batch;
  /* From the chain's scheduling words, which its NFs write: statistics, not
   * evidence. */
  uint32_t turn;
  uint64_t rounds;
  uint64_t handoffs;
  uint64_t packets;
  /* The kernel's account, read by coopsched: the threads' CPU time summed
   * (a gone thread's no longer counts). */
  uint64_t cpu_ns;
  struct cs_thread_info threads[KEEL_SCHED_MAX_NFS];
};

struct cs_sched;

/* Sets the defaults: yield timeout 10 ms, detach timeout 500 ms, wait
 * priority 0 (SCHED_OTHER), run priority 10, handoff probe on, lock directory /run/keel,
 * RT throttling left as it is; no cores. */
void cs_options_default(struct cs_options *opt);

/* Parses a core list such as "1", "1,3" or "2-5" into opt; CS_EINVAL if bad. */
enum cs_errclass cs_options_parse_cores(struct cs_options *opt, const char *list,
                                        struct cs_error *err);

/* Takes over the managed cores: locks each one against other keel-coopsched
 * processes (CS_EEXIST naming the core and the holder, before anything else
 * is touched), lifts the RT throttling if asked, moves the calling process
 * off the cores, measures the TSC rate and the handoff cost and starts one
 * enforcer per core at the highest FIFO priority. Call before the process
 * starts other threads. */
struct cs_sched *cs_sched_create(const struct cs_options *opt, struct cs_error *err);

/* Unregisters every sgroup (threads go back to what they were), stops the
 * enforcers, puts the RT throttling back as it was, releases the cores'
 * locks and frees s. */
void cs_sched_destroy(struct cs_sched *s);

/* Takes back the sgroups a predecessor that died left in opt->state_file (cs-state.h):
 * each whose threads all still live (same tids, same start times) is registered again and
 * attached to the core it had, without its NFs doing anything; the others are dropped (the
 * agent rebuilds them). Sets how many were adopted and dropped; an unreadable or malformed
 * file adopts nothing and is an error naming it. Call once, before serving. */
enum cs_errclass cs_sched_adopt(struct cs_sched *s, uint32_t *adopted, uint32_t *dropped,
                                struct cs_error *err);

/* Registers an sgroup: stops the threads, pins them to a managed core at the wait
 * priority (SCHED_OTHER if 0, else SCHED_FIFO). The sgroup is detached. */
enum cs_errclass cs_sched_register(struct cs_sched *s, const char *group, const pid_t *tids,
                                   uint32_t n, const char *pktbuf, struct cs_error *err);

/* Records that position of a count-long chain is thread tid, which started
 * at tick start (field 22 of its /proc stat, as the caller checked it; 0:
 * read it now); registers the sgroup once every position is known
 * (*registered = 1). A thread whose start time is not that any more when
 * the sgroup forms has exited and its id names another thread: CS_ENOENT. */
enum cs_errclass cs_sched_announce(struct cs_sched *s, const char *group, uint32_t position,
                                   uint32_t count, pid_t tid, uint64_t start, const char *pktbuf,
                                   uint32_t *announced, int *registered, struct cs_error *err);

/* Returns 1 if group is registered or has positions announced, else 0. */
int cs_sched_known(struct cs_sched *s, const char *group);

/* Counts a call the NF socket refused for reason r and posts a "refused"
 * event with message (at most one a second per reason; the event says how
 * many were not posted since the last). */
void cs_sched_refused(struct cs_sched *s, enum cs_refusal r, const char *group, pid_t tid,
                      const char *message);

/* How many calls the NF socket refused for reason r since start. */
uint64_t cs_sched_refusals(struct cs_sched *s, enum cs_refusal r);

/* Attaches a detached sgroup to a managed core: run priority and SIGCONT in chain order. */
enum cs_errclass cs_sched_attach(struct cs_sched *s, const char *group, int core,
                                 struct cs_error *err);

/* Detaches an sgroup at its next batch boundary (or stops it anyway after the
 * detach timeout: *at_boundary = 0); waits until its threads are stopped. */
enum cs_errclass cs_sched_detach(struct cs_sched *s, const char *group, int *at_boundary,
                                 uint64_t *wait_us, struct cs_error *err);

/* Detaches the sgroup if attached, gives its threads back their original
 * policy and affinity, lets them run and forgets the sgroup. */
enum cs_errclass cs_sched_unregister(struct cs_sched *s, const char *group, struct cs_error *err);

/* Sets B, the bursts position 0 gathers per turn. */
enum cs_errclass cs_sched_set_batch(struct cs_sched *s, const char *group, uint32_t batch,
                                    struct cs_error *err);

/* Copies the status of one sgroup. */
enum cs_errclass cs_sched_group(struct cs_sched *s, const char *group, struct cs_group_info *out,
                                struct cs_error *err);

/* Copies the status of up to max sgroups; returns how many there are. */
size_t cs_sched_groups(struct cs_sched *s, struct cs_group_info *out, size_t max);

/* The options in force. */
const struct cs_options *cs_sched_options(const struct cs_sched *s);

/* The TSC rate measured at start-up, in Hz. */
uint64_t cs_sched_tsc_hz(const struct cs_sched *s);

/* The handoff cost measured at start-up, in TSC cycles (0 if not measured). */
uint64_t cs_sched_handoff_cycles(const struct cs_sched *s);
/* The enforcer of the i-th managed core: TSC cycles its ticks took and its
 * wake-ups since start. */
void cs_sched_enforcer_cost(struct cs_sched *s, int i, uint64_t *work_cycles, uint64_t *wakeups);

/* The event log. */
struct cs_events *cs_sched_events(struct cs_sched *s);

/* The name of a state: detached, attached, detaching, cut-off, failed, finished. */
const char *cs_group_state_name(enum cs_group_state st);

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_SCHED_H_
