/* http_request.c: one HTTP/1.1 request from bytes (http_request.h),
 * parsed with http-parser. */
#define _GNU_SOURCE
#include "http_request.h"

#include "stitch/error.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int fail(hreq *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(hreq *r, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->err_buf, sizeof(r->err_buf), fmt, ap);
  va_end(ap);
  r->err_status = status;
  r->err_msg = r->err_buf;
  return -1;
}

/* The request line and headers share one cap. */
static int head_cap(hreq *r, size_t n) {
  if (r->url.len + r->h.all.len + n <= HTTP_HEADER_MAX)
    return 0;
  return fail(r, 431, "request line and headers over %u KiB",
              HTTP_HEADER_MAX >> 10);
}

static int on_url(http_parser *p, const char *at, size_t n) {
  hreq *r = p->data;
  if (head_cap(r, n) != 0)
    return -1;
  return sb_add(&r->url, at, n) ? fail(r, 500, "out of memory") : 0;
}

/* Trailer fields (after a chunked body) come through the same callbacks:
 * they are dropped, not merged into the head, where they could set what
 * the head did not (an X-Stitch-Min-Version, a second Host). The body
 * goes on with a Content-Length, so there is nowhere to relay them. */
static int on_field(http_parser *p, const char *at, size_t n) {
  hreq *r = p->data;
  if (r->head)
    return 0;
  if (head_cap(r, n + 1) != 0)
    return -1;
  int rc = hdr_field(&r->h, at, n);
  if (rc == STITCH_EFORMAT)
    return fail(r, 400, "a header name holds a blank");
  return rc ? fail(r, 500, "out of memory") : 0;
}

static int on_value(http_parser *p, const char *at, size_t n) {
  hreq *r = p->data;
  if (r->head)
    return 0;
  if (head_cap(r, n + 1) != 0)
    return -1;
  int rc = hdr_value(&r->h, at, n);
  if (rc == STITCH_EFORMAT)
    return fail(r, 400, "a header value holds a control character");
  return rc ? fail(r, 500, "out of memory") : 0;
}

static int on_headers(http_parser *p) {
  hreq *r = p->data;
  if (head_cap(r, 1) != 0)
    return -1;
  if (hdr_end(&r->h) != 0)
    return fail(r, 500, "out of memory");
  int chunked = (p->flags & F_CHUNKED) != 0;
  /* content_length is ULLONG_MAX when the request has no Content-Length. */
  int sized = !chunked && p->content_length != ULLONG_MAX;
  if (sized && p->content_length > HTTP_BODY_MAX)
    return fail(r, 413, "request body over %u MiB", HTTP_BODY_MAX >> 20);
  const char *expect = hdr_get(&r->h, "expect");
  if (expect != NULL && strcasecmp(expect, "100-continue") != 0)
    return fail(r, 417, "only 'Expect: 100-continue' is understood");
  r->want_continue =
      expect != NULL && (chunked || (sized && p->content_length > 0));
  r->head = 1;
  http_parser_pause(p, 1); /* HREQ_HEAD; the same byte is parsed again */
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t n) {
  hreq *r = p->data;
  if (sb_add(&r->body, at, n) == 0)
    return 0;
  return fail(r, 413, "request body over %u MiB", HTTP_BODY_MAX >> 20);
}

static int on_complete(http_parser *p) {
  hreq *r = p->data;
  r->complete = 1;
  http_parser_pause(p, 1); /* one request at a time */
  return 0;
}

static const http_parser_settings settings = {
    .on_url = on_url,
    .on_header_field = on_field,
    .on_header_value = on_value,
    .on_headers_complete = on_headers,
    .on_body = on_body,
    .on_message_complete = on_complete};

void hreq_init(hreq *r) {
  memset(r, 0, sizeof(*r));
  sb_init(&r->url, HTTP_HEADER_MAX);
  sb_init(&r->body, HTTP_BODY_MAX);
  sb_init(&r->h.all, HTTP_HEADER_MAX);
  http_parser_init(&r->p, HTTP_REQUEST);
  r->p.data = r;
}

void hreq_next(hreq *r) {
  sb_free(&r->url);
  sb_free(&r->body);
  sb_free(&r->h.all);
  r->h.in_value = 0;
  r->head = r->complete = r->want_continue = 0;
  http_parser_pause(&r->p, 0);
}

void hreq_free(hreq *r) {
  sb_free(&r->url);
  sb_free(&r->body);
  sb_free(&r->h.all);
}

hreq_event hreq_feed(hreq *r, const char *at, size_t n, size_t *used) {
  *used = 0;
  if (r->err_status != 0)
    return HREQ_ERROR;
  if (r->complete)
    return HREQ_DONE;
  if (n == 0)
    return HREQ_MORE; /* to http-parser, 0 bytes would mean the end */
  int had_head = r->head;
  if (HTTP_PARSER_ERRNO(&r->p) == HPE_PAUSED) /* after HREQ_HEAD */
    http_parser_pause(&r->p, 0);
  size_t k = http_parser_execute(&r->p, &settings, at, n);
  *used = k < n ? k : n;
  enum http_errno e = HTTP_PARSER_ERRNO(&r->p);
  if (r->err_status != 0)
    return HREQ_ERROR;
  if (r->p.upgrade) {
    fail(r, 501, "protocol upgrades are not supported");
    return HREQ_ERROR;
  }
  if (r->complete)
    return HREQ_DONE;
  if (e != HPE_OK && e != HPE_PAUSED) {
    fail(r, 400, "malformed request: %s", http_errno_description(e));
    return HREQ_ERROR;
  }
  return r->head && !had_head ? HREQ_HEAD : HREQ_MORE;
}

int hreq_keep_alive(const hreq *r) { return http_should_keep_alive(&r->p); }

int hreq_upstream_head(const hreq *r, const char *host, sbuf *out) {
  unsigned m = r->p.method;
  if (sb_printf(out, "%s %s HTTP/1.1\r\n",
                http_method_str((enum http_method)m),
                r->url.p ? r->url.p : "/") != 0)
    return STITCH_ENOMEM;
  int rc = hdr_relay(&r->h, 0, out);
  if (rc != 0)
    return rc;
  /* A request always has a Host: the client's, unless it sent none or
   * named it in Connection (so it was not relayed). */
  if ((hdr_get(&r->h, "host") == NULL || hdr_conn_named(&r->h, "host")) &&
      sb_printf(out, "Host: %s\r\n", host) != 0)
    return STITCH_ENOMEM;
  if ((r->body.len > 0 || m == HTTP_POST || m == HTTP_PUT ||
       m == HTTP_PATCH) &&
      sb_printf(out, "Content-Length: %zu\r\n", r->body.len) != 0)
    return STITCH_ENOMEM;
  if (sb_add(out, "Connection: close\r\n\r\n", 21) != 0)
    return STITCH_ENOMEM;
  return 0;
}
