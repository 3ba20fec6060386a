/* fuzz_http_request.c: the sidecar's request path on arbitrary bytes
 * (src/agent/http_request.c over http-parser, and the head a request goes
 * to the engine with: hdr_relay in http_msg.c), with no sockets.
 *
 * Input: byte 0's low 4 bits give K, the number of split bytes that
 * follow; the rest is what a client sends on one connection. It is fed to
 * one hreq in pieces of split[i % K] + 1 bytes (all at once when K is 0),
 * as sidecar.c does: what a call did not take is fed again with the next
 * piece; after HREQ_DONE the request is checked and hreq_next reads the
 * next one (at most 64, pipelined).
 *
 * Checks (any violation abort()s):
 *  - each call takes at most what it is given, and a call that takes
 *    nothing ends with an event (no spinning);
 *  - an error is one of the statuses sidecar.c answers, with a one-line
 *    message, and stays (nothing more is taken);
 *  - a whole request keeps within its caps (line and headers 64 KiB, body
 *    64 MiB);
 *  - its head to the engine is built into a buffer of twice the request's
 *    head plus 1 KiB (sidecar.c's cap) or refused for too many Connection
 *    names, and then parses back as a request with the same method and
 *    target; it holds no X-Stitch-* field, no hop-by-hop field but one
 *    "Connection: close" and at most one Content-Length (the body's
 *    length), no field a Connection header of the request named, and every
 *    other field of the request, in order, byte for byte. */
#define _GNU_SOURCE
#include "http_request.h"

#include "stitch/error.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "fuzz_http_request: check failed: %s (line %d)\n", #c,   \
              __LINE__);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

/* ---- The head sent to the engine, parsed back ---------------------------- */

typedef struct reparsed {
  sbuf url;
  hdrs h;
  int done;
} reparsed;

static int rp_url(http_parser *p, const char *at, size_t n) {
  reparsed *r = p->data;
  return sb_add(&r->url, at, n);
}
static int rp_field(http_parser *p, const char *at, size_t n) {
  reparsed *r = p->data;
  return hdr_field(&r->h, at, n);
}
static int rp_value(http_parser *p, const char *at, size_t n) {
  reparsed *r = p->data;
  return hdr_value(&r->h, at, n);
}
static int rp_headers(http_parser *p) {
  reparsed *r = p->data;
  r->done = 1;
  return hdr_end(&r->h) ? -1 : 1; /* 1: skip the body; the head is all */
}

static const http_parser_settings rp_settings = {
    .on_url = rp_url,
    .on_header_field = rp_field,
    .on_header_value = rp_value,
    .on_headers_complete = rp_headers};

/* Whether NAME is among the names the request's Connection headers list,
 * worked out here independently of hdr_relay. */
static int named_in_connection(const hdrs *h, const char *name) {
  size_t pos = 0, nl = strlen(name);
  const char *k, *v;
  while (hdr_next(h, &pos, &k, &v)) {
    if (strcasecmp(k, "connection") != 0)
      continue;
    for (const char *s = v; *s;) {
      size_t n = strcspn(s, " \t,");
      if (n == nl && strncasecmp(s, name, n) == 0)
        return 1;
      s += n;
      s += strspn(s, " \t,");
    }
  }
  return 0;
}

/* Values equal but for blanks at either end (a value's leading blanks are
 * not part of it, and a folded line's become blanks at the end). */
static int same_value(const char *a, const char *b) {
  a += strspn(a, " \t");
  b += strspn(b, " \t");
  size_t la = strlen(a), lb = strlen(b);
  while (la > 0 && (a[la - 1] == ' ' || a[la - 1] == '\t'))
    la--;
  while (lb > 0 && (b[lb - 1] == ' ' || b[lb - 1] == '\t'))
    lb--;
  return la == lb && memcmp(a, b, la) == 0;
}

static size_t reparse(http_parser *p, reparsed *r, const sbuf *out,
                      int lenient) {
  r->url.len = r->h.all.len = 0;
  r->h.in_value = r->done = 0;
  http_parser_init(p, HTTP_REQUEST);
  p->lenient_http_headers = (unsigned)lenient;
  p->data = r;
  return http_parser_execute(p, &rp_settings, out->p, out->len);
}

/* http-parser 2.9 marks a message as having Transfer-Encoding when a
 * field's name only starts with it ("Transfer-Encodingx"), and then
 * refuses our Content-Length beside it (HPE_UNEXPECTED_CONTENT_LENGTH):
 * found by the campaign (min-te-prefixed-name). Such a field is relayed
 * as it came; the reparse is then lenient, for that check alone. */
static int te_prefixed(const hdrs *h) {
  size_t pos = 0;
  const char *k, *v;
  while (hdr_next(h, &pos, &k, &v))
    if (strncasecmp(k, "transfer-encoding", 17) == 0 && k[17] != 0)
      return 1;
  return 0;
}

static void check_upstream(const hreq *q) {
  sbuf out;
  sb_init(&out, 2 * (size_t)HTTP_HEADER_MAX + 1024);
  int rc = hreq_upstream_head(q, "engine:8001", &out);
  if (rc == STITCH_ELIMIT) {
    sb_free(&out);
    return;
  }
  CHECK(rc == 0);
  CHECK(out.len >= 4 && memcmp(out.p + out.len - 4, "\r\n\r\n", 4) == 0);

  reparsed r;
  memset(&r, 0, sizeof(r));
  sb_init(&r.url, out.len);
  sb_init(&r.h.all, 2 * out.len);
  http_parser p;
  size_t n = reparse(&p, &r, &out, 0);
  if (HTTP_PARSER_ERRNO(&p) == HPE_UNEXPECTED_CONTENT_LENGTH &&
      te_prefixed(&q->h)) /* http-parser's quirk (above), not ours */
    n = reparse(&p, &r, &out, 1);
  CHECK(r.done && HTTP_PARSER_ERRNO(&p) == HPE_OK && n == out.len);
  CHECK(p.method == q->p.method && !p.upgrade);
  CHECK(r.url.len == q->url.len &&
        (q->url.len == 0 || memcmp(r.url.p, q->url.p, q->url.len) == 0));

  /* Walk the relayed fields against the request's, in order. */
  size_t po = 0, pi = 0;
  const char *ko, *vo, *ki, *vi;
  int conn = 0, length = 0, host = 0;
  while (hdr_next(&r.h, &po, &ko, &vo)) {
    CHECK(strncasecmp(ko, "x-stitch-", 9) != 0);
    if (strcasecmp(ko, "connection") == 0) {
      CHECK(strcmp(vo, "close") == 0 && conn++ == 0);
      continue;
    }
    if (strcasecmp(ko, "content-length") == 0) {
      char want[32];
      snprintf(want, sizeof(want), "%zu", q->body.len);
      CHECK(strcmp(vo, want) == 0 && length++ == 0);
      continue;
    }
    CHECK(!hdr_hop_by_hop(ko));
    if (strcasecmp(ko, "host") == 0 &&
        (hdr_get(&q->h, "host") == NULL ||
         named_in_connection(&q->h, "host"))) { /* ours */
      CHECK(strcmp(vo, "engine:8001") == 0 && host++ == 0);
      continue;
    }
    CHECK(!named_in_connection(&q->h, ko));
    /* The next field of the request that is relayed must be this one;
     * those before it were dropped, each for a reason. */
    int found = 0;
    while (!found && hdr_next(&q->h, &pi, &ki, &vi)) {
      if (strcmp(ki, ko) == 0) {
        CHECK(same_value(vi, vo));
        found = 1;
      } else {
        CHECK(hdr_hop_by_hop(ki) || named_in_connection(&q->h, ki));
      }
    }
    CHECK(found);
  }
  while (hdr_next(&q->h, &pi, &ki, &vi)) /* the rest were all dropped */
    CHECK(hdr_hop_by_hop(ki) || named_in_connection(&q->h, ki) ||
          strcasecmp(ki, "host") == 0);
  CHECK(conn == 1);
  CHECK(hdr_get(&r.h, "host") != NULL); /* HTTP/1.1 needs one */
  sb_free(&r.url);
  sb_free(&r.h.all);
  sb_free(&out);
}

/* ---- The request reader -------------------------------------------------- */

static void check_error(const hreq *q) {
  static const int ok[] = {400, 413, 417, 431, 500, 501};
  int known = 0;
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
    known |= q->err_status == ok[i];
  CHECK(known && q->err_msg != NULL && q->err_msg[0] != 0);
  CHECK(strchr(q->err_msg, '\n') == NULL && strchr(q->err_msg, '\r') == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  size_t k = data[0] & 15;
  if (size < 1 + k)
    return 0;
  const uint8_t *split = data + 1;
  const char *in = (const char *)data + 1 + k;
  size_t len = size - 1 - k;

  hreq q;
  hreq_init(&q);
  /* What has arrived and is not taken yet: sidecar.c's input buffer. */
  size_t from = 0, upto = 0, piece = 0;
  int requests = 0;
  for (;;) {
    if (upto == len && from == upto)
      break;
    if (upto < len) { /* the next piece arrives */
      size_t step = k ? (size_t)split[piece++ % k] + 1 : len;
      upto = step < len - upto ? upto + step : len;
    }
    int progress = 1;
    while (progress) {
      size_t used;
      hreq_event ev = hreq_feed(&q, in + from, upto - from, &used);
      CHECK(used <= upto - from);
      from += used;
      progress = used > 0 && from < upto;
      if (ev == HREQ_ERROR) {
        check_error(&q);
        size_t again;
        CHECK(hreq_feed(&q, in + from, upto - from, &again) == HREQ_ERROR &&
              again == 0);
        goto out;
      }
      if (ev == HREQ_MORE) {
        CHECK(from == upto);
        progress = 0;
      } else if (ev == HREQ_HEAD) {
        CHECK(q.head && !q.complete);
        progress = from < upto;
      } else if (ev == HREQ_DONE) {
        CHECK(q.head && q.complete);
        CHECK(q.url.len + q.h.all.len <= HTTP_HEADER_MAX);
        CHECK(q.body.len <= HTTP_BODY_MAX);
        check_upstream(&q);
        size_t again;
        CHECK(hreq_feed(&q, in + from, upto - from, &again) == HREQ_DONE &&
              again == 0);
        if (++requests == 64 || !hreq_keep_alive(&q))
          goto out;
        hreq_next(&q);
        progress = from < upto;
      }
    }
    if (upto == len) /* nothing more arrives: what is left cannot move */
      break;
  }
out:
  hreq_free(&q);
  return 0;
}
