/* sidecar.c: stitchd's HTTP sidecar (sidecar.h, docs/stitchd.md).
 *
 * One uv_tcp server on the agent's loop. Requests are parsed with
 * http-parser (libhttp-parser-dev, through http_request.c, which knows no
 * sockets), one at a time per connection: the parser pauses at the end of
 * a message, bytes that arrive meanwhile wait
 * in the connection's input buffer (at most SC_IN_MAX, then reading stops),
 * and parsing resumes once the response is written. So a client can
 * pipeline, but never make us hold more than one request's worth.
 *
 * A proxied request opens its own connection to the engine
 * ("Connection: close"). Its response is streamed back as it comes, so a
 * streamed completion (server-sent events) reaches the client token by
 * token: the head as soon as the engine's is parsed, with the
 * X-Stitch-Version it was sent under, then the body, with the engine's
 * Content-Length when it gave one, else chunked (or until close, to an
 * HTTP/1.0 client). Reading from the engine pauses while more than
 * SC_STREAM_HIGH bytes wait to be written to the client. A request that
 * asks for a version not applied yet is parked: no timer but its own,
 * rechecked after every apply.
 *
 * An apply with a reload hook is a round of up to two phases. With a
 * prepare hook, the round first calls it while requests still flow: the
 * engine readies the version (decodes, verifies) without serving it. A
 * failed prepare ends the round with no gate closed. Then the commit
 * phase: new proxied requests park (the gate), requests already at the
 * engine finish (so each response was generated under exactly one
 * version), the reload hook (the commit) is called, and when it answers
 * 2xx the applied version moves and the gate opens. A commit that answers
 * 409 says its prepared patch went stale: the gate opens and the round
 * prepares again (SC_STALE_MAX times). pause_ms is the time the gate was
 * closed, prepare_ms the prepare calls'. One round at a time; /v1/apply
 * calls that come during a round are answered by the next one.
 *
 * Every buffer has its cap when it is made, and grows only with bytes
 * received (SC_HEADER_MAX, SC_BODY_MAX). */
#define _GNU_SOURCE
#include "sidecar.h"

#include "http_request.h"
#include "http_upstream.h"
#include "sidecar_report.h"
#include "stitch/net.h"

#include <http_parser.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SC_HEADER_MAX HTTP_HEADER_MAX /* request line and headers: 64 KiB */
#define SC_BODY_MAX HTTP_BODY_MAX     /* a body, either way: 64 MiB */
/* A relayed head: each field "k\0v\0" as kept becomes "k: v\r\n", at most
 * twice as long, plus the lines the sidecar adds. */
#define SC_RELAY_HEAD_MAX (2 * SC_HEADER_MAX + 1024)
#define SC_CONN_MAX 256
#define SC_READ_BUF (64u << 10)
#define SC_IN_MAX (2 * SC_READ_BUF) /* read ahead of the request served */
#define SC_IDLE_MS 60000      /* a connection that sends or reads nothing */
/* A request's head must be whole within head_ms (SC_HEAD_MS unless
 * configured) of its first byte, and its body within head_ms of the head
 * plus 1 ms per SC_BODY_BYTES_PER_MS bytes received (64 MiB: 17 min more):
 * a client that sends a byte now and then cannot hold a connection for
 * ever. Idle time between requests is SC_IDLE_MS's alone. */
#define SC_HEAD_MS 20000
#define SC_BODY_BYTES_PER_MS 64
#define SC_WAIT_MS 30000      /* X-Stitch-Wait-Ms: default ... */
#define SC_WAIT_MAX_MS 600000 /* ... and cap */
#define SC_ENGINE_MS 600000   /* a proxied request; a gate, drain included */
#define SC_LINGER_MS 2000
#define SC_PREPARE_MS 600000 /* the prepare hook's answer */
#define SC_STALE_MAX 3 /* prepares again after a stale commit, per round */
#define SC_RETRY_MIN_MS 1000  /* --apply auto: after a failed round, ... */
#define SC_RETRY_MAX_MS 32000 /* ... doubling up to this */
#define SC_ERR_MAX 320        /* a failed round's line */
#define SC_HOOK_SAID_MAX 160  /* of a failed hook's answer, in that line */
#define SC_BACKLOG 128
#define SC_STREAM_HIGH (1u << 20) /* queued to a client: pause the engine */
#define SC_STREAM_LOW (256u << 10) /* ... and resume below this */

/* ---- Objects ------------------------------------------------------------- */

typedef enum cstate {
  C_READ,   /* reading a request */
  C_APPLY,  /* POST /v1/apply, waiting for its round */
  C_PARKED, /* a proxied request waiting for a version or the gate */
  C_ENGINE, /* at the engine */
  C_WRITE,  /* writing the response */
  C_LINGER, /* answered, our side shut: reading what the client still
               sends, so that closing does not reset the answer away */
  C_CLOSING
} cstate;

typedef enum phase {
  PH_IDLE,
  PH_PREPARE, /* the prepare hook runs; requests flow */
  PH_COMMIT   /* the gate is closed: requests park, those at the engine
                 finish, then the reload (commit) hook */
} phase;

typedef struct conn {
  uv_tcp_t tcp;
  uv_timer_t timer; /* idle, the park's deadline, or the engine's */
  uv_shutdown_t shut;
  struct sidecar *sc;
  struct conn *prev, *next;
  int handles; /* open: freed at 0 */
  cstate state;
  hreq req; /* the request being read or served */
  sbuf in;  /* read, not parsed yet */
  int keep, eof, reading;
  int started;      /* a byte of the request being read has arrived */
  uint64_t read_t0; /* loop time it began waiting for this request */
  uint64_t req_t0, body_t0; /* its first byte; the end of its head */
  uint64_t min_version, wait_ms, round;
  uint64_t stamp; /* the applied version when sent to the engine */
  upstream *up;
  int streaming; /* the response's head is out: its body follows */
  int chunked;   /* ... framed by us as chunks */
} conn;

struct sidecar {
  uv_loop_t *loop;
  uv_tcp_t listener;
  uv_timer_t apply_timer;
  sidecar_hooks hooks;
  char *weights, *reload, *prepare, *engine_url;
  int manual, has_engine, port, closing;
  upstream_env engine;
  conn *conns;
  unsigned n_conns, live; /* live: handles and objects not yet freed */
  unsigned n_open;        /* connections not closing: the cap counts these */
  uint64_t head_ms;
  uint64_t applied, target, round;
  phase phase;       /* of the round running (PH_IDLE: none) */
  unsigned inflight; /* proxied requests at the engine */
  upstream *hook_up; /* the prepare or commit call in flight */
  uint64_t t0_ns;    /* the phase's start */
  uint64_t prepare_ns, pause_ns; /* the round's, over all its phases */
  unsigned stale;                /* commits answered stale this round */
  unsigned failures;             /* failed rounds in a row: the backoff */
  int retry_pending;             /* apply_timer holds a retry */
  char last_error[SC_ERR_MAX];   /* the last failed round's; "" after a
                                    success */
  uint64_t last_pause_ms, last_prepare_ms, last_weights_ms;
  uint64_t prepare_failures, stale_commits;
  uint64_t applies, proxied, conflicts, refused, evicted;
  char rbuf[SC_READ_BUF]; /* every read lands here first */
};

static void sc_log(sidecar *sc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sc_log(sidecar *sc, const char *fmt, ...) {
  if (sc->hooks.log == NULL)
    return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  sc->hooks.log(sc->hooks.user, line);
}

static void sc_stats(sidecar *sc, stitch_swarm_stats *st) {
  memset(st, 0, sizeof(*st));
  if (sc->hooks.stats != NULL)
    sc->hooks.stats(sc->hooks.user, st);
}

static uint64_t sc_held(sidecar *sc) {
  stitch_swarm_stats st;
  sc_stats(sc, &st);
  return st.held_version;
}

static void sc_release(sidecar *sc) {
  if (--sc->live == 0 && sc->closing) {
    free(sc->weights);
    free(sc->reload);
    free(sc->prepare);
    free(sc->engine_url);
    free(sc);
  }
}

/* Every upstream counts as one of the sidecar's live objects until its
 * `closed` (upstream_closed) comes. */
static upstream *sc_upstream(sidecar *sc, sbuf *head, sbuf *body, int head_only,
                             const upstream_cbs *cbs, void *owner) {
  sc->live++;
  return upstream_start(&sc->engine, head, body, head_only, cbs, owner);
}

/* ---- Connections: responses ---------------------------------------------- */

typedef enum wkind {
  W_LAST,    /* the response's last bytes: then the next request */
  W_INTERIM, /* a 100 Continue: the request goes on */
  W_PART     /* a streamed response's head or body: more follows */
} wkind;

typedef struct wreq {
  uv_write_t req;
  conn *c;
  sbuf head, body;
  wkind kind;
} wreq;

static void conn_close(conn *c);
static void conn_next(conn *c);
static void conn_linger(conn *c);

static void on_conn_timer(uv_timer_t *t);

static void on_written(uv_write_t *req, int status) {
  wreq *w = req->data;
  conn *c = w->c;
  wkind kind = w->kind;
  sb_free(&w->head);
  sb_free(&w->body);
  free(w);
  if (c->state == C_CLOSING || (kind == W_INTERIM && status == 0))
    return;
  if (status < 0)
    conn_close(c);
  else if (kind == W_PART) { /* read on once the client caught up */
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) <=
        SC_STREAM_LOW)
      upstream_pause(c->up, 0);
  }
  else if (!c->keep)
    conn_linger(c);
  else
    conn_next(c);
}

/* Writes HEAD and BODY (taken). */
static void conn_write(conn *c, sbuf *head, sbuf *body, wkind kind) {
  wreq *w = calloc(1, sizeof(*w));
  if (w == NULL) {
    sb_free(head);
    sb_free(body);
    conn_close(c);
    return;
  }
  w->c = c;
  w->kind = kind;
  w->head = *head;
  w->body = *body;
  sb_init(head, head->max);
  sb_init(body, body->max);
  w->req.data = w;
  if (kind == W_LAST) {
    c->state = C_WRITE;
    uv_timer_start(&c->timer, on_conn_timer, SC_IDLE_MS, 0);
  }
  uv_buf_t b[2] = {uv_buf_init(w->head.p, (unsigned)w->head.len),
                   uv_buf_init(w->body.p, (unsigned)w->body.len)};
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, b, w->body.len ? 2 : 1,
               on_written) != 0) {
    sb_free(&w->head);
    sb_free(&w->body);
    free(w);
    conn_close(c);
  }
}

/* A response made here: BODY (taken) with its type. */
static void conn_send(conn *c, int status, const char *type, sbuf *body) {
  sbuf h;
  sb_init(&h, 4096);
  const char *reason = http_status_str((enum http_status)status);
  if (sb_printf(&h,
                "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                "X-Stitch-Version: %" PRIu64 "\r\n%s\r\n",
                status, reason, type, body->len, c->sc->applied,
                c->keep ? "" : "Connection: close\r\n") != 0) {
    sb_free(&h);
    sb_free(body);
    conn_close(c);
    return;
  }
  conn_write(c, &h, body, W_LAST);
}

/* {"error": "...", "applied_version": n}: one line. CLOSE for a request
 * that could not be parsed whole. */
static void conn_fail(conn *c, int status, int close, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void conn_fail(conn *c, int status, int close, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (close)
    c->keep = 0;
  sbuf b;
  sb_init(&b, 4096);
  int rc = sb_add(&b, "{\"error\": ", 10);
  rc = rc ? rc : sb_json_str(&b, msg);
  rc = rc ? rc
          : sb_printf(&b, ", \"applied_version\": %" PRIu64 "}\n",
                      c->sc->applied);
  if (rc != 0) {
    sb_free(&b);
    conn_close(c);
    return;
  }
  conn_send(c, status, "application/json", &b);
}

/* ---- Connections: reading ------------------------------------------------ */

static void handle(conn *c);

/* While reading a request: SC_IDLE_MS since the last byte, and once the
 * request began, no later than its deadline (SC_HEAD_MS above). */
static void conn_read_timer(conn *c) {
  uint64_t now = uv_now(c->sc->loop), wait = SC_IDLE_MS;
  if (c->started) {
    uint64_t due = c->req.head ? c->body_t0 + c->sc->head_ms +
                                     c->req.body.len / SC_BODY_BYTES_PER_MS
                               : c->req_t0 + c->sc->head_ms;
    uint64_t left = due > now ? due - now : 0;
    wait = left < wait ? left : wait;
  }
  uv_timer_start(&c->timer, on_conn_timer, wait, 0);
}

/* A 100 Continue, for a client that waits for one before its body. */
static void conn_continue(conn *c) {
  static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
  sbuf h, none;
  sb_init(&h, sizeof(cont));
  sb_init(&none, 0);
  if (sb_add(&h, cont, sizeof(cont) - 1) == 0)
    conn_write(c, &h, &none, W_INTERIM);
  else
    sb_free(&h);
}

/* Parses what is buffered, up to one whole request. */
static void conn_feed(conn *c) {
  hreq_event ev = HREQ_MORE;
  size_t off = 0;
  while (c->state == C_READ && off < c->in.len) {
    size_t used;
    ev = hreq_feed(&c->req, c->in.p + off, c->in.len - off, &used);
    off += used;
    if (ev != HREQ_HEAD)
      break;
    c->body_t0 = uv_now(c->sc->loop);
    if (c->req.want_continue)
      conn_continue(c);
  }
  if (off > 0) {
    memmove(c->in.p, c->in.p + off, c->in.len - off);
    c->in.len -= off;
    c->in.p[c->in.len] = 0;
  }
  if (c->state != C_READ) /* a write failed in a callback */
    return;
  if (ev == HREQ_ERROR)
    conn_fail(c, c->req.err_status, 1, "%s", c->req.err_msg);
  else if (ev == HREQ_DONE) {
    c->keep = hreq_keep_alive(&c->req) && !c->eof;
    handle(c);
  }
}

static void on_conn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  conn *c = h->data;
  *buf = uv_buf_init(c->sc->rbuf, SC_READ_BUF);
}

static void on_conn_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  conn *c = st->data;
  if (c->state == C_CLOSING || nread == 0)
    return;
  if (c->state == C_LINGER) { /* dropped unread */
    if (nread < 0)
      conn_close(c);
    return;
  }
  if (nread < 0) {
    /* The client is done sending: answer what it asked, then close. */
    uv_read_stop(st);
    c->reading = 0;
    c->eof = 1;
    c->keep = 0;
    if (c->state == C_READ || nread != UV_EOF)
      conn_close(c);
    return;
  }
  if (sb_add(&c->in, buf->base, (size_t)nread) != 0) {
    conn_close(c); /* cannot happen: reading stops at SC_READ_BUF */
    return;
  }
  if (c->state == C_READ) {
    if (!c->started) {
      c->started = 1;
      c->req_t0 = uv_now(c->sc->loop);
    }
    conn_feed(c);
    if (c->state == C_READ)
      conn_read_timer(c);
  }
  if (c->state != C_CLOSING && c->in.len >= SC_READ_BUF && c->reading) {
    uv_read_stop(st);
    c->reading = 0;
  }
}

/* The response is out: the next request on a kept-alive connection. */
static void conn_next(conn *c) {
  hreq_next(&c->req);
  c->min_version = c->wait_ms = 0;
  c->state = C_READ;
  c->read_t0 = c->req_t0 = uv_now(c->sc->loop);
  c->started = c->in.len > 0; /* pipelined */
  conn_read_timer(c);
  if (!c->reading && !c->eof &&
      uv_read_start((uv_stream_t *)&c->tcp, on_conn_alloc, on_conn_read) == 0)
    c->reading = 1;
  conn_feed(c);
}

static void on_shut(uv_shutdown_t *req, int status) {}

static void conn_linger(conn *c) {
  if (c->eof || uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shut) != 0) {
    conn_close(c);
    return;
  }
  c->state = C_LINGER;
  c->in.len = 0;
  uv_timer_start(&c->timer, on_conn_timer, SC_LINGER_MS, 0);
  if (!c->reading &&
      uv_read_start((uv_stream_t *)&c->tcp, on_conn_alloc, on_conn_read) == 0)
    c->reading = 1;
}

static void on_conn_closed(uv_handle_t *h) {
  conn *c = h->data;
  sidecar *sc = c->sc;
  if (--c->handles > 0)
    return;
  if (c->prev != NULL)
    c->prev->next = c->next;
  else
    sc->conns = c->next;
  if (c->next != NULL)
    c->next->prev = c->prev;
  sb_free(&c->in);
  hreq_free(&c->req);
  free(c);
  sc->n_conns--;
  sc_release(sc);
}

static void commit_maybe(sidecar *sc);

static void conn_close(conn *c) {
  if (c->state == C_CLOSING)
    return;
  c->state = C_CLOSING;
  c->sc->n_open--;
  if (c->up != NULL) {
    upstream_abort(c->up);
    c->up = NULL;
    c->sc->inflight--;
    commit_maybe(c->sc);
  }
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
  uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

/* ---- Applying ------------------------------------------------------------ */

/* The gate is closed: new proxied requests park. Only the commit phase
 * closes it; the prepare phase runs while the engine serves. */
static int gated(const sidecar *sc) { return sc->phase == PH_COMMIT; }

static void apply_begin(sidecar *sc);

static void answer_applies(sidecar *sc, uint64_t round, const char *err,
                           uint64_t pause_ms, uint64_t prepare_ms) {
  for (conn *c = sc->conns; c != NULL; c = c->next) {
    if (c->state != C_APPLY || c->round > round)
      continue;
    if (err != NULL) {
      conn_fail(c, 502, 0, "%s", err);
      continue;
    }
    sbuf b;
    sb_init(&b, 256);
    if (sb_printf(&b,
                  "{\"applied_version\": %" PRIu64
                  ", \"held_version\": %" PRIu64 ", \"pause_ms\": %" PRIu64
                  ", \"prepare_ms\": %" PRIu64 "}\n",
                  sc->applied, sc_held(sc), pause_ms, prepare_ms) != 0) {
      sb_free(&b);
      conn_close(c);
    } else {
      conn_send(c, 200, "application/json", &b);
    }
  }
}

static void dispatch(conn *c);

/* Parked requests whose version is live now, with the gate open. */
static void release_parked(sidecar *sc) {
  for (conn *c = sc->conns; c != NULL; c = c->next)
    if (c->state == C_PARKED && !gated(sc) && sc->applied >= c->min_version)
      dispatch(c);
}

static void on_apply_retry(uv_timer_t *t) {
  sidecar *sc = t->data;
  sc->retry_pending = 0;
  apply_begin(sc);
}

/* --apply auto, after FAILURES failed rounds in a row: 1 s, doubling up
 * to 32 s, so that an engine that keeps failing is asked about once in
 * 32 s and one that failed once is asked again soon. */
static uint64_t retry_ms(unsigned failures) {
  unsigned shift = failures > 1 ? failures - 1 : 0;
  if (shift > 5)
    shift = 5;
  uint64_t ms = (uint64_t)SC_RETRY_MIN_MS << shift;
  return ms < SC_RETRY_MAX_MS ? ms : SC_RETRY_MAX_MS;
}

/* The round ends: applied moved (ERR NULL) or not. The gate opens. */
static void apply_end(sidecar *sc, const char *err) {
  uint64_t pause_ms = sc->pause_ns / 1000000;
  uint64_t prepare_ms = sc->prepare_ns / 1000000;
  sc->phase = PH_IDLE;
  uv_timer_stop(&sc->apply_timer);
  uint64_t retry = 0;
  if (err != NULL) {
    sc->failures++;
    snprintf(sc->last_error, sizeof(sc->last_error), "%s", err);
    if (!sc->manual && !sc->closing)
      retry = retry_ms(sc->failures);
    if (retry)
      sc_log(sc,
             "apply of version %" PRIu64 " failed: %s (%u in a row; "
             "retry in %" PRIu64 " ms)",
             sc->target, err, sc->failures, retry);
    else
      sc_log(sc, "apply of version %" PRIu64 " failed: %s", sc->target, err);
  } else {
    sc->failures = 0;
    sc->last_error[0] = 0;
    if (sc->prepare != NULL)
      sc_log(sc,
             "engine serves version %" PRIu64 " (prepare %" PRIu64
             " ms, pause %" PRIu64 " ms)",
             sc->applied, prepare_ms, pause_ms);
    else
      sc_log(sc, "engine serves version %" PRIu64 " (pause %" PRIu64 " ms)",
             sc->applied, pause_ms);
  }
  answer_applies(sc, sc->round, err, pause_ms, prepare_ms);
  release_parked(sc);
  int waiting = 0;
  for (conn *c = sc->conns; c != NULL && !waiting; c = c->next)
    waiting = c->state == C_APPLY;
  if (waiting || (!sc->manual && err == NULL && sc_held(sc) > sc->applied))
    apply_begin(sc);
  else if (retry) { /* auto: try again; the retry takes the newest held */
    sc->retry_pending = 1;
    uv_timer_start(&sc->apply_timer, on_apply_retry, retry, 0);
  }
}

/* A hook's failure as one line in MSG (with the start of the engine's
 * answer, control bytes blanked), or NULL for a 2xx answer. */
static const char *hook_error(const upstream *u, const char *err,
                              const char *hook, char *msg, size_t n) {
  if (err != NULL) {
    snprintf(msg, n, "the engine's %s hook: %s", hook, err);
    return msg;
  }
  unsigned st = u->p.status_code;
  if (st / 100 == 2)
    return NULL;
  char said[SC_HOOK_SAID_MAX + 1];
  size_t k = 0;
  for (size_t i = 0; i < u->body.len && k < SC_HOOK_SAID_MAX; i++) {
    unsigned char ch = (unsigned char)u->body.p[i];
    said[k++] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
  }
  while (k > 0 && said[k - 1] == ' ')
    k--;
  said[k] = 0;
  snprintf(msg, n, "the engine's %s hook answered %u%s%s", hook, st,
           k ? ": " : "", said);
  return msg;
}

/* The reload hook's name in what is logged and answered: with a prepare
 * hook, it is the commit. */
static const char *commit_name(const sidecar *sc) {
  return sc->prepare != NULL ? "commit" : "reload";
}

/* POST PATH {"version": target, "weights": "/abs/FILE"} to the engine,
 * DONE to hear the answer; NULL (and *ERR) when it cannot start. */
static upstream *hook_call(sidecar *sc, const char *path,
                           upstream_done_fn done, const char **err) {
  sbuf head, body;
  sb_init(&head, 4096);
  sb_init(&body, 8192);
  char *abs = realpath(sc->weights, NULL);
  int rc =
      sb_printf(&body, "{\"version\": %" PRIu64 ", \"weights\": ", sc->target);
  rc = rc ? rc : sb_json_str(&body, abs ? abs : sc->weights);
  rc = rc ? rc : sb_add(&body, "}", 1);
  free(abs);
  rc = rc ? rc
          : sb_printf(&head,
                      "POST %s HTTP/1.1\r\nHost: %s\r\n"
                      "Content-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      path, sc->engine.host, body.len);
  if (rc != 0) {
    sb_free(&head);
    sb_free(&body);
    *err = "out of memory";
    return NULL;
  }
  upstream_cbs cbs = {.done = done};
  upstream *u = sc_upstream(sc, &head, &body, 0, &cbs, sc);
  if (u == NULL)
    *err = "cannot connect to the engine";
  return u;
}

static void on_apply_timeout(uv_timer_t *t);
static void commit_maybe(sidecar *sc);

/* The gate closes: requests already at the engine finish, then the
 * commit (commit_maybe). */
static void gate_close(sidecar *sc) {
  sc->phase = PH_COMMIT;
  sc->t0_ns = uv_hrtime();
  uv_timer_start(&sc->apply_timer, on_apply_timeout, SC_ENGINE_MS, 0);
  commit_maybe(sc);
}

static void prepare_done(upstream *u, const char *err) {
  sidecar *sc = u->owner;
  sc->hook_up = NULL;
  sc->prepare_ns += uv_hrtime() - sc->t0_ns;
  char msg[SC_ERR_MAX];
  if ((err = hook_error(u, err, "prepare", msg, sizeof(msg))) != NULL) {
    sc->prepare_failures++;
    apply_end(sc, err); /* no gate was closed */
    return;
  }
  gate_close(sc);
}

/* The prepare phase: the engine readies the target while it serves. */
static void prepare_start(sidecar *sc) {
  sc->phase = PH_PREPARE;
  sc->t0_ns = uv_hrtime();
  uv_timer_start(&sc->apply_timer, on_apply_timeout, SC_PREPARE_MS, 0);
  const char *err = NULL;
  sc->hook_up = hook_call(sc, sc->prepare, prepare_done, &err);
  if (sc->hook_up == NULL) {
    sc->prepare_failures++;
    apply_end(sc, err);
  }
}

static void commit_done(upstream *u, const char *err) {
  sidecar *sc = u->owner;
  sc->hook_up = NULL;
  sc->pause_ns += uv_hrtime() - sc->t0_ns;
  char msg[SC_ERR_MAX];
  if (err == NULL && u->p.status_code == 409 && sc->prepare != NULL) {
    /* Stale: what the engine prepared no longer fits its tensors, and it
     * wrote nothing. Open the gate, prepare again, a few times. */
    sc->stale_commits++;
    if (sc->stale < SC_STALE_MAX) {
      sc->stale++;
      sc_log(sc,
             "commit of version %" PRIu64 ": the engine's prepared patch is "
             "stale (409); preparing again (%u of %d)",
             sc->target, sc->stale, SC_STALE_MAX);
      sc->phase = PH_PREPARE;
      release_parked(sc);
      prepare_start(sc);
      return;
    }
    snprintf(msg, sizeof(msg),
             "the engine's commit hook answered 409 (stale) %d times in a "
             "row, each after a new prepare",
             SC_STALE_MAX + 1);
    apply_end(sc, msg);
    return;
  }
  if ((err = hook_error(u, err, commit_name(sc), msg, sizeof(msg))) == NULL) {
    sc->applied = sc->target;
    sc->last_pause_ms = sc->pause_ns / 1000000;
    sc->last_prepare_ms = sc->prepare_ns / 1000000;
    sc->applies++;
  }
  apply_end(sc, err);
}

/* Calls the reload (commit) hook once the gate is closed and the requests
 * it let through left the engine. */
static void commit_maybe(sidecar *sc) {
  if (!gated(sc) || sc->closing || sc->hook_up != NULL || sc->inflight > 0)
    return;
  const char *err = NULL;
  sc->hook_up = hook_call(sc, sc->reload, commit_done, &err);
  if (sc->hook_up == NULL)
    apply_end(sc, err);
}

static void on_apply_timeout(uv_timer_t *t) {
  sidecar *sc = t->data;
  if (sc->phase == PH_IDLE)
    return;
  upstream_abort(sc->hook_up);
  sc->hook_up = NULL;
  char msg[SC_ERR_MAX];
  if (sc->phase == PH_PREPARE) {
    sc->prepare_ns += uv_hrtime() - sc->t0_ns;
    sc->prepare_failures++;
    snprintf(msg, sizeof(msg),
             "the engine's prepare hook did not answer in %d s",
             SC_PREPARE_MS / 1000);
  } else {
    sc->pause_ns += uv_hrtime() - sc->t0_ns;
    snprintf(msg, sizeof(msg),
             "the engine did not finish its requests and %s in %d s",
             commit_name(sc), SC_ENGINE_MS / 1000);
  }
  apply_end(sc, msg);
}

/* Starts a round for the newest held version, or answers the waiting
 * /v1/apply calls at once when the engine already serves it. */
static void apply_begin(sidecar *sc) {
  if (sc->phase != PH_IDLE || sc->closing)
    return;
  uint64_t held = sc_held(sc);
  if (held <= sc->applied) {
    answer_applies(sc, UINT64_MAX, NULL, 0, 0);
    return;
  }
  if (sc->retry_pending) { /* asked for now: no need to wait */
    sc->retry_pending = 0;
    uv_timer_stop(&sc->apply_timer);
  }
  sc->round++;
  sc->target = held;
  sc->prepare_ns = sc->pause_ns = 0;
  sc->stale = 0;
  if (sc->reload == NULL) { /* nothing to tell: the engine follows */
    sc->applied = held;
    sc->last_pause_ms = sc->last_prepare_ms = 0;
    sc->applies++;
    apply_end(sc, NULL);
    return;
  }
  if (sc->prepare != NULL)
    prepare_start(sc);
  else
    gate_close(sc);
}

/* ---- Proxying ------------------------------------------------------------ */

static void conflict(conn *c) {
  c->sc->conflicts++;
  conn_fail(c, 409, 0,
            "version %" PRIu64 " is not applied (waited %" PRIu64 " ms)",
            c->min_version, c->wait_ms);
}

static void on_conn_timer(uv_timer_t *t) {
  conn *c = t->data;
  switch (c->state) {
  case C_PARKED: /* the deadline; past it only the gate may hold it */
    if (c->sc->applied < c->min_version)
      conflict(c);
    break;
  case C_ENGINE:
    if (c->streaming) { /* too late for an error response */
      conn_close(c);
      break;
    }
    upstream_abort(c->up);
    c->up = NULL;
    c->sc->inflight--;
    conn_fail(c, 504, 0, "the engine sent nothing for 600 s");
    commit_maybe(c->sc);
    break;
  case C_READ:
    if (c->started) { /* past its deadline (or idle half-way) */
      conn_fail(c, 408, 1, "the request did not arrive in time");
      break;
    }
    conn_close(c);
    break;
  case C_WRITE:
  case C_LINGER:
    conn_close(c);
    break;
  default:
    break;
  }
}

/* The engine's head, relayed with our framing and the version stamp. */
static void proxy_head(upstream *u) {
  conn *c = u->owner;
  unsigned st = u->p.status_code;
  int bodyless = u->head_only || st == 204 || st == 304;
  int sized = !(u->p.flags & F_CHUNKED) && u->p.content_length != ULLONG_MAX;
  int http11 = c->req.p.http_major == 1 && c->req.p.http_minor >= 1;
  c->chunked = !bodyless && !sized && http11;
  if (!bodyless && !sized && !http11)
    c->keep = 0; /* the body ends when the connection does */
  sbuf h, none;
  sb_init(&h, SC_RELAY_HEAD_MAX);
  sb_init(&none, 0);
  int rc = sb_printf(&h, "HTTP/1.1 %u %s\r\n", st,
                     u->reason.len ? u->reason.p
                                   : http_status_str((enum http_status)st));
  if (rc == 0 && (rc = hdr_relay(&u->h, u->head_only, &h)) == STITCH_ELIMIT) {
    /* Nothing is relayed yet: the client can still have a 502. */
    sb_free(&h);
    upstream_abort(c->up);
    c->up = NULL;
    c->sc->inflight--;
    conn_fail(c, 502, 0, "engine: its Connection header names over %d headers",
              HDR_CONN_TOKENS_MAX);
    commit_maybe(c->sc);
    return;
  }
  if (rc == 0 && !bodyless && sized)
    rc = sb_printf(&h, "Content-Length: %" PRIu64 "\r\n", u->p.content_length);
  if (rc == 0 && c->chunked)
    rc = sb_printf(&h, "Transfer-Encoding: chunked\r\n");
  if (rc == 0)
    rc = sb_printf(&h, "X-Stitch-Version: %" PRIu64 "\r\n%s\r\n", c->stamp,
                   c->keep ? "" : "Connection: close\r\n");
  if (rc != 0) {
    sb_free(&h);
    conn_close(c);
    return;
  }
  c->streaming = 1;
  conn_write(c, &h, &none, W_PART);
}

/* A piece of the engine's body, on its way to the client. */
static void proxy_data(upstream *u, const char *at, size_t n) {
  conn *c = u->owner;
  sbuf b, none;
  sb_init(&b, n + 32);
  sb_init(&none, 0);
  int rc = c->chunked ? sb_printf(&b, "%zx\r\n", n) : 0;
  rc = rc ? rc : sb_add(&b, at, n);
  rc = rc ? rc : c->chunked ? sb_add(&b, "\r\n", 2) : 0;
  if (rc != 0) {
    sb_free(&b);
    conn_close(c);
    return;
  }
  uv_timer_start(&c->timer, on_conn_timer, SC_ENGINE_MS, 0);
  conn_write(c, &b, &none, W_PART);
  if (c->state != C_CLOSING &&
      uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > SC_STREAM_HIGH)
    upstream_pause(u, 1);
}

static void proxy_done(upstream *u, const char *err) {
  conn *c = u->owner;
  sidecar *sc = c->sc;
  c->up = NULL;
  sc->inflight--;
  uv_timer_stop(&c->timer);
  if (err != NULL && !c->streaming) {
    conn_fail(c, 502, 0, "engine: %s", err);
  } else if (err != NULL) { /* cut short: the client sees the stream end */
    conn_close(c);
  } else {
    sbuf end, none;
    sb_init(&end, 8);
    sb_init(&none, 0);
    if (c->chunked && sb_add(&end, "0\r\n\r\n", 5) != 0) {
      sb_free(&end);
      conn_close(c);
    } else {
      conn_write(c, &end, &none, W_LAST); /* after every part: in order */
    }
  }
  commit_maybe(sc);
}

/* Sends the request as it came (less hop-by-hop headers) to the engine. */
static void dispatch(conn *c) {
  sidecar *sc = c->sc;
  sbuf h;
  sb_init(&h, SC_RELAY_HEAD_MAX);
  int rc = hreq_upstream_head(&c->req, sc->engine.host, &h);
  if (rc != 0) {
    sb_free(&h);
    if (rc == STITCH_ELIMIT)
      conn_fail(c, 400, 0, "Connection: names over %d headers",
                HDR_CONN_TOKENS_MAX);
    else
      conn_fail(c, 500, 1, "out of memory");
    return;
  }
  c->stamp = sc->applied;
  static const upstream_cbs cbs = {
      .done = proxy_done, .head = proxy_head, .data = proxy_data};
  c->streaming = c->chunked = 0;
  c->up = sc_upstream(sc, &h, &c->req.body, c->req.p.method == HTTP_HEAD,
                      &cbs, c);
  if (c->up == NULL) {
    conn_fail(c, 502, 0, "engine: cannot connect");
    return;
  }
  sc->inflight++;
  sc->proxied++;
  c->state = C_ENGINE;
  uv_timer_start(&c->timer, on_conn_timer, SC_ENGINE_MS, 0);
}

static void route_proxy(conn *c) {
  sidecar *sc = c->sc;
  if (!sc->has_engine) {
    conn_fail(c, 404, 0, "no such endpoint (no --engine to proxy to)");
    return;
  }
  const char *mv = hdr_get(&c->req.h, "x-stitch-min-version");
  const char *wv = hdr_get(&c->req.h, "x-stitch-wait-ms");
  c->min_version = 0;
  c->wait_ms = SC_WAIT_MS;
  if (mv != NULL && hdr_u64(mv, &c->min_version) != 0) {
    conn_fail(c, 400, 0, "X-Stitch-Min-Version: not a version number");
    return;
  }
  if (wv != NULL && hdr_u64(wv, &c->wait_ms) != 0) {
    conn_fail(c, 400, 0, "X-Stitch-Wait-Ms: not a number of milliseconds");
    return;
  }
  if (c->wait_ms > SC_WAIT_MAX_MS)
    c->wait_ms = SC_WAIT_MAX_MS;
  if (!gated(sc) && sc->applied >= c->min_version) {
    dispatch(c);
    return;
  }
  if (sc->applied < c->min_version && c->wait_ms == 0) {
    conflict(c);
    return;
  }
  c->state = C_PARKED;
  if (sc->applied < c->min_version) {
    /* No sooner than the wait asked: the loop's clock was read before
     * this request arrived and counts whole milliseconds, so the timer
     * starts from now, one millisecond longer. */
    uv_update_time(c->timer.loop);
    uv_timer_start(&c->timer, on_conn_timer, c->wait_ms + 1, 0);
  } else
    uv_timer_stop(&c->timer);
}

/* ---- The sidecar's own endpoints ----------------------------------------- */

static unsigned count_state(sidecar *sc, cstate s) {
  unsigned n = 0;
  for (conn *c = sc->conns; c != NULL; c = c->next)
    n += c->state == s;
  return n;
}

/* What /v1/status and /metrics report, now. */
static void snapshot(sidecar *sc, sidecar_snapshot *r) {
  memset(r, 0, sizeof(*r));
  sc_stats(sc, &r->st);
  r->applied = sc->applied;
  r->last_pause_ms = sc->last_pause_ms;
  r->last_prepare_ms = sc->last_prepare_ms;
  r->prepare_failures = sc->prepare_failures;
  r->stale_commits = sc->stale_commits;
  r->failures = sc->failures;
  r->last_error = sc->last_error[0] ? sc->last_error : NULL;
  r->last_weights_ms = sc->last_weights_ms;
  r->applies = sc->applies;
  r->proxied = sc->proxied;
  r->conflicts = sc->conflicts;
  r->refused = sc->refused;
  r->evicted = sc->evicted;
  r->waiting = count_state(sc, C_PARKED);
  r->conns = sc->n_conns;
  r->manual = sc->manual;
  r->phase = sc->phase == PH_PREPARE  ? "prepare"
             : sc->phase == PH_COMMIT ? "commit"
                                      : "idle";
  r->engine = sc->engine_url;
}

static void route_report(conn *c, int metrics) {
  sidecar_snapshot r;
  snapshot(c->sc, &r);
  sbuf b;
  sb_init(&b, 64 << 10);
  if ((metrics ? sidecar_metrics_text(&r, &b) : sidecar_status_json(&r, &b))) {
    sb_free(&b);
    conn_close(c);
    return;
  }
  conn_send(c, 200,
            metrics ? "text/plain; version=0.0.4; charset=utf-8"
                    : "application/json",
            &b);
}

static void route_status(conn *c) { route_report(c, 0); }
static void route_metrics(conn *c) { route_report(c, 1); }

static void route_apply(conn *c) {
  sidecar *sc = c->sc;
  c->state = C_APPLY;
  c->round = sc->round + 1; /* the round that starts now, or the next */
  uv_timer_stop(&c->timer);
  if (sc->phase == PH_IDLE)
    apply_begin(sc);
}

static void handle(conn *c) {
  const char *url = c->req.url.p ? c->req.url.p : "";
  size_t pl = strcspn(url, "?#");
  unsigned m = c->req.p.method;
  static const struct {
    const char *path;
    unsigned method;
    void (*fn)(conn *c);
  } routes[] = {{"/v1/status", HTTP_GET, route_status},
                {"/v1/apply", HTTP_POST, route_apply},
                {"/metrics", HTTP_GET, route_metrics}};
  for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
    if (strlen(routes[i].path) != pl || memcmp(url, routes[i].path, pl) != 0)
      continue;
    if (m != routes[i].method) {
      conn_fail(c, 405, 0, "%s takes %s", routes[i].path,
                http_method_str((enum http_method)routes[i].method));
      return;
    }
    routes[i].fn(c);
    return;
  }
  route_proxy(c);
}

/* ---- Listening ----------------------------------------------------------- */

static void on_refused_closed(uv_handle_t *h) {
  sidecar *sc = h->data;
  free(h);
  sc_release(sc);
}

/* Over SC_CONN_MAX: one 503 line, then close. */
static void refuse(sidecar *sc) {
  static const char resp[] =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Content-Length: 34\r\nConnection: close\r\n\r\n"
      "{\"error\": \"too many connections\"}\n";
  uv_tcp_t *t = malloc(sizeof(*t));
  if (t == NULL || uv_tcp_init(sc->loop, t) != 0) {
    free(t);
    return;
  }
  sc->live++;
  t->data = sc;
  if (uv_accept((uv_stream_t *)&sc->listener, (uv_stream_t *)t) == 0) {
    uv_buf_t b = uv_buf_init((char *)resp, sizeof(resp) - 1);
    uv_try_write((uv_stream_t *)t, &b, 1);
  }
  sc->refused++;
  uv_close((uv_handle_t *)t, on_refused_closed);
}

/* At the cap, the connection to close for a new one: one lingering after
 * its answer, else the one waiting longest for (the rest of) a request,
 * idle or dribbling its head or body; the oldest accepted on a tie. None
 * when every connection has a request in hand. */
static conn *evictable(sidecar *sc) {
  conn *best = NULL;
  for (conn *c = sc->conns; c != NULL; c = c->next) { /* newest first */
    if (c->state == C_LINGER)
      return c;
    if (c->state == C_READ && (best == NULL || c->read_t0 <= best->read_t0))
      best = c;
  }
  return best;
}

#define SC_EVICTED_BODY "{\"error\": \"closed for a new connection\"}\n"

static void evict(sidecar *sc, conn *c) {
  static const char resp[] =
      "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
      "Content-Length: 41\r\nConnection: close\r\n\r\n" SC_EVICTED_BODY;
  _Static_assert(sizeof(SC_EVICTED_BODY) - 1 == 41, "Content-Length");
  if (c->state == C_READ && c->started) { /* best effort: it is closed */
    uv_buf_t b = uv_buf_init((char *)resp, sizeof(resp) - 1);
    uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
  }
  sc->evicted++;
  conn_close(c);
}

static void on_connection(uv_stream_t *server, int status) {
  sidecar *sc = server->data;
  if (status < 0 || sc->closing)
    return;
  if (sc->n_open >= SC_CONN_MAX) {
    conn *v = evictable(sc);
    if (v == NULL) {
      refuse(sc);
      return;
    }
    evict(sc, v);
  }
  conn *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return;
  c->sc = sc;
  if (uv_tcp_init(sc->loop, &c->tcp) != 0) {
    free(c);
    return;
  }
  uv_timer_init(sc->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->handles = 2;
  sc->live++;
  sc->n_conns++;
  sc->n_open++;
  c->read_t0 = uv_now(sc->loop);
  c->next = sc->conns;
  if (sc->conns != NULL)
    sc->conns->prev = c;
  sc->conns = c;
  sb_init(&c->in, SC_IN_MAX);
  hreq_init(&c->req);
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, on_conn_alloc, on_conn_read) != 0) {
    conn_close(c);
    return;
  }
  c->reading = 1;
  conn_read_timer(c);
}

static int fail_d(stitch_diag *d, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_d(stitch_diag *d, int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
  va_end(ap);
  return err;
}

/* ---- Public -------------------------------------------------------------- */

static void on_sc_closed(uv_handle_t *h) { sc_release(h->data); }

static void upstream_closed(void *user) { sc_release(user); }

int sidecar_new(uv_loop_t *loop, const sidecar_config *cfg,
                const sidecar_hooks *hooks, sidecar **out, stitch_diag *d) {
  *out = NULL;
  sidecar *sc = calloc(1, sizeof(*sc));
  if (sc == NULL)
    return fail_d(d, STITCH_ENOMEM, "out of memory");
  sc->loop = loop;
  sc->hooks = *hooks;
  sc->manual = cfg->manual;
  sc->head_ms = cfg->head_ms ? cfg->head_ms : SC_HEAD_MS;
  sc->weights = strdup(cfg->weights ? cfg->weights : "");
  sc->reload = cfg->reload ? strdup(cfg->reload) : NULL;
  sc->prepare = cfg->prepare ? strdup(cfg->prepare) : NULL;
  sc->engine_url = cfg->engine ? strdup(cfg->engine) : NULL;
  uv_tcp_init(loop, &sc->listener);
  uv_timer_init(loop, &sc->apply_timer);
  sc->listener.data = sc->apply_timer.data = sc;
  sc->live = 2;
  int rc = 0;
  if (sc->weights == NULL || (cfg->reload && !sc->reload) ||
      (cfg->prepare && !sc->prepare) || (cfg->engine && !sc->engine_url))
    rc = fail_d(d, STITCH_ENOMEM, "out of memory");
  else if (cfg->reload != NULL &&
           (cfg->engine == NULL || cfg->reload[0] != '/'))
    rc = fail_d(d, STITCH_EINVAL,
                "--engine-reload needs --engine and a path starting with /");
  else if (cfg->prepare != NULL &&
           (cfg->reload == NULL || cfg->prepare[0] != '/'))
    rc = fail_d(d, STITCH_EINVAL,
                "--engine-prepare needs --engine-reload (the commit) and a "
                "path starting with /");
  if (rc == 0 && cfg->engine != NULL) {
    rc = upstream_env_init(&sc->engine, loop, cfg->engine, d);
    sc->engine.rbuf = sc->rbuf;
    sc->engine.rbuf_len = sizeof(sc->rbuf);
    sc->engine.closed = upstream_closed;
    sc->engine.user = sc;
    sc->has_engine = rc == 0;
  }
  if (rc == 0)
    rc = stitch_net_listen(loop, &sc->listener, cfg->listen, SC_BACKLOG,
                           on_connection, &sc->port, "--http", d);
  if (rc != 0) {
    sc->closing = 1;
    uv_close((uv_handle_t *)&sc->listener, on_sc_closed);
    uv_close((uv_handle_t *)&sc->apply_timer, on_sc_closed);
    return rc;
  }
  /* Without a hook the engine is taken to serve what the file holds;
   * with one, nothing is known until it is told (auto: now). */
  *out = sc;
  if (sc->reload == NULL)
    sc->applied = sc_held(sc);
  else if (!sc->manual)
    apply_begin(sc);
  return 0;
}

int sidecar_port(const sidecar *sc) { return sc->port; }

void sidecar_held(sidecar *sc, uint64_t version, uint64_t apply_ms) {
  if (sc == NULL || sc->closing)
    return;
  sc->last_weights_ms = apply_ms;
  if (!sc->manual && !sc->retry_pending) /* a retry takes the newest */
    apply_begin(sc);
}

void sidecar_close(sidecar *sc) {
  if (sc == NULL || sc->closing)
    return;
  sc->closing = 1;
  upstream_abort(sc->hook_up);
  sc->hook_up = NULL;
  for (conn *c = sc->conns; c != NULL; c = c->next)
    conn_close(c);
  uv_close((uv_handle_t *)&sc->listener, on_sc_closed);
  uv_close((uv_handle_t *)&sc->apply_timer, on_sc_closed);
}
