/* stitch-linkemu: a link emulator for netlab (docs/netlab.md), because the
 * kernel netlab runs on has no netem qdisc.
 *
 * Each emulated link is a pair of TUN (IP) or TAP (Ethernet) devices, one
 * at each end, each created inside the network namespace named for it. The
 * emulator is the wire between them: a packet read from end a is written
 * to end b after the a->b direction's delay, jitter, loss and rate, and
 * the other way round. A link so replaces a veth pair one for one, so
 * whatever a veth could be part of (a bridge port, an address, a tc qdisc
 * on its egress) a link end can be too.
 *
 * One thread, one epoll set: the devices, a timerfd armed for the earliest
 * due packet (absolute CLOCK_MONOTONIC, so no rounding to milliseconds),
 * and a signalfd for SIGINT/SIGTERM, on which it prints each direction's
 * counters and exits 0. Packets wait in one binary min-heap keyed on
 * (due time, arrival order).
 *
 * Per direction (docs/netlab.md has the numbers):
 * - delay: fixed one-way delay, 0 to 10 s;
 * - jitter: added to the delay, bounded by +-jitter_ms (which may not
 *   exceed delay_ms): uniform on [-J, +J], or normal with sigma J/2 cut at
 *   +-J (resampled, at most 8 tries, then 0);
 * - order: by default a direction is FIFO, as a real path is: a packet
 *   never leaves before the one ahead of it, so jitter delays later
 *   packets rather than reordering them. reorder=1 lets each packet keep
 *   its own sampled time (netem's behaviour), reordering as the jitter
 *   implies and no more;
 * - loss: each packet lost with probability loss_pct, from a xoshiro256**
 *   stream per direction seeded from --seed, the link and the direction,
 *   so a run is repeatable given the same packets; a lost packet takes no
 *   time on the link;
 * - rate: optional serialization at rate_mbit: a packet leaves the
 *   serializer len*8/rate after the previous one did, then takes the
 *   delay;
 * - queue: drop-tail at `limit` packets held in the direction (default
 *   1000, like a txqueuelen; at most 65536) or 8 MiB held, whichever comes
 *   first. Held counts everything not yet delivered, in flight included.
 *
 * Usage: stitch-linkemu [--seed N] [--config FILE] [--link SPEC]...
 * A SPEC (or a line of FILE) is key=value words:
 *   a=DEV[@NETNS] b=DEV[@NETNS] [mode=tun|tap] [PARAM=V]...
 * PARAM is delay_ms, jitter_ms, jitter (uniform|normal), loss_pct,
 * rate_mbit, limit, reorder (0|1): for both directions, or for one with the
 * prefix ab. or ba. (ab.delay_ms=20). NETNS is a name under /run/netns.
 * It prints "stitch-linkemu: ready: N links" on stdout once every device
 * exists and is up. A bad configuration is one line on stderr, exit 2.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define LE_MAX_LINKS 256          /* 512 devices: netlab needs at most ~100 */
#define LE_MAX_PKT 65536          /* one TUN/TAP read is one packet, < 64 KiB */
#define LE_BATCH 64               /* reads per device per wake, for fairness */
#define LE_DIR_BYTES (8u << 20)   /* bytes held per direction */
#define LE_MAX_LIMIT 65536u       /* packets held per direction, at most */
#define LE_LINE 1024              /* a config line, at most */
#define LE_LATE_BUCKETS 24        /* lateness: 1 us to 8 s in powers of two */

typedef struct {
  uint64_t delay_ns, jitter_ns, rate_bps;
  double loss;     /* probability, [0, 1] */
  uint32_t limit;  /* packets held */
  int normal, reorder;
} le_params;

typedef struct {
  le_params p;
  uint64_t in, lost, dropped, out, write_err;
  uint64_t last_due;   /* FIFO floor: the latest due time queued */
  uint64_t next_free;  /* rate: when the serializer is free again */
  uint32_t held;
  uint64_t held_bytes;
  uint64_t rng[4];
} le_dir;

typedef struct {
  char dev[2][IFNAMSIZ];
  char ns[2][64];
  int tap;
  int fd[2];
  le_dir d[2];  /* d[0] carries a->b (read at fd[0], written to fd[1]) */
} le_link;

typedef struct {
  uint64_t due, seq;
  uint16_t link;
  uint8_t dir;
  uint32_t len;
  unsigned char data[];
} le_pkt;

typedef struct {
  le_link *links;
  int nlinks;
  le_pkt **heap;
  size_t nheap, capheap;
  uint64_t seq;
  /* How late packets left against their due time: a count per power of
   * two of microseconds (0: under 1 us), for the exit's line */
  uint64_t late[LE_LATE_BUCKETS];
  unsigned char buf[LE_MAX_PKT];
} le_emu;

static void die_config(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("stitch-linkemu: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

static void die_sys(const char *what) {
  fprintf(stderr, "stitch-linkemu: %s: %s\n", what, strerror(errno));
  exit(1);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- Random numbers: xoshiro256**, seeded with splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
  uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return r;
}

/* Uniform on [0, 1). */
static double rng_unit(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* Jitter in ns, within [-J, +J]. */
static int64_t jitter_sample(le_dir *d) {
  double j = (double)d->p.jitter_ns;
  if (j <= 0) return 0;
  if (!d->p.normal) return (int64_t)((rng_unit(d->rng) * 2 - 1) * j);
  /* Box-Muller, sigma J/2; outside +-J (4.6 % of draws) is drawn again,
   * 8 tries at most (all 8 out: 2e-11), then no jitter. */
  for (int i = 0; i < 8; i++) {
    double u = rng_unit(d->rng), v = rng_unit(d->rng);
    double g = sqrt(-2 * log(1 - u)) * cos(2 * M_PI * v) * (j / 2);
    if (g >= -j && g <= j) return (int64_t)g;
  }
  return 0;
}

/* ---- The heap of packets waiting to be delivered ---- */

static int pkt_before(const le_pkt *x, const le_pkt *y) {
  return x->due < y->due || (x->due == y->due && x->seq < y->seq);
}

static void heap_push(le_emu *e, le_pkt *p) {
  size_t i = e->nheap++;
  while (i > 0) {  /* at most log2(capheap) steps */
    size_t up = (i - 1) / 2;
    if (!pkt_before(p, e->heap[up])) break;
    e->heap[i] = e->heap[up];
    i = up;
  }
  e->heap[i] = p;
}

static le_pkt *heap_pop(le_emu *e) {
  le_pkt *top = e->heap[0], *last = e->heap[--e->nheap];
  size_t i = 0, n = e->nheap;
  for (;;) {  /* at most log2(capheap) steps */
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && pkt_before(e->heap[c + 1], e->heap[c])) c++;
    if (!pkt_before(e->heap[c], last)) break;
    e->heap[i] = e->heap[c];
    i = c;
  }
  if (n) e->heap[i] = last;
  return top;
}

/* ---- Configuration ---- */

static double parse_num(int li, const char *key, const char *v, double lo, double hi) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (end == v || *end || errno || !(x >= lo && x <= hi)) {
    if (li < 0) die_config("%s: \"%s\" is not a number in [%g, %g]", key, v, lo, hi);
    die_config("link %d: %s: \"%s\" is not a number in [%g, %g]", li, key, v, lo, hi);
  }
  return x;
}

static void set_param(le_link *l, int li, int dir, const char *key, const char *v) {
  for (int k = 0; k < 2; k++) {
    if (dir >= 0 && k != dir) continue;
    le_params *p = &l->d[k].p;
    if (!strcmp(key, "delay_ms"))
      p->delay_ns = (uint64_t)(parse_num(li, key, v, 0, 10000) * 1e6);
    else if (!strcmp(key, "jitter_ms"))
      p->jitter_ns = (uint64_t)(parse_num(li, key, v, 0, 10000) * 1e6);
    else if (!strcmp(key, "loss_pct"))
      p->loss = parse_num(li, key, v, 0, 100) / 100;
    else if (!strcmp(key, "rate_mbit"))
      p->rate_bps = (uint64_t)(parse_num(li, key, v, 0.008, 100000) * 1e6);
    else if (!strcmp(key, "limit"))
      p->limit = (uint32_t)parse_num(li, key, v, 1, LE_MAX_LIMIT);
    else if (!strcmp(key, "reorder"))
      p->reorder = (int)parse_num(li, key, v, 0, 1);
    else if (!strcmp(key, "jitter")) {
      if (strcmp(v, "uniform") && strcmp(v, "normal"))
        die_config("link %d: jitter: \"%s\" is not uniform or normal", li, v);
      p->normal = !strcmp(v, "normal");
    } else
      die_config("link %d: unknown key \"%s\"", li, key);
  }
}

static void set_end(le_link *l, int li, int end, const char *v) {
  const char *at = strchr(v, '@');
  size_t dn = at ? (size_t)(at - v) : strlen(v);
  if (dn == 0 || dn >= IFNAMSIZ || strcspn(v, "/ :") < dn)
    die_config("link %d: %c: device \"%.*s\" is not a name of 1 to %d characters", li,
               "ab"[end], (int)dn, v, IFNAMSIZ - 1);
  memcpy(l->dev[end], v, dn);
  if (at) {
    if (!at[1] || strlen(at + 1) >= sizeof l->ns[end] || strchr(at + 1, '/'))
      die_config("link %d: %c: namespace \"%s\" is not a name of 1 to %zu characters", li,
                 "ab"[end], at + 1, sizeof l->ns[end] - 1);
    strcpy(l->ns[end], at + 1);
  }
}

/* Parses one SPEC (whitespace-separated key=value words) into link LI. */
static void parse_link(le_link *l, int li, char *spec) {
  memset(l, 0, sizeof *l);
  l->fd[0] = l->fd[1] = -1;
  for (int k = 0; k < 2; k++) l->d[k].p.limit = 1000;
  for (char *save = NULL, *w = strtok_r(spec, " \t\r\n", &save); w;
       w = strtok_r(NULL, " \t\r\n", &save)) {
    char *eq = strchr(w, '=');
    if (!eq || eq == w) die_config("link %d: \"%s\" is not key=value", li, w);
    *eq = 0;
    const char *v = eq + 1;
    if (!strcmp(w, "a") || !strcmp(w, "b"))
      set_end(l, li, w[0] - 'a', v);
    else if (!strcmp(w, "mode")) {
      if (strcmp(v, "tun") && strcmp(v, "tap"))
        die_config("link %d: mode: \"%s\" is not tun or tap", li, v);
      l->tap = !strcmp(v, "tap");
    } else if (!strncmp(w, "ab.", 3))
      set_param(l, li, 0, w + 3, v);
    else if (!strncmp(w, "ba.", 3))
      set_param(l, li, 1, w + 3, v);
    else
      set_param(l, li, -1, w, v);
  }
  for (int k = 0; k < 2; k++) {
    if (!l->dev[k][0]) die_config("link %d: %c: missing (a=DEV[@NETNS])", li, "ab"[k]);
    le_params *p = &l->d[k].p;
    if (p->jitter_ns > p->delay_ns)
      die_config("link %d: %s: jitter_ms %g exceeds delay_ms %g", li, k ? "b->a" : "a->b",
                 p->jitter_ns / 1e6, p->delay_ns / 1e6);
  }
  if (!strcmp(l->dev[0], l->dev[1]) && !strcmp(l->ns[0], l->ns[1]))
    die_config("link %d: a and b are the same device %s", li, l->dev[0]);
}

/* ---- Devices ---- */

/* Creates DEV in namespace NS ("" for our own), brings it up, and returns
 * its nonblocking fd. The fd keeps the device, in its namespace, for as
 * long as it is open; it goes when we exit. */
static int open_dev(const le_link *l, int li, int end) {
  int home = -1;
  if (l->ns[end][0]) {
    char path[128];
    snprintf(path, sizeof path, "/run/netns/%s", l->ns[end]);
    int nsfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0)
      die_config("link %d: %c: namespace %s: %s", li, "ab"[end], l->ns[end], strerror(errno));
    home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home < 0) die_sys("/proc/self/ns/net");
    if (setns(nsfd, CLONE_NEWNET) < 0) die_sys("setns");
    close(nsfd);
  }
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die_sys("/dev/net/tun");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = (short)((l->tap ? IFF_TAP : IFF_TUN) | IFF_NO_PI);
  memcpy(ifr.ifr_name, l->dev[end], strlen(l->dev[end]));
  if (ioctl(fd, TUNSETIFF, &ifr) < 0)
    die_config("link %d: %c: cannot create %s %s%s%s: %s", li, "ab"[end], l->tap ? "tap" : "tun",
               l->dev[end], l->ns[end][0] ? " in " : "", l->ns[end], strerror(errno));
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) die_sys("socket");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) die_sys("SIOCGIFFLAGS");
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) die_sys("SIOCSIFFLAGS");
  close(s);
  if (home >= 0) {
    if (setns(home, CLONE_NEWNET) < 0) die_sys("setns back");
    close(home);
  }
  return fd;
}

/* ---- Forwarding ---- */

/* One packet read at LINK's end DIR: lose, drop or queue it. */
static void accept_pkt(le_emu *e, int li, int dir, size_t len, uint64_t now) {
  le_dir *d = &e->links[li].d[dir];
  d->in++;
  if (d->p.loss > 0 && rng_unit(d->rng) < d->p.loss) {
    d->lost++;
    return;
  }
  if (d->held >= d->p.limit || d->held_bytes + len > LE_DIR_BYTES) {
    d->dropped++;
    return;
  }
  le_pkt *p = malloc(sizeof *p + len);
  if (!p) {
    d->dropped++;
    return;
  }
  uint64_t t = now;
  if (d->p.rate_bps) {
    uint64_t start = d->next_free > now ? d->next_free : now;
    d->next_free = start + (uint64_t)len * 8 * 1000000000u / d->p.rate_bps;
    t = d->next_free;
  }
  int64_t j = jitter_sample(d);
  /* jitter_ms <= delay_ms was checked, so this is never before t. */
  uint64_t due = t + (uint64_t)((int64_t)d->p.delay_ns + j);
  if (!d->p.reorder) {
    if (due < d->last_due) due = d->last_due;
    d->last_due = due;
  }
  p->due = due;
  p->seq = e->seq++;
  p->link = (uint16_t)li;
  p->dir = (uint8_t)dir;
  p->len = (uint32_t)len;
  memcpy(p->data, e->buf, len);
  d->held++;
  d->held_bytes += len;
  heap_push(e, p);
}

/* Reads up to LE_BATCH packets from LINK's end DIR. */
static void read_end(le_emu *e, int li, int dir, int ep) {
  le_link *l = &e->links[li];
  for (int i = 0; i < LE_BATCH; i++) {
    ssize_t n = read(l->fd[dir], e->buf, sizeof e->buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
      /* The device went (its namespace deleted): this end is down. */
      fprintf(stderr, "stitch-linkemu: link %d: %s: %s; end closed\n", li, l->dev[dir],
              n < 0 ? strerror(errno) : "end of file");
      epoll_ctl(ep, EPOLL_CTL_DEL, l->fd[dir], NULL);
      return;
    }
    accept_pkt(e, li, dir, (size_t)n, now_ns());
  }
}

/* Writes out every packet due by NOW; at most nheap of them. */
static void deliver(le_emu *e, uint64_t now) {
  while (e->nheap && e->heap[0]->due <= now) {
    le_pkt *p = heap_pop(e);
    le_link *l = &e->links[p->link];
    le_dir *d = &l->d[p->dir];
    d->held--;
    d->held_bytes -= p->len;
    uint64_t us = (now - p->due) / 1000;
    int b = 0;
    while (us > 0 && b < LE_LATE_BUCKETS - 1) {
      us >>= 1;
      b++;
    }
    e->late[b]++;
    if (write(l->fd[!p->dir], p->data, p->len) == (ssize_t)p->len)
      d->out++;
    else
      d->write_err++;
    free(p);
  }
}

/* The lateness below which a share Q of the packets left, in us (the
 * upper edge of its power-of-two bucket). */
static uint64_t late_quantile(const le_emu *e, double q) {
  uint64_t all = 0, seen = 0;
  for (int b = 0; b < LE_LATE_BUCKETS; b++) all += e->late[b];
  for (int b = 0; b < LE_LATE_BUCKETS; b++) {
    seen += e->late[b];
    if (all > 0 && (double)seen >= q * (double)all) return b == 0 ? 1 : (uint64_t)1 << b;
  }
  return 0;
}

static void print_stats(const le_emu *e) {
  fprintf(stderr,
          "stitch-linkemu: late against due: p50 < %" PRIu64 " us, p90 < %" PRIu64
          " us, p99 < %" PRIu64 " us\n",
          late_quantile(e, 0.5), late_quantile(e, 0.9), late_quantile(e, 0.99));
  for (int i = 0; i < e->nlinks; i++)
    for (int k = 0; k < 2; k++) {
      const le_link *l = &e->links[i];
      const le_dir *d = &l->d[k];
      fprintf(stderr,
              "stitch-linkemu: link %d %s->%s: in %" PRIu64 " lost %" PRIu64 " dropped %" PRIu64
              " out %" PRIu64 " write_errors %" PRIu64 " held %" PRIu32 "\n",
              i, l->dev[k], l->dev[!k], d->in, d->lost, d->dropped, d->out, d->write_err, d->held);
    }
}

static void add_spec(le_emu *e, char *spec) {
  if (e->nlinks == LE_MAX_LINKS) die_config("more than %d links", LE_MAX_LINKS);
  parse_link(&e->links[e->nlinks], e->nlinks, spec);
  e->nlinks++;
}

static void read_config(le_emu *e, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) die_config("%s: %s", path, strerror(errno));
  char line[LE_LINE + 2];
  int no = 0;
  while (fgets(line, sizeof line, f)) {  /* at most LE_MAX_LINKS links */
    no++;
    if (!strchr(line, '\n') && !feof(f))
      die_config("%s:%d: longer than %d characters", path, no, LE_LINE);
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    if (strspn(line, " \t\r\n") == strlen(line)) continue;
    add_spec(e, line);
  }
  fclose(f);
}

int main(int argc, char **argv) {
  static le_link links[LE_MAX_LINKS];
  static le_emu emu;
  le_emu *e = &emu;
  e->links = links;
  uint64_t seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if ((!strcmp(a, "--seed") || !strcmp(a, "--config") || !strcmp(a, "--link")) && i + 1 >= argc)
      die_config("%s needs a value", a);
    if (!strcmp(a, "--seed"))
      seed = (uint64_t)parse_num(-1, "--seed", argv[++i], 0, 9007199254740992.0);
    else if (!strcmp(a, "--config"))
      read_config(e, argv[++i]);
    else if (!strcmp(a, "--link"))
      add_spec(e, argv[++i]);
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      puts("usage: stitch-linkemu [--seed N] [--config FILE] [--link SPEC]...\n"
           "SPEC: a=DEV[@NETNS] b=DEV[@NETNS] [mode=tun|tap] [[ab.|ba.]PARAM=V]...\n"
           "PARAM: delay_ms jitter_ms jitter=uniform|normal loss_pct rate_mbit limit reorder=0|1");
      return 0;
    } else
      die_config("unknown argument \"%s\" (--help)", a);
  }
  if (e->nlinks == 0) die_config("no links (--link SPEC or --config FILE)");

  /* The heap holds every packet held in any direction. */
  e->capheap = 0;
  for (int i = 0; i < e->nlinks; i++)
    e->capheap += (size_t)e->links[i].d[0].p.limit + e->links[i].d[1].p.limit;
  e->heap = calloc(e->capheap, sizeof *e->heap);
  if (!e->heap) die_sys("calloc");

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  sigprocmask(SIG_BLOCK, &sigs, NULL);
  int sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (sfd < 0 || tfd < 0 || ep < 0) die_sys("signalfd/timerfd/epoll");
  /* Event tags: 0 signal, 1 timer, 2 + 2*link + end a device. */
  struct epoll_event ev = {.events = EPOLLIN};
  ev.data.u64 = 0;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev) < 0) die_sys("epoll_ctl");
  ev.data.u64 = 1;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev) < 0) die_sys("epoll_ctl");
  for (int i = 0; i < e->nlinks; i++) {
    le_link *l = &e->links[i];
    for (int k = 0; k < 2; k++) {
      uint64_t s = seed ^ ((uint64_t)(2 * i + k) << 40);
      for (int r = 0; r < 4; r++) l->d[k].rng[r] = splitmix64(&s);
      l->fd[k] = open_dev(l, i, k);
      ev.data.u64 = 2 + 2 * (uint64_t)i + (uint64_t)k;
      if (epoll_ctl(ep, EPOLL_CTL_ADD, l->fd[k], &ev) < 0) die_sys("epoll_ctl");
    }
  }
  printf("stitch-linkemu: ready: %d links\n", e->nlinks);
  fflush(stdout);

  uint64_t armed = 0;
  for (;;) {  /* until SIGINT, SIGTERM or SIGHUP */
    struct epoll_event evs[64];
    int n = epoll_wait(ep, evs, 64, -1);
    if (n < 0 && errno != EINTR) die_sys("epoll_wait");
    for (int i = 0; i < n; i++) {
      uint64_t tag = evs[i].data.u64;
      if (tag == 0) {
        print_stats(e);
        return 0;
      }
      if (tag == 1) {
        uint64_t ticks;
        if (read(tfd, &ticks, sizeof ticks) < 0 && errno != EAGAIN) die_sys("timerfd");
        armed = 0;
        continue;
      }
      read_end(e, (int)((tag - 2) / 2), (int)((tag - 2) % 2), ep);
    }
    deliver(e, now_ns());
    uint64_t next = e->nheap ? e->heap[0]->due : 0;
    if (next != armed) {
      /* Absolute time: 0 disarms, which is what an empty heap wants. */
      struct itimerspec its = {.it_value = {.tv_sec = (time_t)(next / 1000000000u),
                                            .tv_nsec = (long)(next % 1000000000u)}};
      if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL) < 0) die_sys("timerfd_settime");
      armed = next;
    }
  }
}
