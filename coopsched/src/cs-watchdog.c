/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-watchdog.h"

/* Returns the index of the thread with key, or n. */
static size_t find(struct cs_wd_thread *const *th, size_t n, uint64_t key) {
  for (size_t i = 0; i < n; i++)
    if (th[i]->key == key) return i;
  return n;
}

/* Opens a window if threads other than the one that ran most since the
 * last look are on the run queue. */
static void open_window(struct cs_wd_window *w, struct cs_wd_thread *const *th,
                        const struct cs_wd_now *now, size_t n, uint64_t now_ns,
                        const struct cs_wd_ops *ops, void *ctx) {
  size_t hog = n;
  uint64_t most = 0;
  for (size_t i = 0; i < n; i++) {
    if (!now[i].alive || !th[i]->known) continue;
    uint64_t ran = now[i].cpu_ns - th[i]->cpu_ns;
    if (hog == n || ran > most) {
      hog = i;
      most = ran;
    }
  }
  w->nwaiters = 0;
  for (size_t i = 0; i < n && w->nwaiters < CS_WD_WAITERS; i++) {
    if (i == hog || !now[i].alive || !ops->runnable(ctx, i)) continue;
    w->waiter_key[w->nwaiters] = th[i]->key;
    w->waiter_pcount[w->nwaiters] = now[i].pcount;
    w->nwaiters++;
  }
  if (!w->nwaiters) return;
  w->id++;
  w->open = 1;
  w->since_ns = now_ns;
  w->stall_ns = 0;
  for (size_t j = 0; j < n; j++) {
    th[j]->win_id = w->id;
    th[j]->win_cpu_ns = now[j].cpu_ns;
  }
}

/* Drops the waiters of w that were switched in or stopped waiting at the
 * run priority; sets waiting[i] for those that still wait. */
static void check_waiters(struct cs_wd_window *w, struct cs_wd_thread *const *th,
                          const struct cs_wd_now *now, size_t n, const struct cs_wd_ops *ops,
                          void *ctx, unsigned char *waiting) {
  size_t kept = 0;
  for (size_t k = 0; k < w->nwaiters; k++) {
    size_t i = find(th, n, w->waiter_key[k]);
    if (i == n || !now[i].alive || now[i].pcount != w->waiter_pcount[k] || !ops->waiting(ctx, i))
      continue;
    waiting[i] = 1;
    w->waiter_key[kept] = w->waiter_key[k];
    w->waiter_pcount[kept] = w->waiter_pcount[k];
    kept++;
  }
  w->nwaiters = kept;
  w->open = kept > 0;
}

int cs_wd_look(struct cs_wd_window *w, struct cs_wd_thread *const *th, const struct cs_wd_now *now,
               size_t n, uint64_t now_ns, uint64_t late_ns, uint64_t timeout_ns,
               const struct cs_wd_ops *ops, void *ctx, struct cs_wd_verdict *v,
               uint64_t *recheck_ns) {
  int verdict = 0;
  *recheck_ns = 0;
  if (w->open) {
    /* The stall before this look fell inside the window: credit it. */
    w->stall_ns = late_ns >= timeout_ns - w->stall_ns ? timeout_ns : w->stall_ns + late_ns;
    uint64_t limit = timeout_ns + w->stall_ns;
    unsigned char waiting[CS_WD_MAX_THREADS] = {0};
    check_waiters(w, th, now, n, ops, ctx, waiting);
    size_t best = n;
    uint64_t best_held = 0;
    for (size_t j = 0; w->open && j < n; j++) {
      if (waiting[j] || !now[j].alive) continue;
      if (th[j]->win_id != w->id) { /* came onto the core while the window was open */
        th[j]->win_id = w->id;
        th[j]->win_cpu_ns = now[j].cpu_ns;
      }
      uint64_t held = now[j].cpu_ns - th[j]->win_cpu_ns;
      if (best == n || held > best_held) {
        best = j;
        best_held = held;
      }
    }
    if (best < n && best_held >= limit && !ops->exiting(ctx, best)) {
      v->holder = best;
      v->waiter = find(th, n, w->waiter_key[0]);
      v->held_ns = best_held;
      verdict = 1;
      w->open = 0;
    } else if (best < n && best_held < limit) {
      *recheck_ns = limit - best_held;
    }
  }
  if (!w->open && !verdict && n >= 2) open_window(w, th, now, n, now_ns, ops, ctx);
  for (size_t i = 0; i < n; i++) {
    if (!now[i].alive) continue;
    th[i]->known = 1;
    th[i]->cpu_ns = now[i].cpu_ns;
  }
  return verdict;
}
