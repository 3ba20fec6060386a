/* http_msg.h: the pieces of an HTTP message the sidecar keeps: bounded
 * buffers and header lists, filled from http-parser's callbacks.
 *
 * Every buffer gets its cap when it is made and grows only with the bytes
 * added, so a peer never makes us allocate what it has not sent. */
#ifndef STITCHD_HTTP_MSG_H
#define STITCHD_HTTP_MSG_H

#include <stddef.h>
#include <stdint.h>

#define HTTP_HEADER_MAX (64u << 10) /* request or status line and headers */
#define HTTP_BODY_MAX (64u << 20)   /* one body, request or response */

typedef struct sbuf {
  char *p; /* NUL-terminated when not NULL; owned */
  size_t len, cap, max;
} sbuf;

/* An empty buffer that will hold at most MAX bytes. No allocation. */
void sb_init(sbuf *b, size_t max);
/* Frees the bytes; the buffer is empty again, with the same cap. */
void sb_free(sbuf *b);
/* Append; -1 past the cap or out of memory (the buffer is unchanged). */
int sb_add(sbuf *b, const void *d, size_t n);
int sb_printf(sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* S as a quoted JSON string. */
int sb_json_str(sbuf *b, const char *s);

/* "name\0value\0" pairs in arrival order. http-parser may give a name or a
 * value in several pieces; a value piece after a name piece starts the
 * value, a name piece after a value piece the next header. */
typedef struct hdrs {
  sbuf all;
  int in_value;
} hdrs;

/* 0; STITCH_EFORMAT for a blank in the name; STITCH_ENOMEM past the cap
 * or out of memory. */
int hdr_field(hdrs *h, const char *at, size_t n);
/* CR and LF in a value (a folded line) become blanks. 0; STITCH_EFORMAT
 * for any other control character (NUL among them: the list is
 * NUL-separated); STITCH_ENOMEM past the cap or out of memory. */
int hdr_value(hdrs *h, const char *at, size_t n);
/* After the last header (on_headers_complete). */
int hdr_end(hdrs *h);
/* Walks the pairs: *pos starts at 0; 0 at the end. */
int hdr_next(const hdrs *h, size_t *pos, const char **k, const char **v);
/* The first value of NAME (any case), or NULL. */
const char *hdr_get(const hdrs *h, const char *name);
/* Headers that belong to one connection, not to the message (RFC 9110
 * 7.6.1), those the sidecar sets itself, and every X-Stitch-* one (any
 * case: they are the sidecar's own, in either direction): never relayed. */
int hdr_hop_by_hop(const char *name);
/* Most names one message's Connection headers may list; more is refused,
 * so that matching them against the headers stays linear. */
#define HDR_CONN_TOKENS_MAX 32
/* Appends "name: value\r\n" for each header of H that is relayed: not
 * hdr_hop_by_hop (but Content-Length with KEEP_LENGTH), and not named in a
 * Connection header (RFC 9110 7.6.1: the sender lists there the headers
 * meant for the next hop only). 0; STITCH_ELIMIT when Connection lists
 * more than HDR_CONN_TOKENS_MAX names; STITCH_ENOMEM past OUT's cap or out
 * of memory. */
int hdr_relay(const hdrs *h, int keep_length, sbuf *out);
/* Whether H's Connection headers list NAME (any case); 0 past the cap. */
int hdr_conn_named(const hdrs *h, const char *name);
/* A decimal u64 with optional blanks around it; -1 if it is not one. */
int hdr_u64(const char *s, uint64_t *out);

#endif
