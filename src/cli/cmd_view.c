/* cmd_view.c: stitch view --to bf16|fp8|nvfp4 [--fp8-block N] [--prev PREV] IN OUT */
#include "cli/cli.h"

int cmd_view(int argc, char **argv) {
  return cli_usage_error("view: not built yet");
}
