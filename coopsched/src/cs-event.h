/* SPDX-License-Identifier: Apache-2.0 */
/* Watchdog and scheduling events: a bounded log that RPCs read and wait on.
 * Posting one never blocks on I/O: the enforcers post at the highest FIFO
 * priority under the scheduler's lock, and a logger thread under CFS writes
 * the events to stderr. */
#ifndef KEEL_CS_EVENT_H_
#define KEEL_CS_EVENT_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CS_EVENT_RING 256
#define CS_GROUP_ID_MAX 64

struct cs_event {
  uint64_t seq; /* 1, 2, ... */
  uint64_t unix_ns;
  char kind[16]; /* demoted, cut-off, detach-forced, stop-forced, thread-exited, finished, refused */
  char group[CS_GROUP_ID_MAX];
  uint32_t position;
  pid_t tid;
  uint64_t busy_us;
  char message[160];
};

struct cs_events {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t last_seq;
  struct cs_event ring[CS_EVENT_RING];
};

/* The thread that copies events to stderr. */
struct cs_events_logger {
  struct cs_events *ev;
  pthread_t thread;
  int started;
  int stop;
};

/* Initialises an empty log. */
void cs_events_init(struct cs_events *ev);

/* Destroys the log's lock and condition. */
void cs_events_destroy(struct cs_events *ev);

/* Appends an event (seq and time are filled in) and wakes waiters; no I/O. */
void cs_events_post(struct cs_events *ev, const char *kind, const char *group, uint32_t position,
                    pid_t tid, uint64_t busy_us, const char *message);

/* Copies up to max events with seq > since, oldest first, waiting up to
 * wait_ms for one if there is none; returns how many were copied. */
size_t cs_events_read(struct cs_events *ev, uint64_t since, struct cs_event *out, size_t max,
                      unsigned wait_ms);

/* Returns the seq of the newest event, 0 if there is none. */
uint64_t cs_events_last(struct cs_events *ev);

/* Wakes every reader waiting in cs_events_read. */
void cs_events_wake(struct cs_events *ev);

/* Starts a thread (under the caller's policy and affinity) that writes each
 * event of ev to stderr, one line each; 0 or an errno. */
int cs_events_logger_start(struct cs_events_logger *lg, struct cs_events *ev);

/* Stops the logger: it looks at the stop request at least every 200 ms, also
 * while stderr is full (nobody reads it) and its lines wait. */
void cs_events_logger_stop(struct cs_events_logger *lg);

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_EVENT_H_
