/* stitch/net.h: the libuv driver that runs one stitch_swarm over TCP
 * (docs/stitchd.md).
 *
 * The driver carries bytes and actions and nothing else (docs/design.md,
 * "One protocol core, several drivers"): it accepts connections and opens
 * them in the core, feeds it what each peer sent, writes what the core has
 * pending (one write in flight per peer: that is the backpressure), dials
 * the addresses the core asks for, closes the peers it drops, arms one
 * timer at stitch_swarm_wake and hands APPLY actions to the agent. Whom to
 * dial, what to request and when to drop a peer are the core's decisions.
 *
 * Everything runs on the loop's thread. The core's clock is the loop's
 * (uv_now) plus a fixed offset, in milliseconds: stitch_net_now. */
#ifndef STITCH_NET_H
#define STITCH_NET_H

#include "stitch/swarm.h"

#include <uv.h>

#include "stitch/export.h"

#ifdef __cplusplus
extern "C" {
#endif
STITCH_API_BEGIN

typedef struct stitch_net stitch_net;

typedef struct stitch_net_callbacks {
  void *user;
  /* The core asks for (version, object) to be applied. The agent answers
   * later, on the loop's thread, with stitch_swarm_applied or
   * stitch_swarm_apply_failed and then stitch_net_kick. */
  void (*apply)(void *user, uint64_t version, uint32_t object);
  /* Transport events worth a line (a failed dial, a reset); may be NULL. */
  void (*log)(void *user, const char *line);
} stitch_net_callbacks;

/* Binds and listens on LISTEN ("host:port", IPv4, [IPv6] or a name; port 0
 * picks one) on LOOP. Connections wait in the backlog until
 * stitch_net_start, so the agent can read the bound port first and
 * advertise it. Callbacks are copied. */
int stitch_net_new(uv_loop_t *loop, const char *listen,
                   const stitch_net_callbacks *cb, stitch_net **out,
                   stitch_diag *d);
/* The bound port. */
int stitch_net_port(const stitch_net *n);
/* Starts serving SWARM (not owned; it must outlive the net): accepts,
 * carries out the core's first actions, arms the timer. */
void stitch_net_start(stitch_net *n, stitch_swarm *swarm);
/* The time the core is given (ms). */
uint64_t stitch_net_now(const stitch_net *n);
/* After the agent called into the core (applied, add_manifest, ...):
 * carry out the actions it queued, write what is pending, re-arm the timer.
 */
void stitch_net_kick(stitch_net *n);
/* Binds TCP (initialized on LOOP) to ADDR ("host:port": IPv4, [IPv6] or a
 * name, looked up once, now; port 0 picks one), listens with BACKLOG and
 * ON_CONN, and puts the bound port in *PORT. WHAT names the address
 * in errors ("--http"). For stitchd's other listeners (the sidecar). */
int stitch_net_listen(uv_loop_t *loop, uv_tcp_t *tcp, const char *addr,
                      int backlog, uv_connection_cb on_conn, int *port,
                      const char *what, stitch_diag *d);
/* Stops accepting and closes every connection (telling the core each peer
 * is gone), the listener and the timer; later actions are dropped. The net
 * frees itself once libuv has closed every handle, so N must not be used
 * after this call; the loop then runs out. NULL is fine. */
void stitch_net_close(stitch_net *n);

STITCH_API_END
#ifdef __cplusplus
}
#endif
#endif
