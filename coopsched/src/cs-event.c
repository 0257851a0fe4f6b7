/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-event.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

void cs_events_init(struct cs_events *ev) {
  memset(ev, 0, sizeof *ev);
  pthread_mutex_init(&ev->mu, NULL);
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
  fprintf(stderr, "keel-coopsched: event %s group=%s position=%u tid=%d: %s\n", kind, group,
          position, (int)tid, message);
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
