/* SPDX-License-Identifier: Apache-2.0 */
/* Errors of the scheduling core: a class the service maps to a gRPC status,
 * and a message for the operator. */
#ifndef KEEL_CS_ERROR_H_
#define KEEL_CS_ERROR_H_

#ifdef __cplusplus
extern "C" {
#endif

enum cs_errclass {
  CS_OK = 0,
  CS_EINVAL,    /* a bad argument: core not managed, bad pktbuf file, ... */
  CS_ENOENT,    /* no such sgroup or thread */
  CS_EEXIST,    /* the sgroup or a thread is already registered */
  CS_ESTATE,    /* the sgroup is not in a state that allows the request */
  CS_ETIMEDOUT, /* a thread did not stop in time */
  CS_EINTERNAL, /* a system call failed unexpectedly */
};

struct cs_error {
  enum cs_errclass cls;
  char msg[1024];
};

/* Sets *err to class cls and a printf-formatted message; returns cls. */
enum cs_errclass cs_error_set(struct cs_error *err, enum cs_errclass cls,
                              const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif  // KEEL_CS_ERROR_H_
