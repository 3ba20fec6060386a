/* cmd_admit.c: who may join a swarm (docs/security.md): `stitch admit`
 * signs a member's ticket, `stitch revoke` a policy that shuts it out. */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

/* "30d", "12h", "90m", "3600s" or plain seconds, as seconds. */
static int parse_duration(const char *s, uint64_t *out) {
  size_t n = strlen(s);
  uint64_t unit = 1;
  char digits[32];
  if (n == 0 || n >= sizeof(digits))
    return -1;
  memcpy(digits, s, n + 1);
  switch (digits[n - 1]) {
  case 'd':
    unit = 86400;
    break;
  case 'h':
    unit = 3600;
    break;
  case 'm':
    unit = 60;
    break;
  case 's':
    unit = 1;
    break;
  default:
    n++; /* no suffix: seconds */
  }
  digits[n - 1] = 0;
  uint64_t v = 0;
  if (digits[0] == 0)
    return -1;
  for (const char *p = digits; *p; p++) {
    if (*p < '0' || *p > '9' || v > UINT32_MAX)
      return -1; /* 136 years of seconds is plenty */
    v = v * 10 + (uint64_t)(*p - '0');
  }
  *out = v * unit;
  return 0;
}

int cmd_admit(int argc, char **argv) {
  flag fl[] = {{"--key", 1, NULL},
               {"--node", 1, NULL},
               {"--out", 1, NULL},
               {"--expires", 1, NULL},
               {"--role", 1, NULL}};
  const char *pos[1];
  int n = cli_parse_args(argc, argv, pos, 0, fl, 5);
  if (n != 0 || !fl[0].value || !fl[1].value || !fl[2].value)
    return n < 0 ? 2
                 : cli_usage_error("stitch admit --key PREFIX.key --node "
                                   "NODE.pub --out TICKET [--expires 30d] "
                                   "[--role node|seed]");
  stitch_ticket t;
  memset(&t, 0, sizeof(t));
  t.role = STITCH_ROLE_NODE;
  if (fl[4].value && !strcmp(fl[4].value, "seed"))
    t.role = STITCH_ROLE_SEED;
  else if (fl[4].value && strcmp(fl[4].value, "node"))
    return cli_usage_error("--role: '%s' is not node or seed", fl[4].value);
  struct timeval tv;
  gettimeofday(&tv, NULL);
  t.issued_s = (uint64_t)tv.tv_sec;
  uint64_t life = 0;
  if (fl[3].value && parse_duration(fl[3].value, &life) != 0)
    return cli_usage_error("--expires: '%s' is not a duration (30d, 12h, "
                           "90m, 3600s)",
                           fl[3].value);
  t.expires_s = life ? t.issued_s + life : 0;
  stitch_seckey sk;
  stitch_diag d = {{0}};
  int rc = stitch_seckey_read(fl[0].value, &sk, &t.swarm, &d);
  if (rc == 0)
    rc = stitch_pubkey_read(fl[1].value, &t.node, &d);
  uint8_t buf[STITCH_TICKET_BYTES];
  if (rc == 0)
    rc = stitch_ticket_sign(&t, &sk, buf, &d);
  memset(&sk, 0, sizeof(sk));
  if (rc == 0)
    rc = stitch_ticket_write(fl[2].value, buf, &d);
  if (rc != 0)
    return cli_fail(rc, &d);
  char hex[65];
  stitch_pubkey_hex(&t.node, hex);
  if (t.expires_s)
    printf("%s: %s %s, expires in %" PRIu64 " s\n", fl[2].value,
           t.role == STITCH_ROLE_SEED ? "seed" : "node", hex, life);
  else
    printf("%s: %s %s, never expires\n", fl[2].value,
           t.role == STITCH_ROLE_SEED ? "seed" : "node", hex);
  return 0;
}

int cmd_revoke(int argc, char **argv) {
  flag fl[] = {{"--key", 1, NULL}, {"--store", 1, NULL}, {"--node", 1, NULL}};
  const char *pos[1];
  int n = cli_parse_args(argc, argv, pos, 0, fl, 3);
  if (n != 0 || !fl[0].value || !fl[1].value || !fl[2].value)
    return n < 0 ? 2
                 : cli_usage_error("stitch revoke --key PREFIX.key --store "
                                   "DIR --node NODE.pub");
  stitch_seckey sk;
  stitch_pubkey node;
  stitch_diag d = {{0}};
  int changed = 0;
  int rc = stitch_seckey_read(fl[0].value, &sk, NULL, &d);
  if (rc == 0)
    rc = stitch_pubkey_read(fl[2].value, &node, &d);
  if (rc == 0)
    rc = stitch_policy_update(fl[1].value, &sk, &node, -1, &changed, &d);
  memset(&sk, 0, sizeof(sk));
  if (rc != 0)
    return cli_fail(rc, &d);
  char hex[65];
  stitch_pubkey_hex(&node, hex);
  printf("%s: %s %s\n", fl[1].value, changed ? "revoked" : "already revoked",
         hex);
  return 0;
}
