/* options.c: stitchd's options (options.h). Every option has one name,
 * used as the flag (--name) and as the config file's key. */
#define _GNU_SOURCE
#include "options.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_LINE_MAX 4096

#define N ROLE_NODE
#define S ROLE_SEED
/* In the order of the O_ enum. */
static const opt opt_spec[O_COUNT] = {
    {"swarm", N, NULL},         {"key", S, NULL},
    {"listen", N | S, NULL},    {"advertise", N | S, NULL},
    {"peers", N | S, NULL},     {"weights", N, NULL},
    {"region", N | S, NULL},    {"data", N, NULL},
    {"store", S, NULL},         {"status", N | S, NULL},
    {"max-peers", N | S, NULL}, {"threads", N, NULL},
    {"config", N | S, NULL},    {"http", N, NULL},
    {"engine", N, NULL},        {"engine-reload", N, NULL},
    {"apply", N, NULL},         {"ticket", N, NULL},
    {"open", S, NULL},          {"http-head-ms", N, NULL},
    {"engine-prepare", N, NULL}, {"up-mbit", N, NULL},
    {"log-chunks", N | S, NULL}};
#undef N
#undef S

const char opt_usage[] =
    "usage: " PROG " node --swarm PREFIX.pub --listen ADDR --weights FILE\n"
    "                    --data DIR [--ticket FILE] [--peers ADDR,...]\n"
    "                    [--region R]\n"
    "                    [--status FILE] [--max-peers N] [--threads N]\n"
    "                    [--up-mbit N] [--advertise ADDR] [--config FILE]\n"
    "                    [--log-chunks]\n"
    "                    [--http ADDR [--engine http://HOST:PORT]\n"
    "                     [--engine-reload PATH [--engine-prepare PATH]]\n"
    "                     [--apply manual|auto]\n"
    "                     [--http-head-ms MS]]\n"
    "       " PROG " seed --key PREFIX.key --listen ADDR --store DIR\n"
    "                    [--peers ADDR,...] [--region R] [--status FILE]\n"
    "                    [--max-peers N] [--advertise ADDR] [--config FILE]\n"
    "                    [--open] [--log-chunks]\n"
    "A node shows the ticket `stitch admit` made for its key (DIR/node.pub);\n"
    "a seed started with --open admits nodes without one (docs/security.md).\n"
    "ADDR is host:port (port 0 picks one); a peer may carry its region as\n"
    "host:port@region. A config file holds one 'key value' per line, the\n"
    "keys being the flags' names. See docs/stitchd.md.\n";

int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs(PROG ": error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

int fail_diag(int rc, const stitch_diag *d) {
  return fail("%s", d->msg[0] ? d->msg : stitch_strerror(rc));
}

/* The index of option NAME for ROLE, or -1 after saying why not. */
static int opt_index(const opt *o, unsigned role, const char *name,
                     int from_config, const char *where) {
  for (int k = 0; k < O_COUNT; k++) {
    if (strcmp(o[k].name, name) != 0)
      continue;
    if (!(o[k].roles & role)) {
      fail("%s'%s%s' is not an option of stitchd %s", where,
           from_config ? "" : "--", name, role == ROLE_NODE ? "node" : "seed");
      return -1;
    }
    return k;
  }
  fail("%sunknown option '%s%s' (see " PROG " --help)", where,
       from_config ? "" : "--", name);
  return -1;
}

static int set_opt(opt *o, unsigned role, const char *name, const char *value,
                   int from_config, const char *where) {
  int k = opt_index(o, role, name, from_config, where);
  if (k < 0)
    return 1;
  if (from_config && (k == O_CONFIG || o[k].value != NULL))
    return 0; /* the command line wins; no nested config files */
  for (const unsigned char *c = (const unsigned char *)value; c && *c; c++)
    if (*c < 0x20 || *c == 0x7f) /* a region or address would forge logs */
      return fail("%s%s%s: holds the control byte 0x%02x", where,
                  from_config ? "" : "--", name, (unsigned)*c);
  o[k].value = value;
  return 0;
}

/* Does some option's value point at P? */
static int opt_holds(const opt *o, const char *p) {
  for (int k = 0; k < O_COUNT; k++)
    if (o[k].value == p)
      return 1;
  return 0;
}

/* Reads `key value` lines ('#' starts a comment). The values are kept for
 * the life of the process. */
static int load_config(opt *o, unsigned role, const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return fail("%s: %s", path, strerror(errno));
  char line[CONFIG_LINE_MAX];
  int rc = 0, no = 0;
  while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
    no++;
    char where[256];
    snprintf(where, sizeof(where), "%.200s:%d: ", path, no);
    size_t len = strlen(line);
    if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
      rc = fail("%sline too long", where);
      break;
    }
    char *hash = strchr(line, '#');
    if (hash != NULL)
      *hash = 0;
    char *key = line + strspn(line, " \t\r\n");
    if (*key == 0)
      continue;
    char *end = key + strcspn(key, " \t\r\n");
    char *val = end;
    if (*end == ' ' || *end == '\t') {
      *end = 0;
      val = end + 1 + strspn(end + 1, " \t");
    }
    size_t vl = strcspn(val, "\r\n");
    while (vl > 0 && (val[vl - 1] == ' ' || val[vl - 1] == '\t'))
      vl--;
    val[vl] = 0;
    *end = 0;
    if (*val == 0) {
      rc = fail("%s'%s' needs a value", where, key);
      break;
    }
    char *kept = strdup(val);
    if (kept == NULL) {
      rc = fail("out of memory");
      break;
    }
    rc = set_opt(o, role, key, kept, 1, where);
    if (!opt_holds(o, kept))
      free(kept); /* refused, or the command line gave it */
  }
  fclose(f);
  return rc;
}

int opt_parse(int argc, char **argv, unsigned role, opt *o) {
  memcpy(o, opt_spec, sizeof(opt_spec));
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0)
      return fail("unexpected argument '%s' (see " PROG " --help)", a);
    const char *eq = strchr(a, '=');
    char name[64];
    size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    if (nl == 0 || nl >= sizeof(name))
      return fail("unknown option '%.40s'", a);
    memcpy(name, a + 2, nl);
    name[nl] = 0;
    if (opt_index(o, role, name, 0, "") < 0) /* before "needs a value" */
      return 1;
    /* --open and --log-chunks alone are switches (=no: off). */
    int sw = (strcmp(name, "open") == 0 || strcmp(name, "log-chunks") == 0) &&
             eq == NULL;
    const char *val = sw   ? "yes"
                      : eq ? eq + 1
                           : (i + 1 < argc ? argv[++i] : NULL);
    if (val == NULL || *val == 0)
      return fail("--%s needs a value", name);
    if (set_opt(o, role, name, val, 0, "") != 0)
      return 1;
  }
  if (o[O_CONFIG].value != NULL && load_config(o, role, o[O_CONFIG].value))
    return 1;
  static const int need_node[] = {O_SWARM, O_LISTEN, O_WEIGHTS, O_DATA};
  static const int need_seed[] = {O_KEY, O_LISTEN, O_STORE};
  const int *need = role == ROLE_NODE ? need_node : need_seed;
  size_t n_need = role == ROLE_NODE ? 4 : 3;
  for (size_t k = 0; k < n_need; k++)
    if (o[need[k]].value == NULL)
      return fail("stitchd %s needs --%s (see " PROG " --help)",
                  role == ROLE_NODE ? "node" : "seed", o[need[k]].name);
  return 0;
}

int opt_uint(const char *s, const char *what, unsigned lo, unsigned hi,
             unsigned *out) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (*s == 0 || *end != 0 || s[0] == '-' || errno != 0 || v < lo || v > hi)
    return fail("--%s: '%s' is not a number in [%u, %u]", what, s, lo, hi);
  *out = (unsigned)v;
  return 0;
}

int opt_bool(const char *s, const char *what, int *out) {
  *out = 0;
  if (s == NULL || !strcmp(s, "no") || !strcmp(s, "false") || !strcmp(s, "0"))
    return 0;
  if (!strcmp(s, "yes") || !strcmp(s, "true") || !strcmp(s, "1")) {
    *out = 1;
    return 0;
  }
  return fail("--%s: '%s' is not yes or no", what, s);
}
