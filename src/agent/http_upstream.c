/* http_upstream.c: one request to the engine (http_upstream.h).
 *
 * A connection per request, "Connection: close": the engine's keep-alive
 * would save a handshake on loopback and cost a pool's worth of state.
 * The response is parsed with http-parser (HTTP_RESPONSE), so chunked
 * bodies and bodies sent until close both work, gathered or streamed; 1xx
 * interim answers are skipped. */
#define _GNU_SOURCE
#include "http_upstream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int up_on_status(http_parser *p, const char *at, size_t n) {
  upstream *u = p->data;
  return sb_add(&u->reason, at, n) ? (u->err = "status line too long", -1) : 0;
}

static int up_on_field(http_parser *p, const char *at, size_t n) {
  upstream *u = p->data;
  int rc = hdr_field(&u->h, at, n);
  if (rc == STITCH_EFORMAT)
    u->err = "a header name holds a blank";
  else if (rc != 0)
    u->err = "headers too large";
  return rc ? -1 : 0;
}

static int up_on_value(http_parser *p, const char *at, size_t n) {
  upstream *u = p->data;
  int rc = hdr_value(&u->h, at, n);
  if (rc == STITCH_EFORMAT)
    u->err = "a header value holds a control character";
  else if (rc != 0)
    u->err = "headers too large";
  return rc ? -1 : 0;
}

static int up_on_headers(http_parser *p) {
  upstream *u = p->data;
  if (hdr_end(&u->h) != 0)
    return u->err = "headers too large", -1;
  if (u->cbs.head != NULL && p->status_code / 100 != 1) {
    u->cbs.head(u);
    if (u->closing) /* the caller gave up */
      return -1;
  }
  return u->head_only ? 1 : 0; /* 1: a HEAD response has no body */
}

static int up_on_body(http_parser *p, const char *at, size_t n) {
  upstream *u = p->data;
  if (u->cbs.data == NULL)
    return sb_add(&u->body, at, n) ? (u->err = "response body over 64 MiB", -1)
                                   : 0;
  u->cbs.data(u, at, n);
  return u->closing ? -1 : 0;
}

static int up_on_complete(http_parser *p) {
  upstream *u = p->data;
  if (p->status_code / 100 == 1) { /* an interim response: the next one */
    sb_free(&u->reason);
    sb_free(&u->h.all);
    return 0;
  }
  u->complete = 1;
  http_parser_pause(p, 1); /* what follows is not ours */
  return 0;
}

static const http_parser_settings up_settings = {
    .on_status = up_on_status,
    .on_header_field = up_on_field,
    .on_header_value = up_on_value,
    .on_headers_complete = up_on_headers,
    .on_body = up_on_body,
    .on_message_complete = up_on_complete};

static void on_up_closed(uv_handle_t *h) {
  upstream *u = h->data;
  const upstream_env *env = u->env;
  sb_free(&u->req_head);
  sb_free(&u->req_body);
  sb_free(&u->reason);
  sb_free(&u->body);
  sb_free(&u->h.all);
  free(u);
  if (env->closed != NULL)
    env->closed(env->user);
}

static void up_close(upstream *u) {
  if (u->closing)
    return;
  u->closing = 1;
  uv_close((uv_handle_t *)&u->tcp, on_up_closed);
}

void upstream_abort(upstream *u) {
  if (u == NULL)
    return;
  u->cbs = (upstream_cbs){0};
  up_close(u);
}

static void up_finish(upstream *u, const char *err) {
  upstream_done_fn done = u->cbs.done;
  u->cbs = (upstream_cbs){0};
  if (done != NULL && !u->closing)
    done(u, err);
  up_close(u);
}

static void on_up_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  upstream *u = h->data;
  *buf = uv_buf_init(u->env->rbuf, (unsigned)u->env->rbuf_len);
}

static void on_up_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  upstream *u = st->data;
  if (u->closing || nread == 0)
    return;
  if (nread == UV_EOF) /* ends a body sent until close */
    http_parser_execute(&u->p, &up_settings, NULL, 0);
  else if (nread > 0)
    http_parser_execute(&u->p, &up_settings, buf->base, (size_t)nread);
  if (u->closing) /* aborted from a callback */
    return;
  enum http_errno e = HTTP_PARSER_ERRNO(&u->p);
  if (nread < 0 && nread != UV_EOF)
    up_finish(u, uv_strerror((int)nread));
  else if (u->complete)
    up_finish(u, NULL);
  else if (u->err != NULL)
    up_finish(u, u->err);
  else if (e != HPE_OK)
    up_finish(u, http_errno_description(e));
  else if (nread == UV_EOF)
    up_finish(u, "the engine closed the connection before a whole response");
}

static void on_up_written(uv_write_t *req, int status) {
  upstream *u = req->data;
  if (!u->closing && status < 0)
    up_finish(u, uv_strerror(status));
}

static void on_up_connect(uv_connect_t *req, int status) {
  upstream *u = req->data;
  if (u->closing)
    return;
  if (status < 0) {
    up_finish(u, uv_strerror(status));
    return;
  }
  u->connected = 1;
  uv_buf_t b[2] = {uv_buf_init(u->req_head.p, (unsigned)u->req_head.len),
                   uv_buf_init(u->req_body.p, (unsigned)u->req_body.len)};
  u->write.data = u;
  int rc = uv_write(&u->write, (uv_stream_t *)&u->tcp, b,
                    u->req_body.len ? 2 : 1, on_up_written);
  if (rc == 0 && !u->paused)
    rc = uv_read_start((uv_stream_t *)&u->tcp, on_up_alloc, on_up_read);
  u->reading = rc == 0 && !u->paused;
  if (rc != 0)
    up_finish(u, uv_strerror(rc));
}

void upstream_pause(upstream *u, int pause) {
  if (u == NULL)
    return;
  u->paused = pause;
  if (u->closing || !u->connected || u->reading == !pause)
    return;
  int rc = pause ? uv_read_stop((uv_stream_t *)&u->tcp)
                 : uv_read_start((uv_stream_t *)&u->tcp, on_up_alloc,
                                 on_up_read);
  if (rc != 0)
    up_finish(u, uv_strerror(rc));
  else
    u->reading = !pause;
}

upstream *upstream_start(const upstream_env *env, sbuf *head, sbuf *body,
                         int head_only, const upstream_cbs *cbs, void *owner) {
  upstream *u = calloc(1, sizeof(*u));
  if (u == NULL || uv_tcp_init(env->loop, &u->tcp) != 0) {
    free(u);
    sb_free(head);
    sb_free(body);
    if (env->closed != NULL)
      env->closed(env->user);
    return NULL;
  }
  u->env = env;
  u->tcp.data = u;
  u->connect.data = u;
  u->req_head = *head;
  u->req_body = *body;
  sb_init(head, head->max);
  sb_init(body, body->max);
  sb_init(&u->reason, 256);
  sb_init(&u->body, HTTP_BODY_MAX);
  sb_init(&u->h.all, HTTP_HEADER_MAX);
  u->head_only = head_only;
  http_parser_init(&u->p, HTTP_RESPONSE);
  u->p.data = u;
  if (uv_tcp_connect(&u->connect, &u->tcp, (const struct sockaddr *)&env->addr,
                     on_up_connect) != 0) {
    up_close(u);
    return NULL;
  }
  u->cbs = *cbs;
  u->owner = owner;
  return u;
}

static int upstream_resolve(uv_loop_t *loop, const char *host, int port,
                            struct sockaddr_storage *ss) {
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0 ||
      uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
    return 0;
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
  uv_getaddrinfo_t req;
  int rc = uv_getaddrinfo(loop, &req, NULL, host, ps, &hints);
  if (rc != 0)
    return rc;
  memcpy(ss, req.addrinfo->ai_addr, req.addrinfo->ai_addrlen);
  uv_freeaddrinfo(req.addrinfo);
  return 0;
}

int upstream_env_init(upstream_env *env, uv_loop_t *loop, const char *url,
                      stitch_diag *d) {
  struct http_parser_url u;
  http_parser_url_init(&u);
  size_t len = strlen(url);
  const unsigned need = 1u << UF_SCHEMA | 1u << UF_HOST;
  const unsigned extra = 1u << UF_QUERY | 1u << UF_FRAGMENT | 1u << UF_USERINFO;
  env->loop = loop;
  if (len > 255 || http_parser_parse_url(url, len, 0, &u) != 0 ||
      (u.field_set & need) != need || (u.field_set & extra) != 0 ||
      u.field_data[UF_SCHEMA].len != 4 ||
      strncasecmp(url + u.field_data[UF_SCHEMA].off, "http", 4) != 0 ||
      ((u.field_set & 1u << UF_PATH) &&
       (u.field_data[UF_PATH].len != 1 ||
        url[u.field_data[UF_PATH].off] != '/'))) {
    snprintf(d->msg, sizeof(d->msg), "--engine '%.200s': not http://host:port",
             url);
    return STITCH_EINVAL;
  }
  char host[256];
  memcpy(host, url + u.field_data[UF_HOST].off, u.field_data[UF_HOST].len);
  host[u.field_data[UF_HOST].len] = 0;
  int port = u.field_set & 1u << UF_PORT ? u.port : 80;
  int rc = upstream_resolve(loop, host, port, &env->addr);
  if (rc != 0) {
    snprintf(d->msg, sizeof(d->msg), "--engine '%.200s': %s", url,
             uv_strerror(rc));
    return STITCH_ENOTFOUND;
  }
  snprintf(env->host, sizeof(env->host),
           strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
  return 0;
}
