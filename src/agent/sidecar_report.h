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
  uint64_t last_pause_ms, last_weights_ms;
  uint64_t applies, proxied, conflicts, refused, evicted;
  unsigned waiting, conns;
  int manual, applying;
  const char *engine; /* the --engine URL, or NULL */
} sidecar_snapshot;

/* Append to OUT; -1 past its cap or out of memory. */
int sidecar_status_json(const sidecar_snapshot *r, sbuf *out);
int sidecar_metrics_text(const sidecar_snapshot *r, sbuf *out);

#endif
