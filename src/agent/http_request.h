/* http_request.h: one HTTP/1.1 request read from bytes, without sockets,
 * and the head it becomes on its way to the engine: the sidecar's request
 * path (sidecar.c), pure so that tests/fuzz/fuzz_http_request.c can drive
 * it from memory.
 *
 * hreq_feed takes bytes as they come and stops twice per request: after
 * its head (so that the caller can answer Expect: 100-continue and start
 * the body's deadline) and after its end (one request at a time: what
 * follows waits for hreq_next). Every buffer has its cap when it is made
 * and grows only with bytes fed: request line and headers HTTP_HEADER_MAX
 * together, the body HTTP_BODY_MAX. */
#ifndef STITCHD_HTTP_REQUEST_H
#define STITCHD_HTTP_REQUEST_H

#include "http_msg.h"

#include <http_parser.h>

typedef enum hreq_event {
  HREQ_MORE,  /* every byte was taken; the request goes on */
  HREQ_HEAD,  /* its head is whole (once per request): feed on */
  HREQ_DONE,  /* it is whole: nothing more is taken until hreq_next */
  HREQ_ERROR  /* err_status and err_msg say why; the connection must
                 close (nothing more is taken) */
} hreq_event;

typedef struct hreq {
  /* For the caller to read: the method, version, flags and upgrade are
   * http-parser's (p.method, p.http_major, ...). */
  http_parser p;
  sbuf url, body; /* the body de-chunked */
  hdrs h;         /* the head's fields (a chunked body's trailer fields
                     are dropped) */
  int head, complete;
  int want_continue; /* the client waits for 100 Continue before its body */
  int err_status;    /* 400, 413, 417, 431, 500 or 501 after HREQ_ERROR */
  const char *err_msg;
  char err_buf[160];
} hreq;

/* An empty request; allocates nothing. */
void hreq_init(hreq *r);
/* After HREQ_DONE: the next request on the same connection. */
void hreq_next(hreq *r);
/* Frees the buffers; R may be fed again only after hreq_init. */
void hreq_free(hreq *r);
/* Parses AT[0..N) up to the next event; *USED is the bytes taken (the
 * rest is fed again, with what comes after it). */
hreq_event hreq_feed(hreq *r, const char *at, size_t n, size_t *used);
/* After HREQ_DONE: whether the connection may carry another request. */
int hreq_keep_alive(const hreq *r);
/* Appends the head the request goes to the engine with: its method and
 * target, its headers less those not relayed (hdr_relay), Host (HOST when
 * the client sent none or named it in Connection), Content-Length (our framing: the body is sent
 * whole) and Connection: close. 0; STITCH_ELIMIT (Connection lists too
 * many names); STITCH_ENOMEM (past OUT's cap or out of memory). */
int hreq_upstream_head(const hreq *r, const char *host, sbuf *out);

#endif
