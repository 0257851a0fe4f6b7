/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The enforcer of one managed core. It runs pinned to the core at the
 * highest SCHED_FIFO priority, so while it works no NF thread of the core
 * runs; it sleeps between ticks (1 ms, 50 us while an sgroup is detaching)
 * so the NF threads have the core otherwise. With no sgroup attached to its
 * core it only wakes for a request (every request signals it) or once a
 * second: an idle daemon costs no CPU. It applies the master's
 * attach/detach requests, drives detaching sgroups to a stop and runs the
 * yield watchdog (Galleon footnote 2); at each tick it also looks at what
 * has become of its sgroups' threads (cs_group_check_threads). The exit
 * watcher (cs-watcher.c) does that for every sgroup the moment a thread
 * exits. An enforcer never does blocking I/O: events go to a log that a
 * thread under CFS writes out (cs-event.h).
 *
 * Attach wakes the threads from this core in chain order: a SCHED_FIFO
 * thread that becomes runnable goes to the tail of its priority's queue, so
 * the queue holds the chain in order and each sched_yield hands the core to
 * the next position. Several sgroups at the same run priority take turns
 * batch by batch.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "cs-sched-private.h"
#include "cs-tsc.h"
#include "cs-watchdog.h"

#define CS_TICK_NS 1000000ull
#define CS_FAST_TICK_NS 50000ull
#define CS_STOP_TIMEOUT_NS 1000000000ull
#define CS_CLOSE_GRACE_NS 1000000000ull
#define CS_DEMOTED_GRACE_NS 200000000ull
#define CS_MIN_RECHECK_NS 50000ull
#define CS_IDLE_TICK_NS 1000000000ull

/* What the enforcer's next sleep should be, from its last tick. */
enum cs_pace { CS_PACE_IDLE, CS_PACE_WATCH, CS_PACE_FAST };

static void complete_op(struct cs_sched *s, struct cs_group *g) {
  g->op_done = 1;
  pthread_cond_broadcast(&s->done_cv);
}

static void stop_all(struct cs_group *g, uint64_t now_ns) {
  for (uint32_t i = 0; i < g->n; i++) cs_task_signal_stop(&g->tasks[i], 1);
  g->phase = CS_PHASE_STOP;
  g->deadline_ns = now_ns + CS_STOP_TIMEOUT_NS;
}

/* Fails g because of position pos (why says what became of it). Its
 * successor would wait for a turn forever, so, as for a cut-off (Galleon
 * footnote 2), the chain stops: the other threads get SIGSTOP and their
 * original policy and affinity, the core goes back to the other sgroups and
 * only Unregister is accepted. */
static void fail_group(struct cs_sched *s, struct cs_group *g, uint32_t pos, const char *why) {
  const char *was = cs_group_state_name(g->state);
  for (uint32_t i = 0; i < g->n; i++) cs_task_signal_stop(&g->tasks[i], 1);
  for (uint32_t i = 0; i < g->n; i++) cs_task_restore(&g->tasks[i]);
  CS_STORE(g->chain.w->detach_req, 0u);
  g->state = CS_FAILED;
  g->core = -1;
  g->at_boundary = 0;
  if (g->op != CS_OP_NONE && !g->op_done) {
    if (g->op == CS_OP_ATTACH)
      cs_error_set(&g->op_err, CS_ESTATE, "attach %s: position %u (thread %d) %s", g->id, pos,
                   (int)g->tasks[pos].tid, why);
    complete_op(s, g);
  }
  char msg[160];
  snprintf(msg, sizeof msg,
           "%s while the sgroup was %s: the others stopped under their original policy, sgroup "
           "failed",
           why, was);
  cs_events_post(&s->events, "thread-exited", g->id, pos, g->tasks[pos].tid, 0, msg);
}

/* Finishes g: every thread has exited with 0, the chain closed on purpose. */
static void finish_group(struct cs_sched *s, struct cs_group *g) {
  const char *was = cs_group_state_name(g->state);
  CS_STORE(g->chain.w->detach_req, 0u);
  g->state = CS_FINISHED;
  g->core = -1;
  if (g->op != CS_OP_NONE && !g->op_done) {
    if (g->op == CS_OP_ATTACH)
      cs_error_set(&g->op_err, CS_ESTATE, "attach %s: its threads have exited with 0", g->id);
    complete_op(s, g);
  }
  char msg[160];
  snprintf(msg, sizeof msg, "every thread exited with 0 while the sgroup was %s: the chain closed",
           was);
  cs_events_post(&s->events, "finished", g->id, 0, g->tasks[0].tid, 0, msg);
}

/* Says what a wait status means, for an event. */
static void describe_exit(int status, char *out, size_t size) {
  if (status < 0) snprintf(out, size, "exited (the kernel does not say how)");
  else if (WIFSIGNALED(status)) snprintf(out, size, "was killed by signal %d", WTERMSIG(status));
  else snprintf(out, size, "exited with %d", WEXITSTATUS(status));
}

int cs_group_check_threads(struct cs_sched *s, struct cs_group *g, uint64_t now_ns) {
  if (g->state == CS_CUT_OFF || g->state == CS_FAILED || g->state == CS_FINISHED) return 1;
  uint32_t gone = 0, clean = 0, first = g->n, alive = g->n;
  char why[96];
  for (uint32_t i = 0; i < g->n; i++) {
    struct cs_task *t = &g->tasks[i];
    if (!g->gone[i] && cs_task_gone(t)) g->gone[i] = 1;
    if (!g->gone[i]) {
      if (alive == g->n) alive = i;
      continue;
    }
    gone++;
    if (first == g->n) first = i;
    if (!g->status_known[i]) {
      int rc = cs_task_exit_status(t, &g->status[i]);
      if (rc == -1) g->status[i] = -1;
      g->status_known[i] = rc != 0;
    }
    if (!g->status_known[i]) continue; /* the thread is gone, its process still ending */
    if (g->status[i] >= 0 && WIFEXITED(g->status[i]) && WEXITSTATUS(g->status[i]) == 0) {
      clean++;
      continue;
    }
    describe_exit(g->status[i], why, sizeof why);
    fail_group(s, g, i, why);
    return 1;
  }
  if (!gone) return 0;
  if (clean == g->n) {
    finish_group(s, g);
    return 1;
  }
  if (!g->end_by_ns) g->end_by_ns = now_ns + CS_CLOSE_GRACE_NS;
  if (g->state == CS_DETACHED) {
    /* Its other threads are stopped: they cannot follow. */
    snprintf(why, sizeof why, "exited while the others were stopped");
    fail_group(s, g, first, why);
    return 1;
  }
  if (now_ns >= g->end_by_ns) {
    if (alive < g->n) snprintf(why, sizeof why, "exited, and position %u had not 1 s later", alive);
    else snprintf(why, sizeof why, "exited, and the others' processes had not ended 1 s later");
    fail_group(s, g, first, why);
    return 1;
  }
  return 0;
}

static void do_attach(struct cs_sched *s, struct cs_enforcer *e, struct cs_group *g) {
  int rc = 0;
  uint32_t i;
  if (cs_group_check_threads(s, g, cs_mono_ns())) return;
  for (i = 0; i < g->n && rc == 0; i++) {
    rc = cs_task_set_core(&g->tasks[i], e->core);
    if (rc == 0) rc = cs_task_set_fifo(&g->tasks[i], s->opt.run_priority);
  }
  if (rc != 0) {
    for (uint32_t j = 0; j < g->n; j++) cs_task_set_waiting(&g->tasks[j], s->opt.wait_priority);
    cs_error_set(&g->op_err, rc == -ESRCH ? CS_ENOENT : CS_EINTERNAL,
                 "attach %s: position %u (thread %d): %s", g->id, i - 1,
                 (int)g->tasks[i - 1].tid, strerror(-rc));
    complete_op(s, g);
    return;
  }
  for (i = 0; i < g->n; i++) cs_task_signal_stop(&g->tasks[i], 0);
  g->state = CS_ATTACHED;
  g->core = e->core;
  g->cut = 0;
  g->demoted_mask = 0;
  g->demoted_by_ns = 0;
  for (i = 0; i < g->n; i++) {
    g->wd[i].known = 0;
    g->wd[i].win_id = 0;
  }
  complete_op(s, g);
}

static void start_detach(struct cs_sched *s, struct cs_group *g, uint64_t now_ns) {
  CS_STORE(g->chain.w->detach_req, 1u);
  g->state = CS_DETACHING;
  g->phase = CS_PHASE_PARK;
  g->deadline_ns = now_ns + s->opt.detach_timeout_us * 1000ull;
}

static void cut_off(struct cs_sched *s, struct cs_group *g, uint32_t pos, uint64_t busy_us,
                    uint64_t now_ns) {
  const struct cs_task *t = &g->tasks[pos];
  cs_task_demote(t);
  stop_all(g, now_ns);
  g->state = CS_DETACHING;
  g->cut = 1;
  char msg[160];
  snprintf(msg, sizeof msg,
           "position %u held the core for %" PRIu64 " us without yielding (timeout %" PRIu64
           " us): demoted to SCHED_OTHER, stopped, sgroup cut off",
           pos, busy_us, s->opt.yield_timeout_us);
  cs_events_post(&s->events, "cut-off", g->id, pos, t->tid, busy_us, msg);
}

static void finish_stop(struct cs_sched *s, struct cs_group *g) {
  for (uint32_t i = 0; i < g->n; i++)
    if (cs_task_is_fifo(&g->tasks[i]))
      cs_task_set_waiting(&g->tasks[i], s->opt.wait_priority);
  CS_STORE(g->chain.w->detach_req, 0u);
  /* A detach does not save an sgroup the watchdog has demoted a thread of. */
  if (g->demoted_mask && !g->cut) cut_off(s, g, g->demoted_pos, g->demoted_busy_us, cs_mono_ns());
  g->state = g->cut ? CS_CUT_OFF : CS_DETACHED;
  g->core = -1;
  if (g->op == CS_OP_DETACH && !g->op_done) complete_op(s, g);
}

/* The sgroups whose threads the watchdog looks at on core e: attached
 * there, or parking there to detach. */
static int watched(const struct cs_group *g, const struct cs_enforcer *e) {
  return g->core == e->core &&
         (g->state == CS_ATTACHED || (g->state == CS_DETACHING && g->phase == CS_PHASE_PARK));
}

static const struct cs_task *wd_task(void *ctx, size_t i) {
  const struct cs_enforcer *e = ctx;
  return &e->wd_groups[i]->tasks[e->wd_pos[i]];
}

static int wd_runnable(void *ctx, size_t i) { return cs_task_runnable(wd_task(ctx, i)); }

static int wd_waiting(void *ctx, size_t i) {
  const struct cs_enforcer *e = ctx;
  struct cs_task_stat st;
  return cs_task_stat(wd_task(ctx, i), &st) == 0 && st.state == 'R' && st.cpu == e->core &&
         st.policy == SCHED_FIFO && st.rt_priority == e->s->opt.run_priority && !st.exiting;
}

static int wd_exiting(void *ctx, size_t i) {
  struct cs_task_stat st;
  return cs_task_stat(wd_task(ctx, i), &st) != 0 || st.exiting;
}

/* The watchdog's verdict: thread pos of g held the core. Only the holder is
 * demoted at once: the core is the others' again. A chain that holds the
 * core in its clean-up after it closed on purpose (keel-nf's position 0
 * freeing its memory while the others wait to exit) must be able to end;
 * so g is cut off (stopped) only if none of its threads has exited with 0
 * within CS_DEMOTED_GRACE_NS, and then within CS_CLOSE_GRACE_NS all must
 * have (cs_group_check_threads). */
static void demote(struct cs_sched *s, struct cs_group *g, uint32_t pos, const struct cs_group *wg,
                   uint32_t wpos, uint64_t held_ns, uint64_t now_ns) {
  uint64_t held_us = held_ns / 1000;
  cs_task_demote(&g->tasks[pos]);
  g->demoted_mask |= 1u << pos;
  if (!g->demoted_by_ns) {
    g->demoted_by_ns = now_ns + CS_DEMOTED_GRACE_NS;
    g->demoted_pos = pos;
    g->demoted_busy_us = held_us;
  }
  char msg[CS_GROUP_ID_MAX + 160];
  snprintf(msg, sizeof msg,
           "position %u held the core for %" PRIu64 " us while %s position %u waited: demoted to "
           "SCHED_OTHER, cut off unless its chain exits with 0",
           pos, held_us, wg == g ? "its" : wg->id, wpos);
  cs_events_post(&s->events, "demoted", g->id, pos, g->tasks[pos].tid, held_us, msg);
}

/* Takes the watchdog's look at the threads attached to core e (cs-watchdog.h).
 * Returns how soon it could next give a verdict (0: not before the tick). */
static uint64_t watchdog(struct cs_sched *s, struct cs_enforcer *e, uint64_t now_ns,
                         uint64_t late_ns) {
  size_t n = 0;
  for (struct cs_group *g = s->groups; g; g = g->next) {
    if (!watched(g, e)) continue;
    for (uint32_t i = 0; i < g->n && n < CS_WD_MAX_THREADS; i++) {
      if (g->gone[i] || (g->demoted_mask & (1u << i))) continue;
      struct cs_task_sched st;
      int alive = cs_task_schedstat(&g->tasks[i], &st) == 0;
      e->wd_groups[n] = g;
      e->wd_pos[n] = i;
      e->wd_threads[n] = &g->wd[i];
      e->wd_now[n] = (struct cs_wd_now){alive, alive ? st.cpu_ns : 0, alive ? st.switches : 0};
      n++;
    }
  }
  static const struct cs_wd_ops ops = {wd_runnable, wd_waiting, wd_exiting};
  struct cs_wd_verdict v;
  uint64_t recheck;
  if (!cs_wd_look(&e->wd, e->wd_threads, e->wd_now, n, now_ns, late_ns,
                  s->opt.yield_timeout_us * 1000ull, &ops, e, &v, &recheck))
    return recheck;
  demote(s, e->wd_groups[v.holder], e->wd_pos[v.holder],
         v.waiter < n ? e->wd_groups[v.waiter] : e->wd_groups[v.holder],
         v.waiter < n ? e->wd_pos[v.waiter] : 0, v.held_ns, now_ns);
  return 0;
}

static void step_detaching(struct cs_sched *s, struct cs_group *g, uint64_t now_ns) {
  struct keel_chain_sched *w = g->chain.w;
  if (g->phase == CS_PHASE_PARK) {
    if (CS_LOAD(w->parked) == 1 && CS_LOAD(w->turn) == 0) {
      g->at_boundary = 1;
      stop_all(g, now_ns);
    } else if (now_ns > g->deadline_ns) {
      g->at_boundary = 0;
      cs_events_post(&s->events, "detach-forced", g->id, CS_LOAD(w->turn), 0, 0,
                     "chain did not reach a batch boundary within the detach timeout; stopped");
      stop_all(g, now_ns);
    }
    return;
  }
  uint32_t running = 0;
  for (uint32_t i = 0; i < g->n; i++) {
    char st = cs_task_state(&g->tasks[i]);
    running += st != 0 && st != 'T' && st != 't';
  }
  if (running && now_ns > g->deadline_ns) {
    for (uint32_t i = 0; i < g->n; i++) {
      if (cs_task_is_stopped(&g->tasks[i]) || !cs_task_state(&g->tasks[i])) continue;
      cs_task_demote(&g->tasks[i]);
      cs_events_post(&s->events, "stop-forced", g->id, i, g->tasks[i].tid, 0,
                     "thread did not stop within 1 s of SIGSTOP: demoted to SCHED_OTHER");
    }
    running = 0;
  }
  if (!running) finish_stop(s, g);
}

/* One pass over the sgroups of this core; returns how soon to look again:
 * fast while one is detaching, at the watchdog's tick while one runs here;
 * *recheck_ns, if not 0, is when the watchdog could next give a verdict. */
static enum cs_pace tick(struct cs_sched *s, struct cs_enforcer *e, uint64_t late_ns,
                         uint64_t *recheck_ns) {
  uint64_t now_ns = cs_mono_ns();
  int busy = 0;
  enum cs_pace pace = CS_PACE_IDLE;
  for (struct cs_group *g = s->groups; g; g = g->next) {
    if (g->op == CS_OP_ATTACH && !g->op_done && g->op_core == e->core) do_attach(s, e, g);
    if (g->core != e->core || cs_group_check_threads(s, g, now_ns)) continue;
    if (g->state == CS_ATTACHED || g->state == CS_DETACHING) pace = CS_PACE_WATCH;
    if (g->op == CS_OP_DETACH && !g->op_done && g->state == CS_ATTACHED) {
      start_detach(s, g, now_ns);
    }
    if (watched(g, e) && g->demoted_by_ns && !g->end_by_ns && now_ns >= g->demoted_by_ns)
      cut_off(s, g, g->demoted_pos, g->demoted_busy_us, now_ns);
    if (g->state == CS_DETACHING) {
      step_detaching(s, g, now_ns);
      busy |= g->state == CS_DETACHING;
    }
  }
  *recheck_ns = watchdog(s, e, now_ns, late_ns);
  /* A one-NF chain yields only while it shares its core (chain_sched.h). */
  uint32_t here = 0;
  for (struct cs_group *g = s->groups; g; g = g->next)
    here += g->core == e->core && (g->state == CS_ATTACHED || g->state == CS_DETACHING);
  for (struct cs_group *g = s->groups; g; g = g->next)
    if (g->core == e->core && (g->state == CS_ATTACHED || g->state == CS_DETACHING))
      CS_STORE(g->chain.w->core_shared, here > 1 ? 1u : 0u);
  return busy ? CS_PACE_FAST : pace;
}

static uint64_t pace_ns(enum cs_pace pace) {
  switch (pace) {
    case CS_PACE_FAST: return CS_FAST_TICK_NS;
    case CS_PACE_WATCH: return CS_TICK_NS;
    default: return CS_IDLE_TICK_NS;
  }
}

void *cs_enforcer_main(void *arg) {
  struct cs_enforcer *e = arg;
  struct cs_sched *s = e->s;
  uint64_t late_ns = 0; /* how long after its timer the enforcer woke (cs-watchdog.h) */
  pthread_mutex_lock(&s->mu);
  while (!s->stopping) {
    uint64_t t0 = cs_rdtsc(), recheck_ns;
    enum cs_pace pace = tick(s, e, late_ns, &recheck_ns);
    __atomic_store_n(&e->work_cycles, e->work_cycles + (cs_rdtsc() - t0), __ATOMIC_RELAXED);
    __atomic_store_n(&e->wakeups, e->wakeups + 1, __ATOMIC_RELAXED);
    uint64_t sleep_ns = pace_ns(pace);
    if (recheck_ns && recheck_ns < sleep_ns)
      sleep_ns = recheck_ns < CS_MIN_RECHECK_NS ? CS_MIN_RECHECK_NS : recheck_ns;
    uint64_t until_ns = cs_mono_ns() + sleep_ns; /* CLOCK_MONOTONIC, as the cv's clock */
    struct timespec until = {(time_t)(until_ns / 1000000000ull), (long)(until_ns % 1000000000ull)};
    int rc = pthread_cond_timedwait(&e->cv, &s->mu, &until);
    uint64_t woke_ns = cs_mono_ns();
    late_ns = rc == ETIMEDOUT && woke_ns > until_ns ? woke_ns - until_ns : 0;
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}
