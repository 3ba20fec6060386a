/* A program built against an installed libstitch-net, the libuv driver
 * (tests/install_tree.sh, pkg-config stitch-net): it prints libstitch's
 * version, listens through stitch_net_new on a port the system picks,
 * closes the net and runs the loop out (the net frees itself there), and
 * has a bad address refused with its reason. No swarm: that is stitchd's
 * part (tests/swarm_demo, netlab). */
#include <stitch.h>
#include <stitch/net.h>

#include <stdio.h>
#include <string.h>

int main(void) {
  printf("stitch %s\n", stitch_version());

  uv_loop_t loop;
  if (uv_loop_init(&loop) != 0) {
    fprintf(stderr, "consumer_net: uv_loop_init failed\n");
    return 1;
  }
  stitch_net *n = NULL;
  stitch_diag d = {{0}};
  int rc = stitch_net_new(&loop, "127.0.0.1:0", NULL, &n, &d);
  if (rc != 0) {
    fprintf(stderr, "consumer_net: stitch_net_new: %s: %s\n",
            stitch_errname(rc), d.msg);
    return 1;
  }
  int port = stitch_net_port(n);
  stitch_net_close(n);
  uv_run(&loop, UV_RUN_DEFAULT);
  if (port <= 0 || uv_loop_close(&loop) != 0) {
    fprintf(stderr, "consumer_net: port %d, or handles left on the loop\n",
            port);
    return 1;
  }

  /* The driver writes its own reasons (src/net/driver.c, net_fail). */
  uv_loop_init(&loop);
  n = NULL;
  rc = stitch_net_new(&loop, "no-port-here", NULL, &n, &d);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  if (rc != STITCH_EINVAL || n != NULL || strstr(d.msg, "not host:port") == NULL) {
    fprintf(stderr, "consumer_net: a bad address gave %s '%s'\n",
            stitch_errname(rc), d.msg);
    return 1;
  }
  printf("net listened on port %d and closed; bad address refused: %s\n",
         port, d.msg);
  return 0;
}
