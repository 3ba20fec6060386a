/* sidecar.h: stitchd's HTTP sidecar for the rollout engine
 * (docs/stitchd.md, "Sidecar").
 *
 * One HTTP/1.1 server on the agent's libuv loop, parsed with http-parser:
 *   GET  /v1/status  the versions held, applied and in flight, as JSON
 *   POST /v1/apply   make the newest held version live in the engine
 *   GET  /metrics    Prometheus text
 *   anything else    proxied to the engine (--engine http://host:port),
 *                    stamped with X-Stitch-Version and, on request, held
 *                    back until a version is applied
 *                    (X-Stitch-Min-Version, X-Stitch-Wait-Ms).
 *
 * "Held" is the weights file's version (the agent applied and verified
 * it); "applied" is the version the engine serves. The sidecar never
 * touches the weights: it only decides when the engine is told to switch
 * (its prepare hook while it serves, then its reload hook, the commit, in
 * a pause) and stamps responses with what it serves.
 *
 * Everything runs on the loop's thread. */
#ifndef STITCHD_SIDECAR_H
#define STITCHD_SIDECAR_H

#include "stitch/swarm.h"

#include <stdint.h>
#include <uv.h>

typedef struct sidecar sidecar;

typedef struct sidecar_config {
  const char *listen;  /* "host:port" (port 0 picks one) */
  const char *engine;  /* "http://host:port", or NULL: nothing to proxy */
  const char *reload;  /* the engine's reload path ("/reload"), or NULL;
                          with PREPARE, the commit */
  const char *prepare; /* the engine's prepare path ("/prepare"), called
                          before the gate closes, or NULL: one hook, in
                          the gate. Needs RELOAD */
  const char *weights; /* the weights file, named to the reload hook */
  int manual;          /* 1: the engine switches on POST /v1/apply only;
                          0: applied follows held */
  unsigned head_ms;    /* a request's head must arrive within this of its
                          first byte, its body as long again after the
                          head plus 1 ms per 64 bytes (0: 20000) */
} sidecar_config;

typedef struct sidecar_hooks {
  void *user;
  /* The core's counters, read for every status and metrics request. */
  void (*stats)(void *user, stitch_swarm_stats *st);
  /* One line worth logging (a failed prepare or reload, a refused
   * connection). */
  void (*log)(void *user, const char *line);
} sidecar_hooks;

/* Binds and listens on cfg->listen and resolves the engine's address.
 * Without a reload hook the engine is taken to serve what the weights
 * file holds now (the stats' held_version): the first applied version.
 * With one, applied is 0 until the hook answered (with manual == 0 it is
 * called at once for the held version). CFG's strings
 * are copied; HOOKS is copied. On failure *out is NULL and the handles
 * opened so far are closing: run the loop to let them go. */
int sidecar_new(uv_loop_t *loop, const sidecar_config *cfg,
                const sidecar_hooks *hooks, sidecar **out, stitch_diag *d);
/* The bound port. */
int sidecar_port(const sidecar *sc);
/* The agent applied VERSION to the weights file in APPLY_MS: with
 * manual == 0 the engine is switched to it now (after the round running,
 * or at the retry a failed round is waiting for). */
void sidecar_held(sidecar *sc, uint64_t version, uint64_t apply_ms);
/* Closes the listener and every connection (waiting requests and one
 * being proxied are dropped). The sidecar frees itself once libuv closed
 * its handles; SC must not be used after. NULL is fine. */
void sidecar_close(sidecar *sc);

#endif
