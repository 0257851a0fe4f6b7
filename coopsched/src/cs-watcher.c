/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The exit watcher: one thread of the master's (off the managed cores, under
 * CFS) that sleeps in poll(2) on the pidfds of the threads of every sgroup
 * in service and checks an sgroup (cs_group_check_threads) the moment one
 * says its thread, or the process of a thread that is gone, has exited. A
 * detached sgroup's threads are stopped and no enforcer ticks for them; the
 * watcher notices their end within the time a wake-up takes. Kernels
 * without thread pidfds (before 6.9) give only process pidfds, so with such
 * a thread among the watched the watcher also looks every 20 ms.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cs-sched-private.h"
#include "cs-tsc.h"

/* Threads watched by poll; any beyond are looked at every 20 ms. */
#define CS_WATCH_MAX 4096
#define CS_WATCH_FALLBACK_MS 20

void cs_watcher_wake(struct cs_sched *s) {
  uint64_t one = 1;
  if (s->watch_fd >= 0 && write(s->watch_fd, &one, sizeof one) < 0) {
    /* EAGAIN: the counter is full, a wake-up is pending anyway */
  }
}

static int in_service(const struct cs_group *g) {
  return g->state != CS_FAILED && g->state != CS_FINISHED && g->state != CS_CUT_OFF;
}

/* Fills fds[1..] and who[] with what to watch (s->mu held): the pidfd of
 * each live thread, the process pidfd of each thread that is gone without
 * a known exit status. Returns how many; sets *fallback if a thread has no
 * pidfd of its own or there are too many. */
static size_t watch_set(struct cs_sched *s, struct pollfd *fds, uint64_t *who, int *fallback) {
  size_t n = 0;
  *fallback = 0;
  for (struct cs_group *g = s->groups; g; g = g->next) {
    if (!in_service(g)) continue;
    for (uint32_t i = 0; i < g->n; i++) {
      const struct cs_task *t = &g->tasks[i];
      int fd;
      if (!g->gone[i]) {
        fd = t->pidfd >= 0 ? t->pidfd : t->proc_pidfd;
        *fallback |= t->pidfd < 0;
      } else if (!g->status_known[i]) {
        fd = t->proc_pidfd;
      } else {
        continue;
      }
      if (fd < 0 || n + 1 >= CS_WATCH_MAX) {
        *fallback = 1;
        continue;
      }
      fds[n + 1] = (struct pollfd){.fd = fd, .events = POLLIN};
      who[n + 1] = g->serial;
      n++;
    }
  }
  return n;
}

static struct cs_group *by_serial(struct cs_sched *s, uint64_t serial) {
  for (struct cs_group *g = s->groups; g; g = g->next)
    if (g->serial == serial) return g;
  return NULL;
}

void *cs_watcher_main(void *arg) {
  struct cs_sched *s = arg;
  struct pollfd *fds = calloc(CS_WATCH_MAX, sizeof *fds);
  uint64_t *who = calloc(CS_WATCH_MAX, sizeof *who);
  if (!fds || !who) abort();
  pthread_mutex_lock(&s->mu);
  while (!s->stopping) {
    int fallback;
    size_t n = watch_set(s, fds, who, &fallback);
    pthread_mutex_unlock(&s->mu);
    fds[0] = (struct pollfd){.fd = s->watch_fd, .events = POLLIN};
    int rc = poll(fds, n + 1, fallback ? CS_WATCH_FALLBACK_MS : -1);
    if (rc > 0 && (fds[0].revents & POLLIN)) {
      uint64_t v;
      if (read(s->watch_fd, &v, sizeof v) < 0) { /* EAGAIN: another wake-up took it */
      }
    }
    pthread_mutex_lock(&s->mu);
    /* An sgroup may have gone meanwhile: it is found again by its serial. */
    uint64_t now_ns = cs_mono_ns();
    for (size_t i = 1; i <= n; i++) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      struct cs_group *g = by_serial(s, who[i]);
      if (g && in_service(g)) cs_group_check_threads(s, g, now_ns);
    }
    if (fallback && rc == 0)
      for (struct cs_group *g = s->groups; g; g = g->next)
        if (in_service(g)) cs_group_check_threads(s, g, now_ns);
  }
  pthread_mutex_unlock(&s->mu);
  free(fds);
  free(who);
  return NULL;
}
