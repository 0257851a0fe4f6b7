/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-error.h"

#include <stdarg.h>
#include <stdio.h>

enum cs_errclass cs_error_set(struct cs_error *err, enum cs_errclass cls,
                              const char *fmt, ...) {
  err->cls = cls;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return cls;
}
