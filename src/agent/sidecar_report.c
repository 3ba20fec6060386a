/* sidecar_report.c: /v1/status as JSON and /metrics as Prometheus text
 * (sidecar_report.h, docs/stitchd.md). */
#include "sidecar_report.h"

#include <inttypes.h>
#include <string.h>

int sidecar_status_json(const sidecar_snapshot *r, sbuf *b) {
  const stitch_swarm_stats *s = &r->st;
  int rc = sb_printf(
      b,
      "{\"held_version\": %" PRIu64 ", \"applied_version\": %" PRIu64
      ", \"latest_version\": %" PRIu64 ", \"fetching_version\": %" PRIu64
      ", \"fetch_done\": %" PRIu64 ", \"fetch_total\": %" PRIu64
      ", \"peers\": %" PRIu32 ", \"apply\": \"%s\", \"applying\": %s"
      ", \"phase\": \"%s\", \"last_apply_pause_ms\": %" PRIu64
      ", \"last_apply_prepare_ms\": %" PRIu64 ", \"apply_failures\": %u"
      ", \"waiting\": %u, \"last_apply_error\": ",
      s->held_version, r->applied, s->latest_version, s->fetching_version,
      s->fetch_done, s->fetch_total, s->peers, r->manual ? "manual" : "auto",
      strcmp(r->phase, "idle") != 0 ? "true" : "false", r->phase,
      r->last_pause_ms, r->last_prepare_ms, r->failures, r->waiting);
  rc = rc                ? rc
       : r->last_error ? sb_json_str(b, r->last_error)
                       : sb_add(b, "null", 4);
  rc = rc ? rc : sb_add(b, ", \"engine\": ", 12);
  rc = rc ? rc : r->engine ? sb_json_str(b, r->engine) : sb_add(b, "null", 4);
  return rc ? rc : sb_add(b, "}\n", 2);
}

/* One metric: # HELP, # TYPE and its samples ("{labels} value" each). */
static int metric(sbuf *b, const char *name, const char *type, const char *help,
                  int n, const char *const *labels, const double *values) {
  int rc = sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  for (int i = 0; i < n && rc == 0; i++)
    rc = sb_printf(b, "%s%s %.17g\n", name, labels ? labels[i] : "", values[i]);
  return rc;
}

/* Hole punching (docs/swarm.md "Hole punching"): PUNCH messages, and the
 * punches themselves. */
static int punch_metrics(sbuf *b, const stitch_swarm_stats *s) {
  static const char *const msgs[] = {
      "{what=\"asked\"}", "{what=\"relayed\"}", "{what=\"ignored\"}",
      "{what=\"dropped\"}"};
  static const char *const res[] = {"{result=\"dialed\"}",
                                    "{result=\"linked\"}",
                                    "{result=\"failed\"}",
                                    "{result=\"refused\"}"};
  double m[] = {(double)s->punch_asked, (double)s->punch_relayed,
                (double)s->punch_ignored, (double)s->punch_dropped};
  double p[] = {(double)s->punch_dialed, (double)s->punch_linked,
                (double)s->punch_failed, (double)s->punch_refused};
  int rc = metric(b, "stitch_punch_messages_total", "counter",
                  "PUNCH messages: asks sent to a relay, relayed, ignored, "
                  "dropped over a peer's rate (and charged to it)",
                  4, msgs, m);
  return rc ? rc
            : metric(b, "stitch_punches_total", "counter",
                     "Hole punches: dialed, linked, failed with no link, "
                     "refused for the address's scope",
                     4, res, p);
}

int sidecar_metrics_text(const sidecar_snapshot *r, sbuf *out) {
  const stitch_swarm_stats *s = &r->st;
  static const char *const src[] = {"{source=\"seed\"}",
                                    "{source=\"same_region\"}",
                                    "{source=\"other_region\"}"};
  static const char *const dst[] = {"{dest=\"same_region\"}",
                                    "{dest=\"other_region\"}"};
  double down[] = {(double)s->bytes_from_seed, (double)s->bytes_same_region,
                   (double)s->bytes_other_region};
  double up[] = {(double)s->bytes_to_same_region,
                 (double)s->bytes_to_other_region};
  double one[1];
  sbuf *b = out;
  int rc = 0;
#define ONE(name, type, help, value)                                           \
  one[0] = (double)(value);                                                    \
  rc = rc ? rc : metric(b, name, type, help, 1, NULL, one)
  ONE("stitch_held_version", "gauge",
      "Version the weights file holds, verified", s->held_version);
  ONE("stitch_applied_version", "gauge", "Version the engine serves",
      r->applied);
  ONE("stitch_latest_version", "gauge", "Newest verified manifest",
      s->latest_version);
  ONE("stitch_fetching_version", "gauge", "Version being fetched (0: none)",
      s->fetching_version);
  ONE("stitch_fetch_done_chunks", "gauge", "Chunks of the fetch plan held",
      s->fetch_done);
  ONE("stitch_fetch_total_chunks", "gauge", "Chunks in the fetch plan",
      s->fetch_total);
  ONE("stitch_peers", "gauge", "Connected swarm neighbours", s->peers);
  ONE("stitch_serve_slots", "gauge",
      "Requesters of the region served at once", s->serve_slots);
  ONE("stitch_uplink_bytes_per_second", "gauge",
      "Uplink rate serving fills: told, or estimated (0: not yet)",
      s->up_bytes_per_s);
  rc = rc ? rc
          : metric(b, "stitch_bytes_down_total", "counter",
                   "Chunk bytes fetched, by source", 3, src, down);
  ONE("stitch_bytes_up_total", "counter", "Chunk bytes served to peers",
      s->bytes_up);
  rc = rc ? rc
          : metric(b, "stitch_bytes_up_by_dest_total", "counter",
                   "Chunk bytes served, by the peer's region", 2, dst, up);
  ONE("stitch_verify_failures_total", "counter",
      "Chunks or manifests that failed verification", s->verify_failures);
  ONE("stitch_chunks_twice_total", "counter",
      "Chunks that came again once held (downlink lost)", s->chunks_twice);
  ONE("stitch_bans_total", "counter", "Peers banned", s->bans);
  ONE("stitch_handshakes_refused_total", "counter",
      "Peers refused at the handshake (no ticket, a bad one, revoked)",
      s->refused);
  rc = rc ? rc : punch_metrics(b, s);
  ONE("stitch_engine_applies_total", "counter",
      "Versions the engine switched to", r->applies);
  ONE("stitch_apply_pause_seconds", "gauge",
      "Requests held back during the last engine apply (its commit)",
      (double)r->last_pause_ms / 1000.0);
  ONE("stitch_apply_prepare_seconds", "gauge",
      "The engine's prepare for the last apply, while it served",
      (double)r->last_prepare_ms / 1000.0);
  ONE("stitch_engine_prepare_failures_total", "counter",
      "Prepare calls to the engine that failed (no gate was closed)",
      r->prepare_failures);
  ONE("stitch_engine_commits_stale_total", "counter",
      "Commits the engine answered 409: its prepared patch was stale",
      r->stale_commits);
  ONE("stitch_engine_apply_failures", "gauge",
      "Engine applies failed in a row (0 after a success)", r->failures);
  ONE("stitch_weights_apply_seconds", "gauge",
      "Time of the last apply to the weights file",
      (double)r->last_weights_ms / 1000.0);
  ONE("stitch_requests_waiting", "gauge",
      "Proxied requests waiting for a version", r->waiting);
  ONE("stitch_http_connections", "gauge", "Open sidecar connections", r->conns);
  ONE("stitch_proxied_requests_total", "counter",
      "Requests forwarded to the engine", r->proxied);
  ONE("stitch_version_conflicts_total", "counter",
      "Requests answered 409: version not applied in time", r->conflicts);
  ONE("stitch_http_refused_total", "counter",
      "Connections refused over the limit", r->refused);
  ONE("stitch_http_evicted_total", "counter",
      "Connections still reading a request closed for a new one at the limit",
      r->evicted);
#undef ONE
  return rc;
}
