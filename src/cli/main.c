/* main.c: dispatch for the stitch CLI. Exit 0 on success, 1 on a failed
 * operation, 2 on a usage error. */
#include "cli/cli.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} commands[] = {
    {"view", cmd_view,
     "view --to bf16|fp8|nvfp4 [--fp8-block N] [--prev PREV_VIEW] IN OUT"},
    {"delta", cmd_delta,
     "delta OLD NEW -o OUT [--stats] [--json] [--block-log2 N] [--level L] "
     "[--small | --fastest] [--threads N] [--format 1|2|3] [--listed]"},
    {"apply", cmd_apply, "apply OLD DELTA -o OUT"},
    {"inspect", cmd_inspect,
     "inspect FILE [--base BASE] [--json] | inspect --store DIR --pub PREFIX.pub VERSION "
     "[--json]"},
    {"digest", cmd_digest, "digest FILE [--tensors]"},
    {"keygen", cmd_keygen, "keygen --out PREFIX"},
    {"admit", cmd_admit,
     "admit --key PREFIX.key --node NODE.pub --out TICKET [--expires 30d] "
     "[--role node|seed]"},
    {"revoke", cmd_revoke, "revoke --key PREFIX.key --store DIR --node NODE.pub"},
    {"publish", cmd_publish,
     "publish --key PREFIX.key --store DIR CHECKPOINT [--json]\n"
     "                 [--chunk-kib N] [--max-chain N] [--anchor-ratio R]\n"
     "                 [--cumulative-every N] [--keep N] [--fastest]"},
    {"pull", cmd_pull,
     "pull --store DIR --pub PREFIX.pub --weights FILE [--threads N]"},
    {"verify", cmd_verify, "verify --store DIR --pub PREFIX.pub"},
    {"log", cmd_log, "log --store DIR --pub PREFIX.pub [--json]"},
    {"recover", cmd_recover, "recover --weights FILE"},
};

void cli_progress(void *arg, const char *what, uint64_t done,
                  uint64_t total) {
  int *last = arg;
  int pct = total ? (int)(100 * done / total) : 100;
  if (pct == *last)
    return;
  *last = pct;
  fprintf(stderr, "\r\033[Kstitch: %s %3d%%", what, pct);
  if (done == total)
    fputs("\r\033[K", stderr);
}

/* Messages quote names from the input, which may hold control characters:
 * escape them so the error stays one line. */
int cli_fail(int err, const stitch_diag *d) {
  const char *msg = d != NULL && d->msg[0] ? d->msg : stitch_strerror(err);
  fputs("stitch: error: ", stderr);
  for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
    if (*p < 0x20 || *p == 0x7f)
      fprintf(stderr, "\\x%02x", *p);
    else
      fputc(*p, stderr);
  }
  fputc('\n', stderr);
  return 1;
}

int cli_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("stitch: usage: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 2;
}

int cli_parse_u64(const char *s, const char *what, uint64_t max,
                  uint64_t *out) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (*s == 0 || *end != 0 || s[0] == '-' || v > max)
    return cli_usage_error("%s: '%s' is not a number up to %" PRIu64, what, s,
                           max);
  *out = v;
  return 0;
}

int cli_parse_args(int argc, char **argv, const char **pos, int max,
                      flag *flags, int nflags) {
  int n = 0;
  for (int i = 0; i < argc; i++) {
    if (argv[i][0] == '-' && argv[i][1] != 0) {
      int k;
      for (k = 0; k < nflags; k++)
        if (strcmp(argv[i], flags[k].name) == 0)
          break;
      if (k == nflags) {
        cli_usage_error("unknown option '%s'", argv[i]);
        return -1;
      }
      if (flags[k].takes_value) {
        if (i + 1 >= argc) {
          cli_usage_error("option '%s' needs a value", argv[i]);
          return -1;
        }
        flags[k].value = argv[++i];
      } else {
        flags[k].value = "1";
      }
    } else {
      if (n == max) {
        cli_usage_error("too many arguments");
        return -1;
      }
      pos[n++] = argv[i];
    }
  }
  return n;
}

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f) {
  fprintf(f, "usage: stitch COMMAND [ARGS]\n\ncommands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  stitch %s\n", commands[i].help);
  fprintf(f, "  stitch help [COMMAND]\n  stitch --version\n\n"
             "Exit status: 0 done, 1 failed, 2 a usage error. "
             "See README.md \"The CLI\".\n");
}

static int find_command(const char *name) {
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (strcmp(name, commands[i].name) == 0)
      return (int)i;
  return -1;
}

/* `stitch help [COMMAND]` and `stitch COMMAND --help`: to stdout, 0. */
static int help(const char *name) {
  int k = name != NULL ? find_command(name) : -1;
  if (name != NULL && k < 0)
    return cli_usage_error("unknown command '%s' (see stitch --help)", name);
  if (k < 0)
    usage(stdout);
  else
    printf("usage: stitch %s\n", commands[k].help);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("stitch %s\n", stitch_version());
    return 0;
  }
  if (strcmp(argv[1], "help") == 0) {
    if (argc > 3)
      return cli_usage_error("help takes one command at most");
    return help(argc == 3 ? argv[2] : NULL);
  }
  int k = find_command(argv[1]);
  if (k >= 0) {
    for (int i = 2; i < argc; i++)
      if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
        return help(argv[1]);
    return commands[k].fn(argc - 2, argv + 2);
  }
  return cli_usage_error("unknown command '%s' (see stitch --help)", argv[1]);
}
