/* cli.h: the stitch command-line tool. One file per command group; each
 * command takes argc/argv after its own name and returns the exit status. */
#ifndef STITCH_CLI_H
#define STITCH_CLI_H

#include "stitch.h"

int cmd_view(int argc, char **argv);
int cmd_delta(int argc, char **argv);
int cmd_apply(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_digest(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_publish(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_log(int argc, char **argv);
int cmd_recover(int argc, char **argv);
int cmd_admit(int argc, char **argv);
int cmd_revoke(int argc, char **argv);
/* stitch inspect --store DIR --pub PUB VERSION (cmd_version.c). */
int cli_inspect_version(const char *dir, const char *pub, const char *ver,
                        int as_json);

/* Splits argv into up to max positionals and the flags in spec. Returns the
 * number of positionals, or -1 after printing a usage error. */
typedef struct flag {
  const char *name;
  int takes_value;
  const char *value; /* "1" when given without a value */
} flag;
int cli_parse_args(int argc, char **argv, const char **pos, int max,
                   flag *flags, int nflags);

/* A flag's value as a decimal number up to MAX into *OUT; else prints a
 * usage error naming WHAT and returns nonzero. */
int cli_parse_u64(const char *s, const char *what, uint64_t max,
                  uint64_t *out);

/* Prints "stitch: error: MSG" and returns 1 (the exit status for errors). */
int cli_fail(int err, const stitch_diag *d);
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A progress line on a terminal, "stitch: WHAT  NN%", redrawn when the
 * percentage moves and cleared at 100%; ARG is an int holding -1 at first.
 * For the library's progress callbacks. */
void cli_progress(void *arg, const char *what, uint64_t done, uint64_t total);

#endif
