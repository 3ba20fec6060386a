/* cmd_view.c: stitch view --to bf16|fp8|nvfp4 [--fp8-block N] [--prev PREV]
 *             IN OUT
 *
 * Builds the served view of master checkpoint IN into OUT (atomically).
 * With --prev, the previous step's view, its scales are kept where they
 * still fit, so the next delta stays small. Prints one summary line to
 * stdout. */
#include "cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VIEW_USAGE                                                             \
  "stitch view --to bf16|fp8|nvfp4 [--fp8-block N] [--prev PREV_VIEW] IN OUT"

/* Matches "--opt VALUE" and "--opt=VALUE"; advances *i past the value. */
static int opt_value(const char *opt, int argc, char **argv, int *i,
                     const char **val) {
  size_t n = strlen(opt);
  const char *a = argv[*i];
  if (strncmp(a, opt, n) != 0)
    return 0;
  if (a[n] == '=') {
    *val = a + n + 1;
    return 1;
  }
  if (a[n] != '\0')
    return 0;
  *val = *i + 1 < argc ? argv[++*i] : NULL;
  return 1;
}

static int parse_u32(const char *s, uint32_t *out) {
  if (s == NULL || *s < '0' || *s > '9')
    return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || v > UINT32_MAX)
    return -1;
  *out = (uint32_t)v;
  return 0;
}

int cmd_view(int argc, char **argv) {
  const char *to = NULL, *prev_path = NULL, *blk = NULL, *pos[2];
  int npos = 0;
  for (int i = 0; i < argc; i++) {
    const char *v;
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf("usage: %s\n", VIEW_USAGE);
      return 0;
    } else if (opt_value("--to", argc, argv, &i, &v)) {
      if (v == NULL)
        return cli_usage_error("view: --to needs a value; %s", VIEW_USAGE);
      to = v;
    } else if (opt_value("--prev", argc, argv, &i, &v)) {
      if (v == NULL)
        return cli_usage_error("view: --prev needs a file; %s", VIEW_USAGE);
      prev_path = v;
    } else if (opt_value("--fp8-block", argc, argv, &i, &v)) {
      if (v == NULL)
        return cli_usage_error("view: --fp8-block needs a number; %s",
                               VIEW_USAGE);
      blk = v;
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      return cli_usage_error("view: unknown option '%s'; %s", argv[i],
                             VIEW_USAGE);
    } else if (npos < 2) {
      pos[npos++] = argv[i];
    } else {
      return cli_usage_error("view: too many arguments; %s", VIEW_USAGE);
    }
  }
  stitch_view_opts opts = {STITCH_VIEW_BF16, 0};
  if (to == NULL)
    return cli_usage_error("view: --to is required; %s", VIEW_USAGE);
  if (stitch_view_kind_parse(to, &opts.kind) != 0)
    return cli_usage_error("view: --to must be bf16, fp8 or nvfp4, not '%s'",
                           to);
  if (blk != NULL && parse_u32(blk, &opts.fp8_block) != 0)
    return cli_usage_error("view: --fp8-block must be a number of elements "
                           "(0 for one scale per tensor), not '%s'",
                           blk);
  if (blk != NULL && opts.kind != STITCH_VIEW_FP8)
    return cli_usage_error("view: --fp8-block is only for --to fp8");
  if (npos != 2)
    return cli_usage_error("view: needs IN and OUT; %s", VIEW_USAGE);

  stitch_diag d = {{0}};
  stitch_st *in = NULL, *prev = NULL;
  int rc = stitch_st_open(pos[0], &in, &d);
  if (rc == 0 && prev_path != NULL)
    rc = stitch_st_open(prev_path, &prev, &d);
  stitch_view_stats st = {0, 0, 0};
  if (rc == 0)
    rc = stitch_view_build(in, prev, &opts, pos[1], &st, &d);
  stitch_st_free(in);
  stitch_st_free(prev);
  if (rc != 0)
    return cli_fail(rc, &d);
  printf("view %s: %" PRIu64 " tensors, %" PRIu64 " scale blocks, %" PRIu64
         " %s -> %s\n",
         stitch_view_kind_name(opts.kind), st.tensors, st.scale_blocks,
         st.scales_changed,
         prev_path != NULL ? "scales changed" : "fresh scales", pos[1]);
  return 0;
}
