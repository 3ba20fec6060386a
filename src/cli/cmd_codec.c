/* cmd_codec.c: placeholder */
#include "cli/cli.h"
int cmd_delta(int argc, char **argv) { return 2; }
int cmd_apply(int argc, char **argv) { return 2; }
int cmd_inspect(int argc, char **argv) { return 2; }
int cmd_digest(int argc, char **argv) { return 2; }
