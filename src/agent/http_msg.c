/* http_msg.c: the pieces of an HTTP message the sidecar keeps
 * (http_msg.h). */
#define _GNU_SOURCE
#include "http_msg.h"

#include "stitch/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- Bounded buffers ----------------------------------------------------- */

void sb_init(sbuf *b, size_t max) {
  memset(b, 0, sizeof(*b));
  b->max = max;
}

void sb_free(sbuf *b) {
  free(b->p);
  sb_init(b, b->max);
}

int sb_add(sbuf *b, const void *d, size_t n) {
  if (n > b->max - b->len)
    return -1;
  if (b->len + n + 1 > b->cap) {
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->len + n + 1)
      nc *= 2;
    if (nc > b->max + 1)
      nc = b->max + 1;
    char *np = realloc(b->p, nc);
    if (np == NULL)
      return -1;
    b->p = np;
    b->cap = nc;
  }
  if (n > 0)
    memcpy(b->p + b->len, d, n);
  b->len += n;
  b->p[b->len] = 0;
  return 0;
}

int sb_printf(sbuf *b, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof(small), fmt, ap);
  va_end(ap);
  if (n < 0)
    return -1;
  if ((size_t)n < sizeof(small))
    return sb_add(b, small, (size_t)n);
  char *big = malloc((size_t)n + 1);
  if (big == NULL)
    return -1;
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  int rc = sb_add(b, big, (size_t)n);
  free(big);
  return rc;
}

int sb_json_str(sbuf *b, const char *s) {
  int rc = sb_add(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p && rc == 0; p++)
    if (*p == '"' || *p == '\\')
      rc = sb_printf(b, "\\%c", *p);
    else if (*p < 0x20)
      rc = sb_printf(b, "\\u%04x", *p);
    else
      rc = sb_add(b, p, 1);
  return rc ? rc : sb_add(b, "\"", 1);
}

/* ---- Headers as http-parser gives them ----------------------------------- */

int hdr_field(hdrs *h, const char *at, size_t n) {
  /* http-parser (unless built strict) takes blanks in a name, and frames
   * "Transfer-Encoding : chunked" by it: relayed as it came, the engine
   * could frame the body otherwise (RFC 9112 5.1: a 400). */
  if (memchr(at, ' ', n) != NULL || memchr(at, '\t', n) != NULL)
    return STITCH_EFORMAT;
  if (h->in_value && sb_add(&h->all, "", 1) != 0)
    return STITCH_ENOMEM;
  h->in_value = 0;
  return sb_add(&h->all, at, n) ? STITCH_ENOMEM : 0;
}

int hdr_value(hdrs *h, const char *at, size_t n) {
  /* http-parser checks every byte of a value but its first: a NUL there
   * would split the pair and shift every name and value after it. */
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)at[i];
    if ((ch < 0x20 && ch != '\t' && ch != '\r' && ch != '\n') || ch == 0x7f)
      return STITCH_EFORMAT;
  }
  if (!h->in_value && sb_add(&h->all, "", 1) != 0)
    return STITCH_ENOMEM;
  h->in_value = 1;
  size_t from = h->all.len;
  if (sb_add(&h->all, at, n) != 0)
    return STITCH_ENOMEM;
  /* A folded value (obs-fold) keeps its CR LF: made blanks here, so that a
   * relayed header stays one line. */
  for (char *p = h->all.p + from; p < h->all.p + h->all.len; p++)
    if (*p == '\r' || *p == '\n')
      *p = ' ';
  return 0;
}

int hdr_end(hdrs *h) {
  if (h->in_value && sb_add(&h->all, "", 1) != 0)
    return -1;
  h->in_value = 0;
  return 0;
}

int hdr_next(const hdrs *h, size_t *pos, const char **k, const char **v) {
  size_t len = h->all.len;
  if (*pos >= len)
    return 0;
  *k = h->all.p + *pos;
  size_t kl = strnlen(*k, len - *pos);
  if (*pos + kl + 1 >= len)
    return 0;
  *v = *k + kl + 1;
  *pos += kl + 1 + strnlen(*v, len - *pos - kl - 1) + 1;
  return 1;
}

const char *hdr_get(const hdrs *h, const char *name) {
  size_t pos = 0;
  const char *k, *v;
  while (hdr_next(h, &pos, &k, &v))
    if (strcasecmp(k, name) == 0)
      return v;
  return NULL;
}

int hdr_hop_by_hop(const char *k) {
  static const char *const names[] = {"connection",
                                      "keep-alive",
                                      "proxy-connection",
                                      "transfer-encoding",
                                      "te",
                                      "trailer",
                                      "upgrade",
                                      "content-length",
                                      "expect"};
  if (strncasecmp(k, "x-stitch-", 9) == 0)
    return 1;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcasecmp(k, names[i]) == 0)
      return 1;
  return 0;
}

typedef struct conn_token {
  const char *p;
  size_t n;
} conn_token;

/* The names listed by every Connection header of H (comma-separated, with
 * optional blanks; empty elements skipped). -1 past HDR_CONN_TOKENS_MAX. */
static int conn_tokens(const hdrs *h, conn_token *t, size_t *nt) {
  size_t pos = 0;
  const char *k, *v;
  *nt = 0;
  while (hdr_next(h, &pos, &k, &v)) {
    if (strcasecmp(k, "connection") != 0)
      continue;
    for (const char *s = v; *s;) {
      s += strspn(s, " \t,");
      size_t n = strcspn(s, " \t,");
      if (n == 0)
        continue; /* at the end */
      if (*nt == HDR_CONN_TOKENS_MAX)
        return -1;
      t[(*nt)++] = (conn_token){s, n};
      s += n;
    }
  }
  return 0;
}

int hdr_conn_named(const hdrs *h, const char *name) {
  conn_token t[HDR_CONN_TOKENS_MAX];
  size_t nt, nl = strlen(name);
  if (conn_tokens(h, t, &nt) != 0)
    return 0;
  for (size_t i = 0; i < nt; i++)
    if (t[i].n == nl && strncasecmp(t[i].p, name, nl) == 0)
      return 1;
  return 0;
}

int hdr_relay(const hdrs *h, int keep_length, sbuf *out) {
  conn_token t[HDR_CONN_TOKENS_MAX];
  size_t nt;
  if (conn_tokens(h, t, &nt) != 0)
    return STITCH_ELIMIT;
  size_t pos = 0;
  const char *k, *v;
  while (hdr_next(h, &pos, &k, &v)) {
    if (hdr_hop_by_hop(k) && !(keep_length && !strcasecmp(k, "content-length")))
      continue;
    size_t kl = strlen(k), i = 0;
    while (i < nt && !(t[i].n == kl && strncasecmp(t[i].p, k, kl) == 0))
      i++;
    if (i < nt)
      continue;
    if (sb_printf(out, "%s: %s\r\n", k, v) != 0)
      return STITCH_ENOMEM;
  }
  return 0;
}

int hdr_u64(const char *s, uint64_t *out) {
  s += strspn(s, " \t");
  uint64_t v = 0;
  int digits = 0;
  for (; *s >= '0' && *s <= '9'; s++, digits++) {
    if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
      return -1;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  s += strspn(s, " \t");
  if (digits == 0 || *s != 0)
    return -1;
  *out = v;
  return 0;
}
