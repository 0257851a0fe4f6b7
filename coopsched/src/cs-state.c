/* SPDX-License-Identifier: Apache-2.0 */
#include "cs-state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CS_STATE_MAGIC "keel-coopsched-state 1"

static void hex_put(FILE *f, const char *s) {
  if (!*s) fputc('-', f); /* never written: ids and paths are not empty */
  for (; *s; s++) fprintf(f, "%02x", (unsigned char)*s);
}

/* Decodes hex text of length len into out (size bytes with the NUL); 0 if it is not hex
 * or too long. */
static int hex_get(const char *text, size_t len, char *out, size_t size) {
  if (len == 0 || len % 2 || len / 2 >= size) return 0;
  for (size_t i = 0; i < len; i += 2) {
    unsigned v;
    char pair[3] = {text[i], text[i + 1], 0};
    char *end;
    v = (unsigned)strtoul(pair, &end, 16);
    if (*end || v == 0) return 0;
    out[i / 2] = (char)v;
  }
  out[len / 2] = '\0';
  return 1;
}

enum cs_errclass cs_state_write(const char *file, const struct cs_state_entry *e, size_t n,
                                struct cs_error *err) {
  char tmp[CS_PATH_MAX + 8];
  if (snprintf(tmp, sizeof tmp, "%s.new", file) >= (int)sizeof tmp)
    return cs_error_set(err, CS_EINVAL, "state file path too long: %s", file);
  FILE *f = fopen(tmp, "we");
  if (!f) return cs_error_set(err, CS_EINTERNAL, "%s: %s", tmp, strerror(errno));
  fprintf(f, "%s\n", CS_STATE_MAGIC);
  for (size_t i = 0; i < n; i++) {
    fputs("g ", f);
    hex_put(f, e[i].id);
    fputc(' ', f);
    hex_put(f, e[i].path);
    fprintf(f, " %d", e[i].core);
    for (uint32_t k = 0; k < e[i].n; k++)
      fprintf(f, " %d/%llu", (int)e[i].tids[k], (unsigned long long)e[i].starts[k]);
    fputc('\n', f);
  }
  int bad = fflush(f) != 0 || ferror(f);
  int saved = errno;
  if (fclose(f) != 0 && !bad) {
    bad = 1;
    saved = errno;
  }
  if (bad || rename(tmp, file) != 0) {
    if (!bad) saved = errno;
    unlink(tmp);
    return cs_error_set(err, CS_EINTERNAL, "cannot write %s: %s", file, strerror(saved));
  }
  return CS_OK;
}

/* Parses one "g ..." line into e; 0 if it is malformed. */
static int parse_line(char *line, struct cs_state_entry *e) {
  memset(e, 0, sizeof *e);
  char *save = NULL, *tok = strtok_r(line, " \n", &save);
  if (!tok || strcmp(tok, "g") != 0) return 0;
  tok = strtok_r(NULL, " \n", &save);
  if (!tok || !hex_get(tok, strlen(tok), e->id, sizeof e->id)) return 0;
  tok = strtok_r(NULL, " \n", &save);
  if (!tok || !hex_get(tok, strlen(tok), e->path, sizeof e->path)) return 0;
  tok = strtok_r(NULL, " \n", &save);
  char *end;
  if (!tok) return 0;
  long core = strtol(tok, &end, 10);
  if (*end || core < -1 || core >= CPU_SETSIZE) return 0;
  e->core = (int)core;
  while ((tok = strtok_r(NULL, " \n", &save))) {
    if (e->n == KEEL_SCHED_MAX_NFS) return 0;
    long tid = strtol(tok, &end, 10);
    if (*end != '/' || tid <= 0) return 0;
    unsigned long long start = strtoull(end + 1, &end, 10);
    if (*end || start == 0) return 0;
    e->tids[e->n] = (pid_t)tid;
    e->starts[e->n] = start;
    e->n++;
  }
  return e->n > 0;
}

enum cs_errclass cs_state_read(const char *file, struct cs_state_entry **out, size_t *n,
                               struct cs_error *err) {
  *out = NULL;
  *n = 0;
  FILE *f = fopen(file, "re");
  if (!f) {
    if (errno == ENOENT) return CS_OK;
    return cs_error_set(err, CS_EINTERNAL, "%s: %s", file, strerror(errno));
  }
  char *line = NULL;
  size_t cap = 0, used = 0, size = 0;
  struct cs_state_entry *v = NULL;
  enum cs_errclass cls = CS_OK;
  for (unsigned no = 1; getline(&line, &cap, f) >= 0; no++) {
    if (no == 1) {
      if (strcmp(line, CS_STATE_MAGIC "\n") != 0) {
        cls = cs_error_set(err, CS_EINVAL, "%s: not a keel-coopsched state file (want \"%s\")",
                           file, CS_STATE_MAGIC);
        break;
      }
      continue;
    }
    if (used == size) {
      size = size ? 2 * size : 8;
      struct cs_state_entry *grown = realloc(v, size * sizeof *v);
      if (!grown) {
        cls = cs_error_set(err, CS_EINTERNAL, "out of memory");
        break;
      }
      v = grown;
    }
    if (!parse_line(line, &v[used])) {
      cls = cs_error_set(err, CS_EINVAL, "%s:%u: malformed sgroup line", file, no);
      break;
    }
    used++;
  }
  free(line);
  fclose(f);
  if (cls) {
    free(v);
    return cls;
  }
  *out = v;
  *n = used;
  return CS_OK;
}
