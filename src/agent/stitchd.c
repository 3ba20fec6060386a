/* stitchd.c: the node agent and the seed daemon (docs/stitchd.md).
 *
 *   stitchd node --swarm PREFIX.pub --listen ADDR --weights FILE --data DIR
 *                [--peers ADDR,...] [--region R] [...]
 *   stitchd seed --key PREFIX.key --listen ADDR --store DIR [...]
 *
 * The agent owns what is not protocol: the store behind the core's io, the
 * weights file and its applies, the seed's watch on the trainer's store,
 * the status file, signals. The core (stitch/swarm.h) decides everything
 * about peers and chunks; the libuv driver (stitch/net.h) carries it out.
 * With --http the node also serves the engine's sidecar (sidecar.h) on the
 * same loop, told of every apply. Only libstitch's public headers are used
 * here.
 *
 * Applies run on libuv's thread pool, one at a time and in the order the
 * core asked for them, so the loop keeps serving chunks meanwhile. The
 * worker reads the version's signed manifest from the store's file and
 * parses its own copy, so it shares nothing mutable with the loop thread
 * (the store's chunk reads touch only its directory name). */
#define _GNU_SOURCE
#include "stitch.h"
#include "stitch/net.h"
#include "stitch/store.h"
#include "stitch/swarm.h"

#include "options.h"
#include "sidecar.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define STATUS_EVERY_MS 250
#define SCAN_EVERY_MS 200
#define APPLIED_MAX 4096   /* apply times kept for the status file */

/* ---- The agent ---------------------------------------------------------- */

typedef struct apply_job {
  struct apply_job *next;
  struct agent *a;
  uv_work_t work;
  uint64_t version;
  uint32_t object;
  stitch_digest id;
  int rc;
  stitch_diag d;
  uint64_t ms;       /* how long the apply took */
  uint64_t ready_ms; /* when the core asked for it (Unix ms): every chunk
                        in and verified */
} apply_job;

typedef struct applied_rec {
  uint64_t version, unix_ms, ready_ms;
} applied_rec;

typedef struct agent {
  int seed;
  const char *weights, *status, *dir;
  char region[STITCH_SWARM_REGION_MAX];
  char bound[STITCH_SWARM_ADDR_MAX]; /* host:port we listen on */
  unsigned threads;
  stitch_pubkey swarm_pk;
  uv_loop_t loop;
  stitch_net *net;
  stitch_swarm *swarm;
  stitch_store *store;
  uv_timer_t status_timer, scan_timer;
  uv_fs_event_t store_watch; /* seed: DIR, for `latest` and `policy` */
  int watching;              /* store_watch started */
  uv_signal_t sigterm, sigint;
  apply_job *queue, *queue_tail; /* waiting; the head runs when running */
  int running, stopping;
  applied_rec *applied;
  size_t n_applied;
  uint64_t announced; /* seed: newest version given to the core */
  int scan_failing;    /* seed: the last scan of the store failed */
  struct timespec policy_mtime; /* seed: of the store's policy, last read */
  uint64_t clock_offset; /* the driver's clock less uv_now: it outlives the
                            driver, for an apply that ends after a stop */
  sidecar *sidecar; /* --http: the engine's side (sidecar.h) */
} agent;

/* The core's clock, the one the driver gives it. */
static uint64_t agent_now(agent *a) {
  uv_update_time(&a->loop);
  return uv_now(&a->loop) + a->clock_offset;
}

static uint64_t unix_ms(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

/* One line on stderr: "2025-01-31T12:00:00.123Z stitchd[node]: LINE". */
static void log_line(agent *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void log_line(agent *a, const char *fmt, ...) {
  uint64_t ms = unix_ms();
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char stamp[32], line[1024];
  strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s.%03uZ " PROG "[%s]: %s\n", stamp,
          (unsigned)(ms % 1000), a->seed ? "seed" : "node", line);
}

/* ---- The core's io: the store ------------------------------------------- */

static uint64_t io_random(void *user) {
  uint64_t v;
  randombytes_buf(&v, sizeof(v));
  return v;
}

static int io_chunk_has(void *user, const stitch_digest *hash) {
  return stitch_store_has_chunk(((agent *)user)->store, hash);
}

/* Bytes sent on are checked once per start: chunks are written unsynced,
 * so one from before a power loss may be short. A bad one is dropped (the
 * core answers REJECT, and the next put of it writes it whole). */
static int io_chunk_read(void *user, const stitch_digest *hash,
                         const uint8_t **buf, size_t *len) {
  agent *a = user;
  stitch_diag d = {{0}};
  int rc = stitch_store_get_chunk_checked(a->store, hash, buf, len, &d);
  if (rc == STITCH_ECHECKSUM) {
    log_line(a, "store: %s; dropped", d.msg);
    stitch_store_drop_chunk(a->store, hash);
  }
  return rc;
}

static void io_chunk_release(void *user, const uint8_t *buf, size_t len) {
  stitch_store_release(buf, len);
}

static int io_chunk_write(void *user, const stitch_digest *hash,
                          const uint8_t *buf, size_t len) {
  agent *a = user;
  if (a->seed)
    return STITCH_EINVAL; /* the trainer's store is the publisher's */
  stitch_diag d = {{0}};
  int rc = stitch_store_put_chunk(a->store, hash, buf, len, &d);
  if (rc != 0)
    log_line(a, "store: %s", d.msg);
  return rc;
}

static int io_manifest_write(void *user, const uint8_t *buf, size_t len) {
  agent *a = user;
  if (a->seed)
    return 0; /* it came from the store */
  stitch_diag d = {{0}};
  int rc = stitch_store_put_manifest(a->store, buf, len, &d);
  if (rc != 0)
    log_line(a, "store: %s", d.msg);
  return rc;
}

static void io_log(void *user, const char *line) {
  log_line(user, "%s", line);
}

static uint64_t io_unix_time(void *user) {
  (void)user;
  return unix_ms() / 1000;
}

/* A newer policy from a peer: kept beside the store for the next start
 * (the seed's store too: the trainer signed it, wherever it came from). */
static int io_policy_write(void *user, const uint8_t *buf, size_t len) {
  agent *a = user;
  stitch_diag d = {{0}};
  int rc = stitch_policy_save(a->dir, &a->swarm_pk, buf, len, &d);
  if (rc == STITCH_EROLLBACK)
    return 0; /* the file holds this one already, or newer */
  if (rc != 0)
    log_line(a, "policy: %s", d.msg);
  return rc;
}

static void net_log(void *user, const char *line) {
  log_line(user, "net: %s", line);
}

/* ---- Store files ---------------------------------------------------------- */

/* Gives the core one manifest of the store. */
static int announce(agent *a, uint64_t version, const stitch_digest *id) {
  uint8_t *buf;
  size_t len;
  stitch_diag d = {{0}};
  int rc = stitch_store_read_manifest(a->dir, version, id, &buf, &len, &d);
  if (rc == 0) {
    rc = stitch_swarm_add_manifest(a->swarm, buf, len, agent_now(a),
                                   &d);
    free(buf);
  }
  if (rc != 0)
    log_line(a, "manifest of version %" PRIu64 ": %s", version,
             d.msg[0] ? d.msg : stitch_strerror(rc));
  return rc;
}

/* ---- Applying (node) ------------------------------------------------------ */

/* The nice value of a thread that applies, and of the threads its apply
 * starts (they inherit it): the event loop, which serves the version's
 * chunks to the peers still fetching it, runs first when the CPUs are
 * busy, and the apply takes the rest. On netlab's 2 cores (12 nodes
 * applying beside the ones still fetching) a delta was at the median
 * node 17 % sooner and applied about as soon (docs/stitchd.md,
 * "Applying"). */
#define APPLY_NICE 10

/* Lowers the calling pool thread's priority, once: a thread may not
 * raise it again without CAP_SYS_NICE, and the pool runs little else
 * (address lookups). A failure changes nothing but the order. */
static void apply_lower_priority(void) {
  static _Thread_local int done;
  if (!done) {
    done = 1;
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), APPLY_NICE);
  }
}

/* On the thread pool: everything here is the job's own. */
static void apply_work(uv_work_t *w) {
  apply_job *j = w->data;
  agent *a = j->a;
  apply_lower_priority();
  uint64_t t0 = unix_ms();
  uint8_t *buf = NULL;
  size_t len = 0;
  stitch_manifest *m = NULL;
  stitch_digest id;
  stitch_diag *d = &j->d;
  int rc = stitch_store_read_manifest(a->dir, j->version, &j->id, &buf, &len,
                                      d);
  if (rc == 0)
    rc = stitch_manifest_open(buf, len, &a->swarm_pk, &m, &id, d);
  free(buf);
  if (rc == 0 &&
      (memcmp(id.b, j->id.b, 32) != 0 || j->object >= m->n_objects)) {
    rc = STITCH_EMISMATCH;
    snprintf(d->msg, sizeof(d->msg), "the store's manifest is not the core's");
  }
  if (rc == 0) {
    stitch_vref vr = {m, id};
    stitch_apply_opts o = {.threads = a->threads};
    rc = stitch_store_apply(a->store, a->weights, &vr, j->object, &o, d);
  }
  stitch_manifest_free(m);
  j->rc = rc;
  j->ms = unix_ms() - t0;
}

static void write_status(agent *a);
static void apply_next(agent *a);

static void apply_done(uv_work_t *w, int status) {
  apply_job *j = w->data;
  agent *a = j->a;
  uint64_t now = agent_now(a);
  a->queue = j->next;
  if (a->queue == NULL)
    a->queue_tail = NULL;
  a->running = 0;
  if (j->rc == 0) {
    if (a->n_applied == APPLIED_MAX) {
      memmove(a->applied, a->applied + 1,
              (APPLIED_MAX - 1) * sizeof(*a->applied));
      a->n_applied--;
    }
    a->applied[a->n_applied++] =
        (applied_rec){j->version, unix_ms(), j->ready_ms};
    log_line(a, "applied version %" PRIu64 " (object %" PRIu32 ") in %" PRIu64
                " ms",
             j->version, j->object, j->ms);
    stitch_swarm_applied(a->swarm, j->version, &j->id, now);
    sidecar_held(a->sidecar, j->version, j->ms);
    /* Keep what peers catching up may still ask for, drop the rest. */
    stitch_diag gd = {{0}};
    if (stitch_store_retain(a->store, j->version, 16, &gd) != 0)
      log_line(a, "retention: %s", gd.msg);
  } else {
    log_line(a, "apply of version %" PRIu64 " (object %" PRIu32 ") failed: %s",
             j->version, j->object,
             j->d.msg[0] ? j->d.msg : stitch_strerror(j->rc));
    stitch_swarm_apply_failed(a->swarm, j->version, j->object, now);
  }
  free(j);
  write_status(a);
  if (!a->stopping)
    stitch_net_kick(a->net);
  apply_next(a);
}

static void apply_next(agent *a) {
  if (a->running || a->queue == NULL)
    return;
  if (a->stopping) { /* not started: drop them */
    while (a->queue != NULL) {
      apply_job *j = a->queue;
      a->queue = j->next;
      free(j);
    }
    a->queue_tail = NULL;
    return;
  }
  apply_job *j = a->queue;
  j->work.data = j;
  int rc = uv_queue_work(&a->loop, &j->work, apply_work, apply_done);
  if (rc != 0) {
    j->rc = STITCH_EIO;
    snprintf(j->d.msg, sizeof(j->d.msg), "uv_queue_work: %s",
             uv_strerror(rc));
    apply_done(&j->work, 0);
    return;
  }
  a->running = 1;
}

/* The driver's APPLY: queue it behind any apply in progress. */
static void on_apply(void *user, uint64_t version, uint32_t object) {
  agent *a = user;
  uint64_t now = agent_now(a);
  const stitch_vref *v = stitch_swarm_find_version(a->swarm, version);
  apply_job *j = v != NULL && !a->seed ? calloc(1, sizeof(*j)) : NULL;
  if (j == NULL) {
    log_line(a, "cannot apply version %" PRIu64 ": %s", version,
             a->seed ? "a seed never applies"
             : v == NULL ? "the core holds no such manifest"
                         : "out of memory");
    stitch_swarm_apply_failed(a->swarm, version, object, now);
    return;
  }
  j->a = a;
  j->version = version;
  j->object = object;
  j->ready_ms = unix_ms();
  j->id = v->id;
  if (a->queue_tail != NULL)
    a->queue_tail->next = j;
  else
    a->queue = j;
  a->queue_tail = j;
  apply_next(a);
}

/* ---- The status file ---------------------------------------------------- */

/* A JSON string: the region and addresses come from flags. */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  fputc('"', f);
}

static void write_status(agent *a) {
  if (a->status == NULL || a->swarm == NULL)
    return;
  stitch_swarm_stats s;
  stitch_swarm_get_stats(a->swarm, &s);
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", a->status, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (f == NULL) {
    log_line(a, "status %s: %s", tmp, strerror(errno));
    return;
  }
  fprintf(f, "{\"role\": \"%s\", \"pid\": %ld, \"listen\": ",
          a->seed ? "seed" : "node", (long)getpid());
  json_str(f, a->bound);
  fputs(", \"region\": ", f);
  json_str(f, a->region);
  fprintf(f,
          ", \"held_version\": %" PRIu64
          ", \"latest_version\": %" PRIu64 ", \"fetching_version\": %" PRIu64
          ", \"fetch_done\": %" PRIu64 ", \"fetch_total\": %" PRIu64
          ", \"peers\": %" PRIu32 ", \"bytes_up\": %" PRIu64
          ", \"bytes_down\": %" PRIu64 ", \"bytes_from_seed\": %" PRIu64
          ", \"bytes_same_region\": %" PRIu64
          ", \"bytes_other_region\": %" PRIu64
          ", \"bytes_to_same_region\": %" PRIu64
          ", \"bytes_to_other_region\": %" PRIu64
          ", \"verify_failures\": %" PRIu64 ", \"chunks_twice\": %" PRIu64
          ", \"bans\": %" PRIu64 ", \"refused\": %" PRIu64
          ", \"policy_serial\": %" PRIu64
          ", \"manifests_forwarded\": %" PRIu64 ", \"serve_slots\": %" PRIu32
          ", \"up_bytes_per_s\": %" PRIu64,
          s.held_version, s.latest_version, s.fetching_version, s.fetch_done,
          s.fetch_total, s.peers, s.bytes_up, s.bytes_down, s.bytes_from_seed,
          s.bytes_same_region, s.bytes_other_region, s.bytes_to_same_region,
          s.bytes_to_other_region, s.verify_failures, s.chunks_twice, s.bans,
          s.refused, s.policy_serial, s.manifests_forwarded, s.serve_slots,
          s.up_bytes_per_s);
  /* Hole punching (docs/stitchd.md "Status"). */
  fprintf(f,
          ", \"punch\": {\"asked\": %" PRIu64 ", \"relayed\": %" PRIu64
          ", \"ignored\": %" PRIu64 ", \"dropped\": %" PRIu64
          ", \"refused\": %" PRIu64 ", \"dialed\": %" PRIu64
          ", \"linked\": %" PRIu64 ", \"failed\": %" PRIu64
          "}, \"applied\": [",
          s.punch_asked, s.punch_relayed, s.punch_ignored, s.punch_dropped,
          s.punch_refused, s.punch_dialed, s.punch_linked, s.punch_failed);
  for (size_t i = 0; i < a->n_applied; i++)
    fprintf(f,
            "%s{\"version\": %" PRIu64 ", \"unix_ms\": %" PRIu64
            ", \"ready_unix_ms\": %" PRIu64 "}",
            i ? ", " : "", a->applied[i].version, a->applied[i].unix_ms,
            a->applied[i].ready_ms);
  fprintf(f, "]}\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad || rename(tmp, a->status) != 0) {
    log_line(a, "status %s: %s", a->status, strerror(errno));
    unlink(tmp);
  }
}

static void on_status_timer(uv_timer_t *t) { write_status(t->data); }

/* ---- The seed's watch on the trainer's store ------------------------------ */

/* Announces every version the publisher made durable since the last scan:
 * the manifests from the last announced one up to what `latest` names
 * (the publisher moves `latest` only once every file is on disk). */
static void scan_store(agent *a) {
  stitch_store_entry *v = NULL;
  size_t n = 0;
  uint64_t latest = 0;
  stitch_diag d = {{0}};
  if (stitch_store_scan(a->dir, a->announced, &v, &n, &latest, &d) != 0) {
    if (!a->scan_failing) /* tried again at each scan; said once */
      log_line(a, "store: %s", d.msg);
    a->scan_failing = 1;
    return;
  }
  if (a->scan_failing)
    log_line(a, "store: readable again");
  a->scan_failing = 0;
  for (size_t i = 0; i < n; i++)
    if (announce(a, v[i].version, &v[i].id) == 0)
      log_line(a, "announced version %" PRIu64, v[i].version);
  free(v);
  if (latest > a->announced) {
    a->announced = latest;
    stitch_net_kick(a->net);
  }
}

/* Gives the core the store's policy when the file changed since the last
 * look (`stitch revoke` signs a new one; the core ignores what it holds
 * already). */
static void scan_policy(agent *a) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/policy", a->dir);
  struct stat st;
  if (stat(path, &st) != 0 ||
      (st.st_mtim.tv_sec == a->policy_mtime.tv_sec &&
       st.st_mtim.tv_nsec == a->policy_mtime.tv_nsec))
    return;
  a->policy_mtime = st.st_mtim;
  uint8_t *buf = NULL;
  size_t len = 0;
  stitch_diag d = {{0}};
  int rc = stitch_policy_load(a->dir, &buf, &len, &d);
  if (rc == 0)
    rc = stitch_swarm_set_policy(a->swarm, buf, len, agent_now(a), &d);
  free(buf);
  if (rc != 0)
    log_line(a, "policy: %s", d.msg);
  else if (a->net != NULL)
    stitch_net_kick(a->net);
}

static void on_scan_timer(uv_timer_t *t) {
  scan_store(t->data);
  scan_policy(t->data);
}

/* A change in the store's directory: `stitch publish` renames `latest`
 * into place as its last step (a temporary file, fsync, rename), so an
 * event naming it means a version may have landed, and the scan that
 * follows reads only what `latest` names: a manifest being written (a
 * temporary beside it) is never announced. Any other name is ignored but
 * `policy` (`stitch revoke`). The timer stays as the fallback for a
 * directory whose changes are not reported (a network file system). */
static void on_store_event(uv_fs_event_t *h, const char *name, int events,
                           int status) {
  agent *a = h->data;
  if (status < 0 || a->stopping)
    return;
  if (name == NULL || !strcmp(name, "latest"))
    scan_store(a);
  if (name == NULL || !strcmp(name, "policy"))
    scan_policy(a);
}

/* Watches the store's directory; without it (no inotify, or the limit of
 * watches reached) the timer alone finds a publish, within SCAN_EVERY_MS. */
static void watch_store(agent *a) {
  int rc = uv_fs_event_init(&a->loop, &a->store_watch);
  if (rc == 0) {
    a->store_watch.data = a;
    a->watching = 1;
    rc = uv_fs_event_start(&a->store_watch, on_store_event, a->dir, 0);
  }
  if (rc != 0)
    log_line(a, "store: cannot watch %s (%s): found by a scan every %d ms",
             a->dir, uv_strerror(rc), SCAN_EVERY_MS);
}

/* ---- Start-up --------------------------------------------------------------- */

/* DIR/node.key, made on first start. */
static int node_identity(agent *a, stitch_swarm_config *cfg) {
  char prefix[4096], path[4200];
  snprintf(prefix, sizeof(prefix), "%s/node", a->dir);
  snprintf(path, sizeof(path), "%s.key", prefix);
  stitch_diag d = {{0}};
  int rc = stitch_seckey_read(path, &cfg->node_sk, &cfg->node_pk, &d);
  if (rc == STITCH_ENOTFOUND) {
    rc = stitch_keygen(&cfg->node_pk, &cfg->node_sk);
    if (rc == 0)
      rc = stitch_key_write(prefix, &cfg->node_pk, &cfg->node_sk, &d);
  }
  return rc != 0 ? fail_diag(rc, &d) : 0;
}

/* --ticket FILE: read and checked now, so that a ticket for another swarm
 * or key, or one expired, is a clear error at start, not a refusal by
 * every peer. */
static int node_ticket(agent *a, const char *path, stitch_swarm_config *cfg) {
  if (path == NULL) {
    log_line(a, "no --ticket: only an open swarm admits this node "
                "(stitch admit --node %s/node.pub)", a->dir);
    return 0;
  }
  stitch_diag d = {{0}};
  stitch_ticket t;
  int rc = stitch_ticket_read(path, cfg->ticket, &d);
  if (rc == 0)
    rc = stitch_ticket_open(cfg->ticket, STITCH_TICKET_BYTES, &a->swarm_pk,
                            &t, &d);
  if (rc == 0)
    rc = stitch_ticket_valid(&t, &cfg->node_pk, io_unix_time(a), &d);
  if (rc != 0)
    return fail("--ticket %s: %s", path, d.msg + (strncmp(d.msg, "ticket: ", 8)
                                                       ? 0 : 8));
  cfg->ticket_len = STITCH_TICKET_BYTES;
  return 0;
}

/* The seed: the store's policy, opened or closed as --open says (closed
 * by default), signed anew when that changes. */
static int seed_policy(agent *a, const char *open, const stitch_seckey *sk) {
  int want;
  if (opt_bool(open, "open", &want) != 0)
    return 1;
  stitch_diag d = {{0}};
  int changed = 0;
  int rc = stitch_policy_update(a->dir, sk, NULL, want, &changed, &d);
  if (rc != 0)
    return fail_diag(rc, &d);
  if (changed)
    log_line(a, "policy: the swarm is now %s", want ? "open" : "closed");
  return 0;
}

/* What the weights file holds: nothing (it does not exist yet), or the
 * version its state names, checked against the swarm and, when the file
 * was touched since, against its own digest. */
static int weights_state(agent *a, stitch_swarm_config *cfg) {
  stitch_diag d = {{0}};
  int rc = stitch_weights_recover(a->weights, NULL, &d);
  if (rc != 0)
    return fail_diag(rc, &d);
  stitch_wstate st;
  rc = stitch_weights_state(a->weights, &st, &d);
  if (rc == STITCH_ENOTFOUND) {
    if (access(a->weights, F_OK) == 0)
      return fail("%s holds no stitch state: move it away (the node starts "
                  "from an anchor) or bring it up with stitch pull",
                  a->weights);
    return 0;
  }
  if (rc != 0)
    return fail_diag(rc, &d);
  if (memcmp(st.swarm.b, a->swarm_pk.b, 32) != 0)
    return fail("%s holds weights of another swarm", a->weights);
  if (st.stale) {
    stitch_st *cur;
    stitch_digest view;
    rc = stitch_st_open(a->weights, &cur, &d);
    if (rc == 0) {
      rc = stitch_view_digest(cur, &view, NULL);
      stitch_st_free(cur);
    }
    if (rc != 0)
      return fail_diag(rc, &d);
    if (memcmp(view.b, st.view.b, 32) != 0)
      return fail("%s was changed outside stitch: it no longer holds version "
                  "%" PRIu64,
                  a->weights, st.version);
  }
  cfg->held_version = st.version;
  cfg->held_id = st.id;
  return 0;
}

/* The address peers are told to dial: --advertise, or the listen host
 * with the bound port ("" for a wildcard host: dial-out only). */
static void advertised(const char *listen, const char *adv, int port,
                       char *bound, char *out) {
  char host[STITCH_SWARM_ADDR_MAX];
  const char *colon = strrchr(listen, ':');
  size_t hl = colon ? (size_t)(colon - listen) : 0;
  if (hl >= sizeof(host))
    hl = sizeof(host) - 1;
  memcpy(host, listen, hl);
  host[hl] = 0;
  snprintf(bound, STITCH_SWARM_ADDR_MAX, "%.100s:%d", host, port);
  if (adv != NULL)
    snprintf(out, STITCH_SWARM_ADDR_MAX, "%s", adv);
  else if (!strcmp(host, "0.0.0.0") || !strcmp(host, "[::]"))
    out[0] = 0;
  else
    snprintf(out, STITCH_SWARM_ADDR_MAX, "%s", bound);
}

/* "ADDR[@REGION],..." */
static int add_peers(agent *a, const char *list) {
  char *copy = strdup(list), *save = NULL;
  if (copy == NULL)
    return fail("out of memory");
  int rc = 0;
  for (char *t = strtok_r(copy, ",", &save); rc == 0 && t != NULL;
       t = strtok_r(NULL, ",", &save)) {
    t += strspn(t, " \t");
    if (*t == 0)
      continue;
    char *at = strchr(t, '@');
    if (at != NULL)
      *at = 0;
    if (strlen(t) >= STITCH_SWARM_ADDR_MAX ||
        (at && strlen(at + 1) >= STITCH_SWARM_REGION_MAX) ||
        strrchr(t, ':') == NULL) {
      rc = fail("--peers: '%s' is not host:port[@region]", t);
      break;
    }
    int r = stitch_swarm_add_peer_addr(a->swarm, t, at ? at + 1 : "");
    if (r != 0)
      rc = fail("--peers: %s: %s", t, stitch_strerror(r));
  }
  free(copy);
  return rc;
}

static void on_closed(uv_handle_t *h) {}

static void shutdown_agent(agent *a, const char *why) {
  if (a->stopping)
    return;
  a->stopping = 1;
  log_line(a, "stopping: %s", why);
  uv_close((uv_handle_t *)&a->status_timer, on_closed);
  uv_close((uv_handle_t *)&a->scan_timer, on_closed);
  if (a->watching)
    uv_close((uv_handle_t *)&a->store_watch, on_closed);
  uv_close((uv_handle_t *)&a->sigterm, on_closed);
  uv_close((uv_handle_t *)&a->sigint, on_closed);
  stitch_net_close(a->net);
  a->net = NULL;
  sidecar_close(a->sidecar);
  a->sidecar = NULL;
}

static void on_signal(uv_signal_t *h, int sig) {
  shutdown_agent(h->data, sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---- The sidecar (--http) ------------------------------------------------ */

static void sidecar_stats(void *user, stitch_swarm_stats *st) {
  stitch_swarm_get_stats(((agent *)user)->swarm, st);
}

static void sidecar_log(void *user, const char *line) {
  log_line(user, "http: %s", line);
}

/* The sidecar's flags, checked before anything is opened. */
static int sidecar_flags(opt *o, int *manual) {
  const char *apply = o[O_APPLY].value;
  if (o[O_HTTP].value == NULL &&
      (o[O_ENGINE].value || o[O_ENGINE_RELOAD].value ||
       o[O_ENGINE_PREPARE].value || apply || o[O_HTTP_HEAD_MS].value))
    return fail("--engine, --engine-reload, --engine-prepare, --apply and "
                "--http-head-ms need --http");
  if (o[O_ENGINE_RELOAD].value && !o[O_ENGINE].value)
    return fail("--engine-reload needs --engine");
  if (o[O_ENGINE_PREPARE].value && !o[O_ENGINE_RELOAD].value)
    return fail("--engine-prepare needs --engine-reload (the commit hook)");
  if (apply && strcmp(apply, "manual") != 0 && strcmp(apply, "auto") != 0)
    return fail("--apply: '%s' is not manual or auto", apply);
  /* With an engine, it switches when told; without, nothing to wait for. */
  *manual = apply ? strcmp(apply, "manual") == 0 : o[O_ENGINE].value != NULL;
  return 0;
}

static int start_sidecar(agent *a, opt *o, int manual) {
  sidecar_config sc = {.listen = o[O_HTTP].value,
                       .engine = o[O_ENGINE].value,
                       .reload = o[O_ENGINE_RELOAD].value,
                       .prepare = o[O_ENGINE_PREPARE].value,
                       .weights = a->weights,
                       .manual = manual};
  if (o[O_HTTP_HEAD_MS].value &&
      opt_uint(o[O_HTTP_HEAD_MS].value, "http-head-ms", 1, 3600000,
               &sc.head_ms) != 0)
    return 1;
  sidecar_hooks h = {a, sidecar_stats, sidecar_log};
  stitch_diag d = {{0}};
  int rc = sidecar_new(&a->loop, &sc, &h, &a->sidecar, &d);
  return rc != 0 ? fail_diag(rc, &d) : 0;
}

/* Opens everything, runs the loop until a signal, cleans up. */
static int run(agent *a, opt *o) {
  stitch_swarm_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  /* io_chunk_write's put hashes each chunk: the core need not (swarm.h) */
  cfg.write_verifies = 1;
  stitch_diag d = {{0}};
  int rc;
  unsigned v;
  /* A flag's value that cannot be right is a usage error (exit 2). */
  if (o[O_MAX_PEERS].value &&
      opt_uint(o[O_MAX_PEERS].value, "max-peers", 1, 4096, &v) == 0)
    cfg.max_peers = v;
  else if (o[O_MAX_PEERS].value)
    return 2;
  /* The uplink's rate, which serving fills (swarm.h up_bytes_per_s). */
  if (o[O_UP_MBIT].value &&
      opt_uint(o[O_UP_MBIT].value, "up-mbit", 1, 1000000, &v) == 0)
    cfg.up_bytes_per_s = (uint64_t)v * 125000;
  else if (o[O_UP_MBIT].value)
    return 2;
  if (o[O_THREADS].value &&
      opt_uint(o[O_THREADS].value, "threads", 0, 1024, &a->threads) != 0)
    return 2;
  if (opt_bool(o[O_LOG_CHUNKS].value, "log-chunks", &cfg.log_chunks) != 0)
    return 2;
  int manual = 0;
  if (!a->seed && sidecar_flags(o, &manual) != 0)
    return 2;
  const char *region = o[O_REGION].value ? o[O_REGION].value : "";
  if (strlen(region) >= sizeof(a->region))
    return fail("--region: longer than %d bytes",
                STITCH_SWARM_REGION_MAX - 1) + 1;
  snprintf(a->region, sizeof(a->region), "%s", region);
  snprintf(cfg.region, sizeof(cfg.region), "%s", region);
  if (o[O_ADVERTISE].value &&
      strlen(o[O_ADVERTISE].value) >= STITCH_SWARM_ADDR_MAX)
    return fail("--advertise: too long");
  if (a->seed) {
    rc = stitch_seckey_read(o[O_KEY].value, &cfg.node_sk, &cfg.node_pk, &d);
    if (rc != 0)
      return fail_diag(rc, &d);
    /* The seed speaks as the trainer: its node key is the swarm key. */
    a->swarm_pk = cfg.node_pk;
    cfg.seed = 1;
    if (seed_policy(a, o[O_OPEN].value, &cfg.node_sk) != 0)
      return 1;
  } else {
    rc = stitch_pubkey_read(o[O_SWARM].value, &a->swarm_pk, &d);
    if (rc != 0)
      return fail_diag(rc, &d);
  }
  cfg.swarm = a->swarm_pk;
  rc = stitch_store_open(a->dir, &a->swarm_pk, 1, &a->store, &d);
  if (rc != 0)
    return fail_diag(rc, &d);
  if (!a->seed && (node_identity(a, &cfg) || weights_state(a, &cfg) ||
                   node_ticket(a, o[O_TICKET].value, &cfg)))
    return 1;
  uv_loop_init(&a->loop);
  stitch_net_callbacks cb = {a, on_apply, net_log};
  rc = stitch_net_new(&a->loop, o[O_LISTEN].value, &cb, &a->net, &d);
  if (rc != 0) {
    fail_diag(rc, &d);
    uv_run(&a->loop, UV_RUN_DEFAULT); /* let the net close its handles */
    return 1;
  }
  a->clock_offset = stitch_net_now(a->net) - uv_now(&a->loop);
  advertised(o[O_LISTEN].value, o[O_ADVERTISE].value,
             stitch_net_port(a->net), a->bound, cfg.listen);
  stitch_swarm_io io = {a,
                        io_random,
                        io_chunk_has,
                        io_chunk_read,
                        io_chunk_release,
                        io_chunk_write,
                        io_manifest_write,
                        io_log,
                        io_unix_time,
                        io_policy_write};
  rc = stitch_swarm_new(&cfg, &io, &a->swarm, &d);
  memset(&cfg.node_sk, 0, sizeof(cfg.node_sk));
  if (rc != 0) {
    fail_diag(rc, &d);
    stitch_net_close(a->net);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    return 1;
  }
  if (!a->seed) /* what this node held before a restart */
    for (size_t i = 0; i < stitch_store_count(a->store); i++) {
      const stitch_vref *r = stitch_store_at(a->store, i);
      announce(a, r->m->version, &r->id);
    }
  if ((o[O_PEERS].value && add_peers(a, o[O_PEERS].value) != 0) ||
      (o[O_HTTP].value && start_sidecar(a, o, manual) != 0)) {
    stitch_net_close(a->net);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    return 1;
  }
  uv_timer_init(&a->loop, &a->status_timer);
  uv_timer_init(&a->loop, &a->scan_timer);
  uv_signal_init(&a->loop, &a->sigterm);
  uv_signal_init(&a->loop, &a->sigint);
  a->status_timer.data = a->scan_timer.data = a;
  a->sigterm.data = a->sigint.data = a;
  uv_signal_start(&a->sigterm, on_signal, SIGTERM);
  uv_signal_start(&a->sigint, on_signal, SIGINT);
  stitch_net_start(a->net, a->swarm);
  scan_policy(a); /* the policy held before a restart, or the store's */
  if (a->seed) {
    watch_store(a); /* before the first scan: nothing lands between */
    scan_store(a);
    uv_timer_start(&a->scan_timer, on_scan_timer, SCAN_EVERY_MS,
                   SCAN_EVERY_MS);
  }
  if (a->status != NULL)
    uv_timer_start(&a->status_timer, on_status_timer, STATUS_EVERY_MS,
                   STATUS_EVERY_MS);
  write_status(a);
  printf(PROG ": listening on %s\n", a->bound);
  if (a->sidecar != NULL)
    printf(PROG ": http on port %d\n", sidecar_port(a->sidecar));
  fflush(stdout);
  log_line(a, "listening on %s (advertised as '%s'), region '%s', "
              "holding version %" PRIu64,
           a->bound, cfg.listen, a->region, cfg.held_version);
  uv_run(&a->loop, UV_RUN_DEFAULT);
  write_status(a);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) { /* exit 2 on a usage error, 1 on a failure, as stitch */
    fputs(opt_usage, stderr);
    return 2;
  }
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(opt_usage, stdout);
      return 0;
    }
  if (!strcmp(argv[1], "--version")) {
    printf(PROG " %s\n", stitch_version());
    return 0;
  }
  unsigned role = !strcmp(argv[1], "node")   ? ROLE_NODE
                  : !strcmp(argv[1], "seed") ? ROLE_SEED
                                             : 0;
  if (role == 0) {
    fail("unknown command '%s': node or seed (see " PROG " --help)", argv[1]);
    return 2;
  }
  opt o[O_COUNT];
  if (opt_parse(argc, argv, role, o) != 0)
    return 2;
  if (sodium_init() < 0)
    return fail("libsodium failed to initialise");
  signal(SIGPIPE, SIG_IGN);
  agent a;
  memset(&a, 0, sizeof(a));
  a.seed = role == ROLE_SEED;
  a.weights = o[O_WEIGHTS].value;
  a.status = o[O_STATUS].value;
  a.dir = a.seed ? o[O_STORE].value : o[O_DATA].value;
  a.applied = calloc(APPLIED_MAX, sizeof(*a.applied));
  if (a.applied == NULL)
    return fail("out of memory");
  int rc = run(&a, o);
  if (a.swarm != NULL) {
    stitch_swarm_free(a.swarm);
    uv_loop_close(&a.loop);
  }
  stitch_store_close(a.store);
  free(a.applied);
  return rc;
}
