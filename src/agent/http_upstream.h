/* http_upstream.h: one HTTP/1.1 request from the sidecar to the engine,
 * on the loop's thread. Its response is either read whole, or streamed:
 * the head as soon as it is parsed, then the body as it arrives.
 *
 * libuv's rule holds: upstream_start either returns NULL (and never calls
 * a callback) or calls DONE exactly once, later, unless upstream_abort
 * comes first. After DONE returns the upstream closes and frees itself.
 * HEAD and DATA may call upstream_abort. */
#ifndef STITCHD_HTTP_UPSTREAM_H
#define STITCHD_HTTP_UPSTREAM_H

#include "http_msg.h"
#include "stitch/error.h"

#include <http_parser.h>
#include <uv.h>

/* Where requests go; it must outlive every upstream started with it. */
typedef struct upstream_env {
  uv_loop_t *loop;
  struct sockaddr_storage addr; /* the engine */
  char host[300];               /* its Host header: the URL's authority */
  char *rbuf;                   /* reads land here: one at a time, so one
                                   buffer serves every connection */
  size_t rbuf_len;
  void (*closed)(void *user); /* an upstream is freed, or failed to
                                 start: once per upstream_start (may be
                                 NULL) */
  void *user;
} upstream_env;

typedef struct upstream upstream;
typedef void (*upstream_done_fn)(upstream *u, const char *err);

/* What the caller hears. With HEAD NULL the body is gathered in
 * upstream.body and DONE reads it all; otherwise HEAD comes once, when
 * the final (not 1xx) response's headers are parsed, DATA with each piece
 * of its body, de-chunked, in the env's read buffer (copy what is kept),
 * and DONE at the end. */
typedef struct upstream_cbs {
  upstream_done_fn done;
  void (*head)(upstream *u);
  void (*data)(upstream *u, const char *at, size_t n);
} upstream_cbs;

struct upstream {
  /* The response, for HEAD and DONE to read (ERR NULL): p.status_code,
   * p.content_length (in HEAD: the engine's Content-Length, ULLONG_MAX
   * without one), p.flags (F_CHUNKED), reason, headers, and unless
   * streamed, body. */
  http_parser p;
  sbuf reason, body;
  hdrs h;
  int head_only; /* a HEAD: the response has no body */
  void *owner;
  /* Private. */
  uv_tcp_t tcp;
  uv_connect_t connect;
  uv_write_t write;
  const upstream_env *env;
  sbuf req_head, req_body;
  int complete, closing, connected, reading, paused;
  const char *err;
  upstream_cbs cbs;
};

/* Parses URL ("http://host[:port][/]", nothing more) and resolves it once,
 * now. Fills loop, addr and host; the caller sets the rest. */
int upstream_env_init(upstream_env *env, uv_loop_t *loop, const char *url,
                      stitch_diag *d);
/* Sends HEAD and BODY (both taken, even on failure) to the engine.
 * HEAD_ONLY: the request is a HEAD, so the response has no body. */
upstream *upstream_start(const upstream_env *env, sbuf *head, sbuf *body,
                         int head_only, const upstream_cbs *cbs, void *owner);
/* Forgets the owner and closes: no callback comes. NULL is fine. */
void upstream_abort(upstream *u);
/* Stops (PAUSE 1) or resumes reading the response: a streamed response
 * waits in the kernel's buffers, and then the engine's, while the reader
 * it goes to is slow. */
void upstream_pause(upstream *u, int pause);

#endif
