/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-event.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void cs_events_init(struct cs_events *ev) {
  memset(ev, 0, sizeof *ev);
  /* Priority inheritance: an RPC thread under CFS that holds the log while
   * an enforcer wants to post runs at the enforcer's priority meanwhile. */
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setprotocol(&ma, PTHREAD_PRIO_INHERIT);
  pthread_mutex_init(&ev->mu, &ma);
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&ev->cv, &ca);
  pthread_condattr_destroy(&ca);
}

void cs_events_destroy(struct cs_events *ev) {
  pthread_cond_destroy(&ev->cv);
  pthread_mutex_destroy(&ev->mu);
}

void cs_events_post(struct cs_events *ev, const char *kind, const char *group, uint32_t position,
                    pid_t tid, uint64_t busy_us, const char *message) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  pthread_mutex_lock(&ev->mu);
  struct cs_event *e = &ev->ring[ev->last_seq % CS_EVENT_RING];
  memset(e, 0, sizeof *e);
  e->seq = ++ev->last_seq;
  e->unix_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
  snprintf(e->kind, sizeof e->kind, "%s", kind);
  snprintf(e->group, sizeof e->group, "%s", group);
  e->position = position;
  e->tid = tid;
  e->busy_us = busy_us;
  snprintf(e->message, sizeof e->message, "%s", message);
  pthread_cond_broadcast(&ev->cv);
  pthread_mutex_unlock(&ev->mu);
}

size_t cs_events_read(struct cs_events *ev, uint64_t since, struct cs_event *out, size_t max,
                      unsigned wait_ms) {
  pthread_mutex_lock(&ev->mu);
  if (ev->last_seq <= since && wait_ms) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&ev->cv, &ev->mu, &until);
  }
  uint64_t first = since + 1;
  if (ev->last_seq >= CS_EVENT_RING && first <= ev->last_seq - CS_EVENT_RING)
    first = ev->last_seq - CS_EVENT_RING + 1;
  size_t n = 0;
  for (uint64_t s = first; s <= ev->last_seq && n < max; s++)
    out[n++] = ev->ring[(s - 1) % CS_EVENT_RING];
  pthread_mutex_unlock(&ev->mu);
  return n;
}

void cs_events_wake(struct cs_events *ev) {
  pthread_mutex_lock(&ev->mu);
  pthread_cond_broadcast(&ev->cv);
  pthread_mutex_unlock(&ev->mu);
}

uint64_t cs_events_last(struct cs_events *ev) {
  pthread_mutex_lock(&ev->mu);
  uint64_t seq = ev->last_seq;
  pthread_mutex_unlock(&ev->mu);
  return seq;
}

/* Writes line to stderr without blocking while stop is not set: waits in
 * slices of 200 ms for room (a pipe says POLLOUT when a line of up to
 * PIPE_BUF bytes fits whole). Returns 0 if it gave up because of stop. */
static int write_stderr(struct cs_events_logger *lg, const char *line, size_t len) {
  struct pollfd p = {.fd = STDERR_FILENO, .events = POLLOUT};
  while (!__atomic_load_n(&lg->stop, __ATOMIC_ACQUIRE)) {
    int rc = poll(&p, 1, 200);
    if (rc < 0 && errno != EINTR) return 1;
    if (rc == 0) continue;
    if (p.revents & (POLLERR | POLLNVAL)) return 1;
    ssize_t n = write(STDERR_FILENO, line, len);
    if (n >= 0 || (errno != EAGAIN && errno != EINTR)) return 1;
  }
  return 0;
}

static void *logger_main(void *arg) {
  struct cs_events_logger *lg = arg;
  struct cs_event *evs = calloc(16, sizeof *evs);
  if (!evs) return NULL;
  uint64_t since = cs_events_last(lg->ev);
  while (!__atomic_load_n(&lg->stop, __ATOMIC_ACQUIRE)) {
    size_t n = cs_events_read(lg->ev, since, evs, 16, 500);
    for (size_t i = 0; i < n; i++) {
      char line[CS_GROUP_ID_MAX + 320];
      int len;
      if (evs[i].seq > since + 1)
        len = snprintf(line, sizeof line, "keel-coopsched: %" PRIu64 " events not logged (the log was full)\n",
                       evs[i].seq - since - 1);
      else
        len = 0;
      if (len > 0 && !write_stderr(lg, line, (size_t)len)) goto out;
      len = snprintf(line, sizeof line, "keel-coopsched: event %s group=%s position=%u tid=%d: %s\n",
                     evs[i].kind, evs[i].group, evs[i].position, (int)evs[i].tid, evs[i].message);
      if (len > (int)sizeof line - 1) len = (int)sizeof line - 1;
      if (!write_stderr(lg, line, (size_t)len)) goto out;
      since = evs[i].seq;
    }
  }
out:
  free(evs);
  return NULL;
}

int cs_events_logger_start(struct cs_events_logger *lg, struct cs_events *ev) {
  memset(lg, 0, sizeof *lg);
  lg->ev = ev;
  int rc = pthread_create(&lg->thread, NULL, logger_main, lg);
  if (rc == 0) lg->started = 1;
  return rc;
}

void cs_events_logger_stop(struct cs_events_logger *lg) {
  if (!lg->started) return;
  __atomic_store_n(&lg->stop, 1, __ATOMIC_RELEASE);
  cs_events_wake(lg->ev);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 1;
  if (pthread_timedjoin_np(lg->thread, NULL, &until) != 0) pthread_detach(lg->thread);
  lg->started = 0;
}
