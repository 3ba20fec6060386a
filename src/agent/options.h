/* options.h: stitchd's options, from flags or a config file
 * (docs/stitchd.md), and its one-line errors. */
#ifndef STITCHD_OPTIONS_H
#define STITCHD_OPTIONS_H

#include "stitch/error.h"

#define PROG "stitchd"
#define ROLE_NODE 1u
#define ROLE_SEED 2u

enum {
  O_SWARM, O_KEY, O_LISTEN, O_ADVERTISE, O_PEERS, O_WEIGHTS, O_REGION,
  O_DATA, O_STORE, O_STATUS, O_MAX_PEERS, O_THREADS, O_CONFIG,
  O_HTTP, O_ENGINE, O_ENGINE_RELOAD, O_APPLY, O_TICKET, O_OPEN,
  O_HTTP_HEAD_MS, O_ENGINE_PREPARE, O_UP_MBIT, O_LOG_CHUNKS, O_COUNT
};

typedef struct opt {
  const char *name; /* the flag without "--", and the config file's key */
  unsigned roles;   /* ROLE_NODE | ROLE_SEED */
  const char *value; /* NULL: not given */
} opt;

extern const char opt_usage[];

/* Fills O[O_COUNT] from argv[2..] (argv[1] is the role) and --config FILE;
 * the command line wins over the file. Checks that the role's required
 * options are there. Nonzero after printing one line. */
int opt_parse(int argc, char **argv, unsigned role, opt *o);
/* A decimal in [lo, hi] for --WHAT; nonzero after printing one line. */
int opt_uint(const char *s, const char *what, unsigned lo, unsigned hi,
             unsigned *out);
/* yes/true/1 or no/false/0 for --WHAT (NULL, not given: 0); nonzero after
 * printing one line. */
int opt_bool(const char *s, const char *what, int *out);

/* "stitchd: error: ..." on stderr; returns 1, the exit status. */
int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int fail_diag(int rc, const stitch_diag *d);

#endif
