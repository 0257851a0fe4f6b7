/* SPDX-License-Identifier: Apache-2.0 */
/* The sgroup table and the requests of the master thread (Galleon §4.3.1). */
#include "cs-sched.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "cs-corelock.h"
#include "cs-handoff.h"
#include "cs-pidns.h"
#include "cs-rt.h"
#include "cs-sched-private.h"
#include "cs-state.h"
#include "cs-tsc.h"

#define CS_REGISTER_STOP_TIMEOUT_MS 1000

/* A chain instance whose positions are announcing themselves one by one. */
struct cs_announce {
  struct cs_announce *next;
  char id[CS_GROUP_ID_MAX];
  char path[CS_PATH_MAX];
  uint32_t count;
  uint32_t mask;
  pid_t tids[KEEL_SCHED_MAX_NFS];
  uint64_t starts[KEEL_SCHED_MAX_NFS]; /* each thread's start time when it was announced */
};

void cs_options_default(struct cs_options *opt) {
  memset(opt, 0, sizeof *opt);
  opt->yield_timeout_us = 10000;
  opt->detach_timeout_us = 500000;
  opt->wait_priority = 0;
  opt->run_priority = 10;
  opt->probe_handoff = 1;
  snprintf(opt->lock_dir, sizeof opt->lock_dir, "/run/keel");
}

enum cs_errclass cs_options_parse_cores(struct cs_options *opt, const char *list,
                                        struct cs_error *err) {
  opt->ncores = 0;
  const char *p = list;
  while (*p) {
    char *end;
    long lo = strtol(p, &end, 10), hi = lo;
    if (end == p || lo < 0) goto bad;
    if (*end == '-') {
      p = end + 1;
      hi = strtol(p, &end, 10);
      if (end == p || hi < lo) goto bad;
    }
    for (long c = lo; c <= hi; c++) {
      if (opt->ncores == CS_MAX_CORES || c >= CPU_SETSIZE) goto bad;
      for (int i = 0; i < opt->ncores; i++)
        if (opt->cores[i] == c) goto bad;
      opt->cores[opt->ncores++] = (int)c;
    }
    if (*end == ',') end++;
    else if (*end) goto bad;
    p = end;
  }
  if (opt->ncores > 0) return CS_OK;
bad:
  return cs_error_set(err, CS_EINVAL, "bad core list \"%s\" (want e.g. 1 or 1,3 or 2-5)", list);
}

const char *cs_group_state_name(enum cs_group_state st) {
  switch (st) {
    case CS_DETACHED: return "detached";
    case CS_ATTACHED: return "attached";
    case CS_DETACHING: return "detaching";
    case CS_CUT_OFF: return "cut-off";
    case CS_FAILED: return "failed";
    case CS_FINISHED: return "finished";
  }
  return "unknown";
}

struct cs_enforcer *cs_sched_enforcer(struct cs_sched *s, int core) {
  for (int i = 0; i < s->opt.ncores; i++)
    if (s->enforcers[i].core == core) return &s->enforcers[i];
  return NULL;
}

static enum cs_errclass start_enforcers(struct cs_sched *s, struct cs_error *err) {
  for (int i = 0; i < s->opt.ncores; i++) {
    struct cs_enforcer *e = &s->enforcers[i];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(e->core, &set);
    struct sched_param sp = {.sched_priority = sched_get_priority_max(SCHED_FIFO)};
    pthread_attr_setaffinity_np(&attr, sizeof set, &set);
    pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
    pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
    pthread_attr_setschedparam(&attr, &sp);
    int rc = pthread_create(&e->thread, &attr, cs_enforcer_main, e);
    pthread_attr_destroy(&attr);
    if (rc != 0)
      return cs_error_set(err, rc == EPERM ? CS_EINVAL : CS_EINTERNAL,
                          "cannot start the enforcer of core %d as SCHED_FIFO %d: %s%s", e->core,
                          sp.sched_priority, strerror(rc),
                          rc == EPERM ? " (keel-coopsched must run as root)" : "");
    e->started = 1;
  }
  return CS_OK;
}

static void stop_enforcers(struct cs_sched *s) {
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  for (int i = 0; i < s->opt.ncores; i++) pthread_cond_signal(&s->enforcers[i].cv);
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < s->opt.ncores; i++)
    if (s->enforcers[i].started) pthread_join(s->enforcers[i].thread, NULL);
  if (s->watcher_started) {
    cs_watcher_wake(s);
    pthread_join(s->watcher, NULL);
    s->watcher_started = 0;
  }
}

/* Reads the online CPUs from sysfs into *set. */
static enum cs_errclass online_cpus(cpu_set_t *set, struct cs_error *err) {
  char buf[256] = "";
  FILE *f = fopen("/sys/devices/system/cpu/online", "re");
  if (!f || !fgets(buf, sizeof buf, f)) {
    if (f) fclose(f);
    return cs_error_set(err, CS_EINTERNAL, "cannot read /sys/devices/system/cpu/online");
  }
  fclose(f);
  buf[strcspn(buf, "\n")] = '\0';
  struct cs_options all;
  if (cs_options_parse_cores(&all, buf, err)) return err->cls;
  CPU_ZERO(set);
  for (int i = 0; i < all.ncores; i++) CPU_SET(all.cores[i], set);
  return CS_OK;
}

/* Checks opt; sets *rest to the online cores it leaves to CFS. */
static enum cs_errclass check_options(const struct cs_options *opt, cpu_set_t *rest,
                                      struct cs_error *err) {
  cpu_set_t online;
  if (opt->ncores <= 0) return cs_error_set(err, CS_EINVAL, "no managed core");
  if (online_cpus(&online, err)) return err->cls;
  *rest = online;
  for (int i = 0; i < opt->ncores; i++) {
    if (!CPU_ISSET(opt->cores[i], &online))
      return cs_error_set(err, CS_EINVAL, "core %d is not online", opt->cores[i]);
    CPU_CLR(opt->cores[i], rest);
  }
  if (CPU_COUNT(rest) == 0)
    return cs_error_set(err, CS_EINVAL, "every core would be managed: leave at least one to CFS");
  if (opt->wait_priority < 0 || opt->run_priority <= opt->wait_priority ||
      opt->run_priority >= sched_get_priority_max(SCHED_FIFO))
    return cs_error_set(err, CS_EINVAL, "priorities must satisfy 0 <= wait < run < %d",
                        sched_get_priority_max(SCHED_FIFO));
  if (opt->yield_timeout_us < 100)
    return cs_error_set(err, CS_EINVAL, "yield timeout %llu us is below 100 us",
                        (unsigned long long)opt->yield_timeout_us);
  if (!opt->lock_dir[0]) return cs_error_set(err, CS_EINVAL, "no lock directory");
  return CS_OK;
}

/* Sets kernel.sched_rt_runtime_us to -1 unless it is already, saving the old
 * value: an attached chain with traffic never sleeps, so the throttle would
 * idle its core for the rest of every RT period (50 ms a second by default). */
static enum cs_errclass lift_rt_throttle(struct cs_sched *s, struct cs_error *err) {
  struct cs_error rerr;
  int64_t us;
  if (cs_rt_runtime_read(&us, &rerr) == CS_OK) {
    if (us == -1) return CS_OK;
    if (cs_rt_runtime_write(-1, &rerr) == CS_OK) {
      s->rt_lifted = 1;
      s->rt_saved_us = us;
      return CS_OK;
    }
  }
  return cs_error_set(err, rerr.cls, "cannot lift the RT throttling: %s", rerr.msg);
}

/* Makes this process the only scheduler of its cores (Galleon §4.3.1: one
 * enforcer per managed core) and lifts the RT throttling if asked. */
static enum cs_errclass claim_host(struct cs_sched *s, struct cs_error *err) {
  for (int i = 0; i < s->opt.ncores; i++) {
    s->lock_fds[i] = cs_corelock_take(s->opt.lock_dir, s->opt.cores[i], err);
    if (s->lock_fds[i] < 0) return err->cls;
  }
  return s->opt.no_rt_throttle ? lift_rt_throttle(s, err) : CS_OK;
}

/* Undoes claim_host. */
static void release_host(struct cs_sched *s) {
  struct cs_error err;
  if (s->rt_lifted && cs_rt_runtime_write(s->rt_saved_us, &err) != CS_OK)
    fprintf(stderr, "keel-coopsched: RT throttling not restored: %s\n", err.msg);
  s->rt_lifted = 0;
  for (int i = 0; i < s->opt.ncores; i++) {
    cs_corelock_release(s->lock_fds[i]);
    s->lock_fds[i] = -1;
  }
}

struct cs_sched *cs_sched_create(const struct cs_options *opt, struct cs_error *err) {
  cpu_set_t rest;
  if (check_options(opt, &rest, err)) return NULL;
  struct cs_sched *s = calloc(1, sizeof *s);
  if (!s) {
    cs_error_set(err, CS_EINTERNAL, "out of memory");
    return NULL;
  }
  s->opt = *opt;
  s->watch_fd = -1;
  s->guardian.fd = -1;
  for (int i = 0; i < CS_MAX_CORES; i++) s->lock_fds[i] = -1;
  if (claim_host(s, err)) goto fail;
  /* Forked while this is the only thread (cs-guardian.h). */
  if (cs_guardian_start(&s->guardian, s->rt_lifted, s->rt_saved_us, err)) goto fail;
  /* The master, the RPC threads and everything they start stay off the managed cores. */
  if (sched_setaffinity(0, sizeof rest, &rest) < 0) {
    cs_error_set(err, CS_EINTERNAL, "sched_setaffinity: %s", strerror(errno));
    goto fail;
  }
  s->tsc_hz = cs_tsc_measure_hz();
  if (opt->probe_handoff) {
    struct cs_error perr;
    s->handoff_cycles = cs_handoff_measure(opt->cores[0], opt->run_priority, &perr);
    if (!s->handoff_cycles) {
      cs_error_set(err, perr.cls, "%s", perr.msg);
      goto fail;
    }
  }
  s->watch_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->watch_fd < 0) {
    cs_error_set(err, CS_EINTERNAL, "eventfd: %s", strerror(errno));
    goto fail;
  }
  pthread_mutex_init(&s->ctl_mu, NULL);
  pthread_mutex_init(&s->persist_mu, NULL);
  /* Priority inheritance: an RPC thread under CFS holding the table while an
   * enforcer (highest FIFO priority) waits for it runs at that priority. */
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setprotocol(&ma, PTHREAD_PRIO_INHERIT);
  pthread_mutex_init(&s->mu, &ma);
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->done_cv, &ca);
  for (int i = 0; i < opt->ncores; i++) {
    s->enforcers[i].s = s;
    s->enforcers[i].core = opt->cores[i];
    pthread_cond_init(&s->enforcers[i].cv, &ca);
  }
  pthread_condattr_destroy(&ca);
  cs_events_init(&s->events);
  /* The event logger and the exit watcher run under CFS off the managed
   * cores, like the master. */
  int rc = cs_events_logger_start(&s->logger, &s->events);
  if (rc == 0) {
    rc = pthread_create(&s->watcher, NULL, cs_watcher_main, s);
    s->watcher_started = rc == 0;
  }
  if (rc != 0) cs_error_set(err, CS_EINTERNAL, "cannot start a helper thread: %s", strerror(rc));
  if (rc != 0 || start_enforcers(s, err) != CS_OK) {
    cs_sched_destroy(s);
    return NULL;
  }
  return s;
fail:
  if (s->watch_fd >= 0) close(s->watch_fd);
  release_host(s);
  cs_guardian_stop(&s->guardian);
  free(s);
  return NULL;
}

static struct cs_group *find_group(struct cs_sched *s, const char *id) {
  for (struct cs_group *g = s->groups; g; g = g->next)
    if (strcmp(g->id, id) == 0) return g;
  return NULL;
}

static enum cs_errclass check_id(const char *id, struct cs_error *err) {
  size_t len = id ? strlen(id) : 0;
  if (len == 0 || len >= CS_GROUP_ID_MAX)
    return cs_error_set(err, CS_EINVAL, "group id must have 1..%d characters", CS_GROUP_ID_MAX - 1);
  return CS_OK;
}

static enum cs_errclass lookup(struct cs_sched *s, const char *id, struct cs_group **out,
                              struct cs_error *err) {
  if (check_id(id, err)) return err->cls;
  *out = find_group(s, id);
  if (!*out) return cs_error_set(err, CS_ENOENT, "no sgroup \"%s\"", id);
  return CS_OK;
}

/* CS_ESTATE if g is out of service: only Unregister is accepted then. */
static enum cs_errclass check_in_service(const struct cs_group *g, struct cs_error *err) {
  if (g->state == CS_CUT_OFF)
    return cs_error_set(err, CS_ESTATE, "sgroup \"%s\" was cut off by the watchdog; unregister it",
                        g->id);
  if (g->state == CS_FAILED)
    return cs_error_set(err, CS_ESTATE, "sgroup \"%s\" failed: a thread exited; unregister it",
                        g->id);
  if (g->state == CS_FINISHED)
    return cs_error_set(err, CS_ESTATE,
                        "sgroup \"%s\" finished: its threads exited with 0; unregister it", g->id);
  return CS_OK;
}

/* Waits (s->mu held) until none of g's requests is with an enforcer. An Attach waits for
 * its own without ctl_mu (cs_sched_attach), so another control call can find one under way. */
static void wait_idle(struct cs_sched *s, struct cs_group *g) {
  while (g->op != CS_OP_NONE) pthread_cond_wait(&s->done_cv, &s->mu);
}

/* Hands g's request to the enforcer of core (s->mu held, g idle). */
static void post_op(struct cs_sched *s, struct cs_group *g, enum cs_op op, int core) {
  g->op = op;
  g->op_core = core;
  g->op_done = 0;
  g->op_err.cls = CS_OK;
  g->op_start_ns = cs_mono_ns();
  pthread_cond_signal(&cs_sched_enforcer(s, core)->cv);
}

/* Waits (s->mu held) for the enforcer to finish g's request; g is idle again after. */
static void await_op(struct cs_sched *s, struct cs_group *g) {
  while (!g->op_done) pthread_cond_wait(&s->done_cv, &s->mu);
  g->op = CS_OP_NONE;
  pthread_cond_broadcast(&s->done_cv); /* for wait_idle */
}

/* Waits (s->mu held, g idle) for the enforcer to carry out a request of g. */
static void run_op(struct cs_sched *s, struct cs_group *g, enum cs_op op, int core) {
  post_op(s, g, op, core);
  await_op(s, g);
}

static void release_tasks(struct cs_group *g) {
  for (uint32_t i = 0; i < g->n; i++) cs_task_restore(&g->tasks[i]);
  for (uint32_t i = 0; i < g->n; i++) cs_task_signal_stop(&g->tasks[i], 0);
}

/* Frees g, whose first `opened` tasks were opened; the guardian forgets them. */
static void free_group(struct cs_sched *s, struct cs_group *g, uint32_t opened) {
  for (uint32_t i = 0; i < opened; i++) cs_guardian_release(&s->guardian, &g->tasks[i]);
  for (uint32_t i = 0; i < opened; i++) cs_task_close(&g->tasks[i]);
  cs_chain_unmap(&g->chain);
  free(g);
}

/* Registers an sgroup (ctl_mu held). starts, if not NULL, are the threads' start times
 * when they were announced: a thread that is not that one any more is refused. */
static enum cs_errclass register_locked(struct cs_sched *s, const char *id, const pid_t *tids,
                                        const uint64_t *starts, uint32_t n, const char *path,
                                        struct cs_error *err) {
  if (check_id(id, err)) return err->cls;
  if (n == 0 || n > KEEL_SCHED_MAX_NFS)
    return cs_error_set(err, CS_EINVAL, "an sgroup has 1..%d threads, not %u", KEEL_SCHED_MAX_NFS,
                        n);
  if (!path || strlen(path) >= CS_PATH_MAX)
    return cs_error_set(err, CS_EINVAL, "pktbuf path missing or too long");
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t j = 0; j < i; j++)
      if (tids[i] == tids[j])
        return cs_error_set(err, CS_EINVAL, "thread %d is at positions %u and %u", (int)tids[i],
                            j, i);
  pthread_mutex_lock(&s->mu);
  enum cs_errclass cls = CS_OK;
  if (find_group(s, id)) cls = cs_error_set(err, CS_EEXIST, "sgroup \"%s\" exists", id);
  for (struct cs_group *g = s->groups; g && !cls; g = g->next)
    for (uint32_t k = 0; k < g->n && !cls; k++)
      for (uint32_t i = 0; i < n && !cls; i++)
        if (g->tasks[k].tid == tids[i])
          cls = cs_error_set(err, CS_EEXIST, "thread %d is already in sgroup \"%s\"",
                             (int)tids[i], g->id);
  pthread_mutex_unlock(&s->mu);
  if (cls) return cls;

  struct cs_group *g = calloc(1, sizeof *g);
  if (!g) return cs_error_set(err, CS_EINTERNAL, "out of memory");
  uint32_t opened = 0;
  snprintf(g->id, sizeof g->id, "%s", id);
  snprintf(g->path, sizeof g->path, "%s", path);
  g->n = n;
  g->core = -1;
  g->state = CS_DETACHED;
  for (uint32_t i = 0; i < n; i++) {
    if (cs_task_open(&g->tasks[i], tids[i], err)) goto fail;
    opened++;
    /* Read after the pidfd is open: a thread that still lives then is the one read. */
    uint64_t start = 0;
    if (cs_proc_starttime("/proc", g->tasks[i].pid, tids[i], &start) != 0 ||
        (starts && (start != starts[i] || cs_task_gone(&g->tasks[i])))) {
      cs_error_set(err, CS_ENOENT,
                   "thread %d of position %u exited after it was announced (its id names "
                   "another thread now)",
                   (int)tids[i], i);
      goto fail;
    }
    g->starts[i] = start;
  }
  /* The path is the NFs' own: it is resolved inside their roots, which the
   * threads' descriptors, opened above, pin down. */
  if (cs_chain_map(&g->chain, path, g->tasks, n, err)) goto fail;
  for (uint32_t i = 0; i < n; i++) {
    /* An NF writes the id its own PID namespace gives it (a container's). */
    uint64_t announced = CS_LOAD(g->chain.w->tids[i]);
    pid_t inner = cs_pidns_inner_tid(tids[i]);
    if (announced != 0 && announced != (uint64_t)tids[i] && announced != (uint64_t)inner) {
      cs_error_set(err, CS_EINVAL,
                   "pktbuf %s%s says position %u is thread %llu, not %d (%d in its PID namespace)",
                   path, g->chain.where, i, (unsigned long long)announced, (int)tids[i],
                   (int)inner);
      goto fail;
    }
    if (g->tasks[i].pid == getpid()) {
      cs_error_set(err, CS_EINVAL, "thread %d belongs to keel-coopsched", (int)tids[i]);
      goto fail;
    }
    if (g->tasks[i].pid == 1) {
      cs_error_set(err, CS_EINVAL,
                   "thread %d is init, not an NF (an NF in a container names its PID namespace)",
                   (int)tids[i]);
      goto fail;
    }
  }
  /* The guardian learns of them before they are stopped: if this process dies from here
   * on, it continues them and gives them their policy back. */
  for (uint32_t i = 0; i < n; i++) cs_guardian_hold(&s->guardian, &g->tasks[i]);
  /* Stop first, then make it FIFO on the core: it never runs as FIFO before
   * it is arranged. */
  for (uint32_t i = 0; i < n; i++) cs_task_signal_stop(&g->tasks[i], 1);
  for (int ms = 0;; ms++) {
    uint32_t stopped = 0;
    for (uint32_t i = 0; i < n; i++) stopped += cs_task_is_stopped(&g->tasks[i]);
    if (stopped == n) break;
    if (ms == CS_REGISTER_STOP_TIMEOUT_MS) {
      for (uint32_t i = 0; i < n; i++) cs_task_signal_stop(&g->tasks[i], 0);
      cs_error_set(err, CS_ETIMEDOUT, "threads of \"%s\" did not stop within %d ms", id,
                   CS_REGISTER_STOP_TIMEOUT_MS);
      goto fail;
    }
    struct timespec one = {0, 1000000};
    nanosleep(&one, NULL);
  }
  for (uint32_t i = 0; i < n; i++) {
    int rc = cs_task_set_core(&g->tasks[i], s->opt.cores[0]);
    if (rc == 0) rc = cs_task_set_waiting(&g->tasks[i], s->opt.wait_priority);
    if (rc != 0) {
      char why[768] = "";
      if (rc == -EPERM) cs_rt_explain_eperm(tids[i], why, sizeof why);
      release_tasks(g);
      cs_error_set(err, CS_EINTERNAL, "thread %d: cannot make it SCHED_FIFO on core %d: %s%s",
                   (int)tids[i], s->opt.cores[0], strerror(-rc), why);
      goto fail;
    }
  }
  pthread_mutex_lock(&s->mu);
  g->serial = ++s->last_serial;
  for (uint32_t i = 0; i < n; i++) g->wd[i].key = g->serial * KEEL_SCHED_MAX_NFS + i;
  g->next = s->groups;
  s->groups = g;
  pthread_mutex_unlock(&s->mu);
  cs_watcher_wake(s);
  return CS_OK;
fail:
  free_group(s, g, opened);
  return err->cls;
}

/* Writes the sgroups in service to the state file. persist_mu orders the writes as their
 * snapshots: the last write has the latest table. Not under ctl_mu alone, so that an
 * Attach, which writes without ctl_mu, is not held up by another caller's write either. A
 * failure is reported, not returned: the change it follows has happened; only a successor's
 * adoption is at stake. */
static void persist_locked(struct cs_sched *s) {
  if (!s->opt.state_file[0]) return;
  size_t n = 0, i = 0;
  pthread_mutex_lock(&s->persist_mu);
  pthread_mutex_lock(&s->mu);
  for (struct cs_group *g = s->groups; g; g = g->next) n++;
  struct cs_state_entry *v = calloc(n ? n : 1, sizeof *v);
  for (struct cs_group *g = s->groups; g && v; g = g->next) {
    if (g->state != CS_DETACHED && g->state != CS_ATTACHED && g->state != CS_DETACHING)
      continue; /* out of service: the agent rebuilds it */
    struct cs_state_entry *e = &v[i++];
    snprintf(e->id, sizeof e->id, "%s", g->id);
    snprintf(e->path, sizeof e->path, "%s", g->path);
    e->core = g->state == CS_ATTACHED ? g->core : -1;
    e->n = g->n;
    for (uint32_t k = 0; k < g->n; k++) {
      e->tids[k] = g->tasks[k].tid;
      e->starts[k] = g->starts[k];
    }
  }
  pthread_mutex_unlock(&s->mu);
  struct cs_error err;
  if (!v)
    fprintf(stderr, "keel-coopsched: state file %s not written: out of memory\n", s->opt.state_file);
  else if (cs_state_write(s->opt.state_file, v, i, &err) != CS_OK)
    fprintf(stderr, "keel-coopsched: %s (a successor could not take the chains back)\n", err.msg);
  pthread_mutex_unlock(&s->persist_mu);
  free(v);
}

enum cs_errclass cs_sched_register(struct cs_sched *s, const char *group, const pid_t *tids,
                                   uint32_t n, const char *pktbuf, struct cs_error *err) {
  pthread_mutex_lock(&s->ctl_mu);
  enum cs_errclass cls = register_locked(s, group, tids, NULL, n, pktbuf, err);
  if (cls == CS_OK) persist_locked(s);
  pthread_mutex_unlock(&s->ctl_mu);
  return cls;
}

enum cs_errclass cs_sched_announce(struct cs_sched *s, const char *group, uint32_t position,
                                   uint32_t count, pid_t tid, uint64_t start, const char *pktbuf,
                                   uint32_t *announced, int *registered, struct cs_error *err) {
  *announced = 0;
  *registered = 0;
  if (check_id(group, err)) return err->cls;
  if (count == 0 || count > KEEL_SCHED_MAX_NFS || position >= count)
    return cs_error_set(err, CS_EINVAL, "position %u of %u: want 0 <= position < count <= %d",
                        position, count, KEEL_SCHED_MAX_NFS);
  if (!pktbuf || !pktbuf[0] || strlen(pktbuf) >= CS_PATH_MAX)
    return cs_error_set(err, CS_EINVAL, "pktbuf path missing or too long");
  if (start == 0 && (tid <= 0 || cs_proc_starttime("/proc", tid, 0, &start) != 0))
    return cs_error_set(err, CS_ENOENT, "thread %d does not exist", (int)tid);
  pthread_mutex_lock(&s->ctl_mu);
  enum cs_errclass cls = CS_OK;
  pthread_mutex_lock(&s->mu);
  int exists = find_group(s, group) != NULL;
  pthread_mutex_unlock(&s->mu);
  struct cs_announce **pp = &s->announces, *a;
  while ((a = *pp) && strcmp(a->id, group) != 0) pp = &a->next;
  if (exists) {
    cls = cs_error_set(err, CS_EEXIST, "sgroup \"%s\" exists", group);
  } else if (a && (a->count != count || strcmp(a->path, pktbuf) != 0)) {
    cls = cs_error_set(err, CS_EINVAL,
                       "sgroup \"%s\" was announced with %u positions and pktbuf %s", group,
                       a->count, a->path);
  } else {
    if (!a) {
      a = calloc(1, sizeof *a);
      if (!a) {
        pthread_mutex_unlock(&s->ctl_mu);
        return cs_error_set(err, CS_EINTERNAL, "out of memory");
      }
      snprintf(a->id, sizeof a->id, "%s", group);
      snprintf(a->path, sizeof a->path, "%s", pktbuf);
      a->count = count;
      a->next = s->announces;
      s->announces = a;
      pp = &s->announces;
    }
    a->tids[position] = tid;
    a->starts[position] = start;
    a->mask |= 1u << position;
    *announced = (uint32_t)__builtin_popcount(a->mask);
    if (*announced == count) {
      *pp = a->next;
      cls = register_locked(s, a->id, a->tids, a->starts, a->count, a->path, err);
      *registered = cls == CS_OK;
      if (*registered) persist_locked(s);
      free(a);
    }
  }
  pthread_mutex_unlock(&s->ctl_mu);
  return cls;
}

int cs_sched_known(struct cs_sched *s, const char *group) {
  pthread_mutex_lock(&s->ctl_mu);
  int known = 0;
  for (struct cs_announce *a = s->announces; a && !known; a = a->next) known = !strcmp(a->id, group);
  pthread_mutex_lock(&s->mu);
  known = known || find_group(s, group) != NULL;
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_unlock(&s->ctl_mu);
  return known;
}

/* Copies text into out, each byte outside printable ASCII made '?': a refused caller's
 * words reach the event log and stderr, one line per event. */
static void printable(char *out, size_t size, const char *text) {
  size_t i = 0;
  for (; text && text[i] && i + 1 < size; i++)
    out[i] = text[i] >= 0x20 && text[i] < 0x7f ? text[i] : '?';
  out[i] = '\0';
}

void cs_sched_refused(struct cs_sched *s, enum cs_refusal r, const char *group, pid_t tid,
                      const char *message) {
  if (r <= CS_REFUSED_NONE || r >= CS_REFUSED_N) return;
  uint64_t now = cs_mono_ns(), unposted = 0;
  int post = 0;
  pthread_mutex_lock(&s->mu);
  s->refused[r]++;
  if (!s->refused_posted_ns[r] || now - s->refused_posted_ns[r] >= 1000000000ull) {
    post = 1;
    unposted = s->refused_unposted[r];
    s->refused_unposted[r] = 0;
    s->refused_posted_ns[r] = now;
  } else {
    s->refused_unposted[r]++;
  }
  pthread_mutex_unlock(&s->mu);
  if (!post) return;
  char msg[sizeof ((struct cs_event *)0)->message], clean[sizeof msg], id[CS_GROUP_ID_MAX];
  if (unposted)
    snprintf(msg, sizeof msg, "%llu more since the last such event; %s",
             (unsigned long long)unposted, message);
  else
    snprintf(msg, sizeof msg, "%s", message);
  printable(clean, sizeof clean, msg);
  printable(id, sizeof id, group);
  cs_events_post(&s->events, "refused", id, 0, tid, 0, clean);
}

uint64_t cs_sched_refusals(struct cs_sched *s, enum cs_refusal r) {
  if (r <= CS_REFUSED_NONE || r >= CS_REFUSED_N) return 0;
  pthread_mutex_lock(&s->mu);
  uint64_t n = s->refused[r];
  pthread_mutex_unlock(&s->mu);
  return n;
}

static void unregister_locked(struct cs_sched *s, struct cs_group *g);

/* Whether g can be attached to core (ctl_mu and mu held); waits for a request of g under
 * way first. */
static enum cs_errclass check_attach(struct cs_sched *s, struct cs_group *g, int core,
                                     struct cs_error *err) {
  wait_idle(s, g);
  if (!cs_sched_enforcer(s, core))
    return cs_error_set(err, CS_EINVAL, "core %d is not managed by keel-coopsched", core);
  if (check_in_service(g, err)) return err->cls;
  if (g->state != CS_DETACHED)
    return cs_error_set(err, CS_ESTATE, "sgroup \"%s\" is %s on core %d", g->id,
                        cs_group_state_name(g->state), g->core);
  return CS_OK;
}

/* Waits (s->mu held) for the attach post_op handed to the enforcer; its outcome. */
static enum cs_errclass await_attach(struct cs_sched *s, struct cs_group *g, struct cs_error *err) {
  await_op(s, g);
  if (g->op_err.cls) return cs_error_set(err, g->op_err.cls, "%s", g->op_err.msg);
  return CS_OK;
}

/* Attaches g to core (ctl_mu and mu held). */
static enum cs_errclass attach_locked(struct cs_sched *s, struct cs_group *g, int core,
                                      struct cs_error *err) {
  if (check_attach(s, g, core, err)) return err->cls;
  post_op(s, g, CS_OP_ATTACH, core);
  return await_attach(s, g, err);
}

enum cs_errclass cs_sched_attach(struct cs_sched *s, const char *group, int core,
                                 struct cs_error *err) {
  pthread_mutex_lock(&s->ctl_mu);
  pthread_mutex_lock(&s->mu);
  struct cs_group *g;
  enum cs_errclass cls = lookup(s, group, &g, err);
  if (!cls) cls = check_attach(s, g, core, err);
  if (!cls) post_op(s, g, CS_OP_ATTACH, core);
  /* The enforcer attaches g while other control calls go on: two chains scaling out at once
   * (the first flows after a deploy) are attached in the same tick, and neither waits for the
   * other's caller to be scheduled on a busy shared core and write the state file (which
   * needs only persist_mu). A call that finds g's request under way waits for it
   * (wait_idle); only Unregister frees g, and it waits too. */
  pthread_mutex_unlock(&s->ctl_mu);
  if (!cls) cls = await_attach(s, g, err);
  pthread_mutex_unlock(&s->mu);
  if (!cls) persist_locked(s);
  return cls;
}

enum cs_errclass cs_sched_adopt(struct cs_sched *s, uint32_t *adopted, uint32_t *dropped,
                                struct cs_error *err) {
  *adopted = *dropped = 0;
  if (!s->opt.state_file[0]) return CS_OK;
  struct cs_state_entry *v;
  size_t n;
  if (cs_state_read(s->opt.state_file, &v, &n, err)) return err->cls;
  pthread_mutex_lock(&s->ctl_mu);
  for (size_t i = 0; i < n; i++) {
    struct cs_state_entry *e = &v[i];
    struct cs_error why = {0};
    /* The predecessor's guardian gave the threads back their own policy and let them run:
     * registering stops them again, as for a new sgroup, after checking each is the very
     * thread that was registered. */
    int ok = register_locked(s, e->id, e->tids, e->starts, e->n, e->path, &why) == CS_OK;
    if (ok && e->core >= 0) {
      pthread_mutex_lock(&s->mu);
      struct cs_group *g = find_group(s, e->id);
      ok = g && attach_locked(s, g, e->core, &why) == CS_OK;
      pthread_mutex_unlock(&s->mu);
      if (!ok && g) unregister_locked(s, g); /* given back; the agent rebuilds it */
    }
    char msg[sizeof ((struct cs_event *)0)->message];
    if (ok) {
      (*adopted)++;
      if (e->core >= 0) snprintf(msg, sizeof msg, "taken back from the state file, attached to core %d", e->core);
      else snprintf(msg, sizeof msg, "taken back from the state file, detached");
      cs_events_post(&s->events, "adopted", e->id, 0, 0, 0, msg);
    } else {
      (*dropped)++;
      snprintf(msg, sizeof msg, "not taken back from the state file: %.120s", why.msg);
      cs_events_post(&s->events, "not-adopted", e->id, 0, 0, 0, msg);
    }
  }
  persist_locked(s);
  pthread_mutex_unlock(&s->ctl_mu);
  free(v);
  return CS_OK;
}

/* Detaches g (s->mu held); a no-op if it is detached, cut off or failed. */
static void detach_locked(struct cs_sched *s, struct cs_group *g, int *at_boundary,
                          uint64_t *wait_us) {
  *at_boundary = 1;
  *wait_us = 0;
  wait_idle(s, g);
  if (g->state != CS_ATTACHED && g->state != CS_DETACHING) return;
  g->at_boundary = 1;
  run_op(s, g, CS_OP_DETACH, g->core);
  *at_boundary = g->at_boundary && !g->cut;
  *wait_us = (cs_mono_ns() - g->op_start_ns) / 1000;
}

enum cs_errclass cs_sched_detach(struct cs_sched *s, const char *group, int *at_boundary,
                                 uint64_t *wait_us, struct cs_error *err) {
  pthread_mutex_lock(&s->ctl_mu);
  pthread_mutex_lock(&s->mu);
  struct cs_group *g;
  enum cs_errclass cls = lookup(s, group, &g, err);
  if (!cls) cls = check_in_service(g, err);
  if (!cls) detach_locked(s, g, at_boundary, wait_us);
  pthread_mutex_unlock(&s->mu);
  if (!cls) persist_locked(s);
  pthread_mutex_unlock(&s->ctl_mu);
  return cls;
}

static void unregister_locked(struct cs_sched *s, struct cs_group *g) {
  int at_boundary;
  uint64_t wait_us;
  pthread_mutex_lock(&s->mu);
  detach_locked(s, g, &at_boundary, &wait_us);
  struct cs_group **pp = &s->groups;
  while (*pp != g) pp = &(*pp)->next;
  *pp = g->next;
  pthread_mutex_unlock(&s->mu);
  cs_watcher_wake(s);
  release_tasks(g);
  free_group(s, g, g->n);
}

enum cs_errclass cs_sched_unregister(struct cs_sched *s, const char *group, struct cs_error *err) {
  pthread_mutex_lock(&s->ctl_mu);
  pthread_mutex_lock(&s->mu);
  struct cs_group *g;
  enum cs_errclass cls = lookup(s, group, &g, err);
  pthread_mutex_unlock(&s->mu);
  if (!cls) {
    unregister_locked(s, g);
    persist_locked(s);
  }
  pthread_mutex_unlock(&s->ctl_mu);
  return cls;
}

enum cs_errclass cs_sched_set_batch(struct cs_sched *s, const char *group, uint32_t batch,
                                    struct cs_error *err) {
  if (batch == 0) return cs_error_set(err, CS_EINVAL, "batch must be at least 1");
  pthread_mutex_lock(&s->mu);
  struct cs_group *g;
  enum cs_errclass cls = lookup(s, group, &g, err);
  if (!cls) CS_STORE(g->chain.w->batch, batch);
  pthread_mutex_unlock(&s->mu);
  return cls;
}

static void fill_info(const struct cs_group *g, struct cs_group_info *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->id, sizeof out->id, "%s", g->id);
  snprintf(out->path, sizeof out->path, "%s", g->path);
  out->state = g->state;
  out->core = g->core;
  out->n = g->n;
  const struct keel_chain_sched *w = g->chain.w;
  out->batch = CS_LOAD(w->batch);
  out->turn = CS_LOAD(w->turn);
  out->rounds = CS_LOAD(w->rounds);
  out->handoffs = CS_LOAD(w->handoffs);
  out->packets = CS_LOAD(w->packets);
  for (uint32_t i = 0; i < g->n; i++) {
    out->threads[i].position = i;
    out->threads[i].tid = g->tasks[i].tid;
    out->threads[i].pid = g->tasks[i].pid;
    out->threads[i].state = cs_task_state(&g->tasks[i]);
    struct cs_task_sched st;
    if (cs_task_schedstat(&g->tasks[i], &st) == 0) {
      out->threads[i].cpu_ns = st.cpu_ns;
      out->cpu_ns += st.cpu_ns;
    }
  }
}

enum cs_errclass cs_sched_group(struct cs_sched *s, const char *group, struct cs_group_info *out,
                                struct cs_error *err) {
  pthread_mutex_lock(&s->mu);
  struct cs_group *g;
  enum cs_errclass cls = lookup(s, group, &g, err);
  if (!cls) fill_info(g, out);
  pthread_mutex_unlock(&s->mu);
  return cls;
}

size_t cs_sched_groups(struct cs_sched *s, struct cs_group_info *out, size_t max) {
  size_t n = 0;
  pthread_mutex_lock(&s->mu);
  for (struct cs_group *g = s->groups; g; g = g->next, n++)
    if (n < max) fill_info(g, &out[n]);
  pthread_mutex_unlock(&s->mu);
  return n;
}

const struct cs_options *cs_sched_options(const struct cs_sched *s) { return &s->opt; }

uint64_t cs_sched_tsc_hz(const struct cs_sched *s) { return s->tsc_hz; }

uint64_t cs_sched_handoff_cycles(const struct cs_sched *s) { return s->handoff_cycles; }

void cs_sched_enforcer_cost(struct cs_sched *s, int i, uint64_t *work_cycles, uint64_t *wakeups) {
  *work_cycles = __atomic_load_n(&s->enforcers[i].work_cycles, __ATOMIC_RELAXED);
  *wakeups = __atomic_load_n(&s->enforcers[i].wakeups, __ATOMIC_RELAXED);
}

struct cs_events *cs_sched_events(struct cs_sched *s) { return &s->events; }

void cs_sched_destroy(struct cs_sched *s) {
  pthread_mutex_lock(&s->ctl_mu);
  while (s->groups) unregister_locked(s, s->groups);
  persist_locked(s); /* every thread was given back: nothing for a successor to take */
  while (s->announces) {
    struct cs_announce *a = s->announces;
    s->announces = a->next;
    free(a);
  }
  pthread_mutex_unlock(&s->ctl_mu);
  stop_enforcers(s);
  release_host(s);
  cs_guardian_stop(&s->guardian); /* everything is undone: it has nothing to do */
  cs_events_logger_stop(&s->logger);
  cs_events_wake(&s->events);
  cs_events_destroy(&s->events);
  if (s->watch_fd >= 0) close(s->watch_fd);
  for (int i = 0; i < s->opt.ncores; i++) pthread_cond_destroy(&s->enforcers[i].cv);
  pthread_cond_destroy(&s->done_cv);
  pthread_mutex_destroy(&s->mu);
  pthread_mutex_destroy(&s->ctl_mu);
  pthread_mutex_destroy(&s->persist_mu);
  free(s);
}
