/* scope.c: an address's scope from its text (scope.h). inet_pton parses
 * the literals strictly (four decimal parts for v4: "127.1" and
 * "0x7f.0.0.1" are names here, and a real driver never looks a punch's
 * address up; docs/security.md "Hole punching"). */
#define _POSIX_C_SOURCE 200809L /* inet_pton */
#include "swarm/scope.h"

#include "stitch/swarm.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

static addr_scope scope_v4(const uint8_t a[4]) {
  if (a[0] == 0 || a[0] == 127 || (a[0] == 169 && a[1] == 254) || a[0] >= 224)
    return SCOPE_LOCAL; /* this network, loopback, link-local, multicast,
                           240/4 and the broadcast */
  if (a[0] == 10 || (a[0] == 172 && (a[1] & 0xf0) == 16) ||
      (a[0] == 192 && a[1] == 168) || (a[0] == 100 && (a[1] & 0xc0) == 64))
    return SCOPE_PRIVATE;
  return SCOPE_PUBLIC;
}

static addr_scope scope_v6(const uint8_t a[16]) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static const uint8_t zero[12];
  if (memcmp(a, mapped, 12) == 0)
    return scope_v4(a + 12);
  if (memcmp(a, zero, 12) == 0)
    return SCOPE_LOCAL; /* ::, ::1, and the v4-compatible rest */
  if (a[0] == 0xff || (a[0] == 0xfe && (a[1] & 0xc0) == 0x80))
    return SCOPE_LOCAL; /* multicast, link-local */
  if ((a[0] & 0xfe) == 0xfc || (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0))
    return SCOPE_PRIVATE; /* unique local, site-local */
  return SCOPE_PUBLIC;
}

addr_scope scope_of(const char *addr) {
  char host[STITCH_SWARM_ADDR_MAX];
  size_t hl;
  uint8_t ip[16];
  if (addr[0] == '[') {
    const char *end = strchr(addr, ']');
    if (end == NULL)
      return SCOPE_LOCAL;
    hl = (size_t)(end - addr - 1);
    if (hl == 0 || hl >= sizeof(host) || memchr(addr + 1, '%', hl) != NULL)
      return SCOPE_LOCAL; /* empty, or zoned: link-local by its nature */
    memcpy(host, addr + 1, hl);
    host[hl] = 0;
    return inet_pton(AF_INET6, host, ip) == 1 ? scope_v6(ip) : SCOPE_LOCAL;
  }
  const char *colon = strrchr(addr, ':');
  hl = colon != NULL ? (size_t)(colon - addr) : strlen(addr);
  if (hl == 0 || hl >= sizeof(host) || memchr(addr, ':', hl) != NULL)
    return SCOPE_LOCAL; /* empty, or a v6 without brackets */
  memcpy(host, addr, hl);
  host[hl] = 0;
  if (inet_pton(AF_INET, host, ip) == 1)
    return scope_v4(ip);
  if (hl > 0 && host[hl - 1] == '.')
    host[--hl] = 0; /* "localhost." is localhost */
  if (strcasecmp(host, "localhost") == 0 ||
      (hl >= 10 && strcasecmp(host + hl - 10, ".localhost") == 0))
    return SCOPE_LOCAL;
  return SCOPE_NAME;
}

int scope_punch_ok(const char *target, const char *relay) {
  switch (scope_of(target)) {
  case SCOPE_PUBLIC:
    return 1;
  case SCOPE_PRIVATE:
    return scope_of(relay) == SCOPE_PRIVATE;
  case SCOPE_NAME:
    return scope_of(relay) == SCOPE_NAME;
  default:
    return 0;
  }
}

const char *scope_name(addr_scope sc) {
  static const char *const names[] = {"local", "private", "public", "name"};
  return (unsigned)sc < 4 ? names[sc] : "?";
}
