/* sidecar_report.h: what the sidecar reports, rendered: /v1/status as
 * one JSON object, /metrics as Prometheus text (format 0.0.4). Pure
 * functions of a snapshot, so the formats are testable without a loop. */
#ifndef STITCHD_SIDECAR_REPORT_H
#define STITCHD_SIDECAR_REPORT_H

#include "http_msg.h"
#include "stitch/swarm.h"

typedef struct sidecar_snapshot {
  stitch_swarm_stats st; /* the core's counters; held_version among them */
  uint64_t applied;      /* the version the engine serves */
  uint64_t last_pause_ms;   /* the last apply's gate: the engine's pause */
  uint64_t last_prepare_ms; /* its prepare calls, while the engine served */
  uint64_t last_weights_ms;
  uint64_t applies, proxied, conflicts, refused, evicted;
  uint64_t prepare_failures, stale_commits;
  unsigned waiting, conns;
  unsigned failures; /* failed rounds in a row (0 after a success) */
  int manual;
  const char *phase;      /* "idle", "prepare" or "commit" */
  const char *last_error; /* the last failed round's, NULL after a success */
  const char *engine;     /* the --engine URL, or NULL */
} sidecar_snapshot;

/* Append to OUT; -1 past its cap or out of memory. */
int sidecar_status_json(const sidecar_snapshot *r, sbuf *out);
int sidecar_metrics_text(const sidecar_snapshot *r, sbuf *out);

#endif
