/* driver.c: one stitch_swarm on a libuv loop over TCP (stitch/net.h).
 *
 * The driver only moves bytes and carries out actions. After every event
 * that called into the core (accept, connect, read, write done, timer, a
 * kick from the agent) `pump` drains the core's actions, starts a write
 * for every peer with pending bytes and none in flight, and re-arms the one
 * timer at stitch_swarm_wake.
 *
 * Writes copy at most NET_WRITE_MAX of the pending bytes into the peer's
 * own buffer before handing them to libuv: the core's send buffer may move
 * when it appends (a realloc), and a copy bounded by one write costs far
 * less than the socket does. One write in flight per peer means the core
 * sees its send queue grow when a peer reads slowly, and throttles.
 *
 * Each socket keeps few bytes unsent (TCP_NOTSENT_LOWAT, where the
 * system has it, set before each chunk's write to stitch_swarm_lowat of
 * it: an eighth, at least 16 KiB): a write completes only as the kernel
 * sends what it took before, so the core chooses what to send next (which
 * requester, which chunk) when the link is about to want it, not a socket
 * buffer's worth of chunks earlier. Without it a socket buffer holds
 * megabytes, a dozen requesters fill an uplink's queue for about 100 ms,
 * and the core's "furthest behind first" (fetch.c serve_turn) is lost in
 * that queue (docs/history/simulator.md, "Chunks handed over when the
 * uplink wants them"). The mark follows the chunk, as chunks are sized to the
 * links (64 KiB of a 512 KiB chunk is 0.5 ms of a 1 Gbit/s link, 16 KiB
 * of a 64 KiB one 1.3 ms at 100 Mbit/s): long enough for the loop to
 * hash a chunk it received meanwhile (about 1 ms for 512 KiB), short
 * enough that 64 KiB chunks do not go two at a time. */
#define _GNU_SOURCE
#include "stitch/net.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NET_READ_BUF (64u << 10)
#define NET_WRITE_MAX (1u << 20)
/* Pending bytes up to this are control frames (HAVE, REQUEST, CROSSING),
 * written before the peers' larger writes in each pump. */
#define NET_CTL_MAX 2048u
#define NET_BACKLOG 128
/* The core's clock starts far from 0 so that "0" never means a time. */
#define NET_CLOCK_OFFSET_MS 1000000u
/* How long a link the core closed waits for the other side's end of
 * stream (peer_linger) before it is closed anyway. */
#define NET_LINGER_MS 2000u

typedef enum peer_state {
  PEER_DIALING,  /* tcp handle up, connect in flight */
  PEER_OPEN,     /* the core knows it */
  PEER_LINGER,   /* the core closed it: our end of stream is out, theirs
                    is awaited (peer_linger) */
  PEER_CLOSING   /* uv_close called */
} peer_state;

typedef struct net_peer {
  uv_tcp_t tcp; /* first: the handle's data is the peer too */
  stitch_net *net;
  struct net_peer *prev, *next;
  peer_state state;
  int in_core;  /* the core holds this id: owe it a peer_close */
  uint32_t id;
  int writing;
  size_t wlen;
  size_t lowat; /* TCP_NOTSENT_LOWAT set, 0 before */
  uv_write_t wr;
  uv_shutdown_t shut;
  uint64_t linger_until; /* PEER_LINGER: closed then, at the latest */
  uv_connect_t conn;
  char addr[STITCH_SWARM_ADDR_MAX];
  uint8_t *wbuf; /* NET_WRITE_MAX */
  uint8_t *rbuf; /* NET_READ_BUF */
} net_peer;

/* A name lookup for a dial, in flight. */
typedef struct net_resolve {
  uv_getaddrinfo_t req;
  stitch_net *net;
  char addr[STITCH_SWARM_ADDR_MAX];
  unsigned flags; /* the CONNECT's STITCH_SWARM_DIAL_* */
} net_resolve;

struct stitch_net {
  uv_loop_t *loop;
  stitch_swarm *swarm;
  stitch_net_callbacks cb;
  uv_tcp_t listener;
  uv_timer_t timer;
  net_peer *peers;
  unsigned live;  /* handles open and requests in flight */
  int port;
  int started, closing;
  int pumping, again;
  int lowat_refused; /* set_notsent_lowat said so once */
  /* The one local port a node that advertises no address dials from
   * (STITCH_SWARM_DIAL_FIXED; 0 until its first such dial), so its NAT
   * shows every peer the same address (fixed_socket). */
  int fixed_port;
};

/* libstitch-net is built on libstitch's public API alone: libstitch.so
 * hides its internal helpers (common/diag.h's stitch_diag_set among them),
 * so the driver writes its own reasons. */
static int net_fail(stitch_diag *d, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int net_fail(stitch_diag *d, int err, const char *fmt, ...) {
  if (d != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
    va_end(ap);
  }
  return err;
}
#define RETURN_IF(cond, d, err, ...)                                          \
  do {                                                                        \
    if (cond)                                                                 \
      return net_fail((d), (err), __VA_ARGS__);                               \
  } while (0)

static void net_log(stitch_net *n, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void net_log(stitch_net *n, const char *fmt, ...) {
  if (n->cb.log == NULL)
    return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  n->cb.log(n->cb.user, line);
}

uint64_t stitch_net_now(const stitch_net *n) {
  return uv_now(n->loop) + NET_CLOCK_OFFSET_MS;
}

/* Fresh time for the core: callbacks can run long after the loop cached
 * its clock (a burst of reads, a chunk written to disk). */
static uint64_t now_ms(stitch_net *n) {
  uv_update_time(n->loop);
  return stitch_net_now(n);
}

/* Frees the net once the last handle or request is done. */
static void net_release(stitch_net *n) {
  if (--n->live == 0 && n->closing)
    free(n);
}

/* ---- Addresses ---------------------------------------------------------- */

/* Splits "host:port" or "[v6]:port" into HOST (NUL-terminated) and PORT. */
static int split_addr(const char *addr, char *host, size_t cap, char *port,
                      size_t pcap) {
  const char *colon;
  size_t hl;
  if (addr[0] == '[') {
    const char *end = strchr(addr, ']');
    if (end == NULL || end[1] != ':')
      return STITCH_EINVAL;
    hl = (size_t)(end - addr - 1);
    addr++;
    colon = end + 1;
  } else {
    colon = strrchr(addr, ':');
    if (colon == NULL)
      return STITCH_EINVAL;
    hl = (size_t)(colon - addr);
  }
  size_t pl = strlen(colon + 1);
  if (hl == 0 || hl >= cap || pl == 0 || pl >= pcap ||
      strspn(colon + 1, "0123456789") != pl)
    return STITCH_EINVAL;
  memcpy(host, addr, hl);
  host[hl] = 0;
  memcpy(port, colon + 1, pl + 1);
  return 0;
}

/* A numeric address without a lookup (0), or STITCH_ENOTFOUND for a name. */
static int numeric_addr(const char *host, const char *port,
                        struct sockaddr_storage *ss) {
  int p = atoi(port);
  if (p < 0 || p > 65535)
    return STITCH_EINVAL;
  if (uv_ip4_addr(host, p, (struct sockaddr_in *)ss) == 0)
    return 0;
  if (uv_ip6_addr(host, p, (struct sockaddr_in6 *)ss) == 0)
    return 0;
  return STITCH_ENOTFOUND;
}

static void peer_name(const uv_tcp_t *t, char *out, size_t cap) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  char ip[64] = "?";
  int port = 0;
  if (uv_tcp_getpeername(t, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET6) {
      uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
      port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
      snprintf(out, cap, "[%s]:%d", ip, port);
      return;
    }
    uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
    port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  }
  snprintf(out, cap, "%s:%d", ip, port);
}

/* ---- Peers -------------------------------------------------------------- */

static void pump(stitch_net *n);

static net_peer *peer_new(stitch_net *n, const char *addr) {
  net_peer *p = calloc(1, sizeof(*p));
  if (p == NULL)
    return NULL;
  p->wbuf = malloc(NET_WRITE_MAX);
  p->rbuf = malloc(NET_READ_BUF);
  if (p->wbuf == NULL || p->rbuf == NULL || uv_tcp_init(n->loop, &p->tcp)) {
    free(p->wbuf);
    free(p->rbuf);
    free(p);
    return NULL;
  }
  n->live++;
  p->net = n;
  p->tcp.data = p;
  snprintf(p->addr, sizeof(p->addr), "%s", addr);
  p->next = n->peers;
  if (n->peers != NULL)
    n->peers->prev = p;
  n->peers = p;
  return p;
}

static void on_peer_closed(uv_handle_t *h) {
  net_peer *p = h->data;
  stitch_net *n = p->net;
  if (p->prev != NULL)
    p->prev->next = p->next;
  else
    n->peers = p->next;
  if (p->next != NULL)
    p->next->prev = p->prev;
  free(p->wbuf);
  free(p->rbuf);
  free(p);
  net_release(n);
}

/* Closes the transport. TELL: the core still holds the id and must hear
 * the peer is gone (not after the core dropped it itself). */
static void peer_drop(net_peer *p, int tell) {
  if (p->state == PEER_CLOSING)
    return;
  p->state = PEER_CLOSING;
  if (p->in_core && tell)
    stitch_swarm_peer_close(p->net->swarm, p->id, now_ms(p->net));
  p->in_core = 0;
  uv_close((uv_handle_t *)&p->tcp, on_peer_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  net_peer *p = req->data;
  if (status < 0)
    peer_drop(p, 0);
}

/* The core closed P: send what was written, then our end of stream, and
 * read (and drop) until the other side closes too or NET_LINGER_MS
 * passes. Closing the socket at once would lose bytes the core wrote just
 * before, such as a full node's PEERS: a close with unread input resets
 * the connection, and the reset discards what has not been sent. */
static void peer_linger(net_peer *p) {
  stitch_net *n = p->net;
  if (p->state != PEER_OPEN) {
    peer_drop(p, 1);
    return;
  }
  if (p->in_core)
    stitch_swarm_peer_close(n->swarm, p->id, now_ms(n));
  p->in_core = 0;
  p->state = PEER_LINGER;
  p->linger_until = now_ms(n) + NET_LINGER_MS;
  p->shut.data = p;
  if (uv_shutdown(&p->shut, (uv_stream_t *)&p->tcp, on_shutdown) != 0)
    peer_drop(p, 0);
}

static net_peer *peer_find(stitch_net *n, uint32_t id) {
  for (net_peer *p = n->peers; p != NULL; p = p->next)
    if (p->in_core && p->id == id)
      return p;
  return NULL;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  net_peer *p = h->data;
  *buf = uv_buf_init((char *)p->rbuf, NET_READ_BUF);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  net_peer *p = st->data;
  stitch_net *n = p->net;
  if (p->state == PEER_LINGER && nread < 0) { /* their end of stream */
    peer_drop(p, 0);
    return;
  }
  if (nread == 0 || p->state != PEER_OPEN)
    return;
  if (nread < 0) {
    if (nread != UV_EOF)
      net_log(n, "peer %" PRIu32 " (%s): %s", p->id, p->addr,
              uv_strerror((int)nread));
    peer_drop(p, 1);
  } else if (stitch_swarm_peer_recv(n->swarm, p->id, p->rbuf, (size_t)nread,
                                    now_ms(n)) != 0) {
    /* The core dropped it. peer_close lets the core free the peer's slot
     * (a no-op for an id it already forgot); its CLOSE action for this id
     * then finds nothing left to do. */
    peer_drop(p, 1);
  }
  pump(n);
}

static void on_written(uv_write_t *req, int status) {
  net_peer *p = req->data;
  stitch_net *n = p->net;
  p->writing = 0;
  if (p->state != PEER_OPEN)
    return; /* cancelled by a close: the peer is on its way out */
  if (status < 0) {
    net_log(n, "peer %" PRIu32 " (%s): write: %s", p->id, p->addr,
            uv_strerror(status));
    peer_drop(p, 1);
  } else {
    stitch_swarm_peer_sent(n->swarm, p->id, p->wlen);
  }
  pump(n);
}

/* Unsent bytes beyond V wait in the core (see the top). A system that
 * refuses the option is told of once. */
static void set_notsent_lowat(net_peer *p, size_t v) {
  if (p->lowat == v)
    return;
  p->lowat = v;
#ifdef TCP_NOTSENT_LOWAT
  uv_os_fd_t fd;
  int iv = (int)v;
  if (uv_fileno((uv_handle_t *)&p->tcp, &fd) == 0 &&
      setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &iv, sizeof(iv)) != 0 &&
      !p->net->lowat_refused) {
    p->net->lowat_refused = 1;
    net_log(p->net, "TCP_NOTSENT_LOWAT: %s", strerror(errno));
  }
#endif
}

/* Starts a write of what the core has pending, if none is in flight and
 * it is at most MAX bytes. */
static void peer_flush(net_peer *p, size_t max) {
  stitch_net *n = p->net;
  if (p->state != PEER_OPEN || p->writing)
    return;
  const uint8_t *buf;
  size_t len;
  stitch_swarm_peer_pending(n->swarm, p->id, &buf, &len);
  if (len == 0 || len > max)
    return;
  p->wlen = len < NET_WRITE_MAX ? len : NET_WRITE_MAX;
  if (p->wlen > STITCH_SWARM_LOWAT_MIN) /* bulk (a chunk): its own mark */
    set_notsent_lowat(p, stitch_swarm_lowat(p->wlen));
  memcpy(p->wbuf, buf, p->wlen);
  uv_buf_t b = uv_buf_init((char *)p->wbuf, (unsigned)p->wlen);
  p->wr.data = p;
  int rc = uv_write(&p->wr, (uv_stream_t *)&p->tcp, &b, 1, on_written);
  if (rc != 0) {
    net_log(n, "peer %" PRIu32 " (%s): write: %s", p->id, p->addr,
            uv_strerror(rc));
    peer_drop(p, 1);
    return;
  }
  p->writing = 1;
}

/* The transport is up: the core gets the peer. */
static void peer_opened(net_peer *p, int outbound) {
  stitch_net *n = p->net;
  uv_tcp_nodelay(&p->tcp, 1);
  set_notsent_lowat(p, STITCH_SWARM_LOWAT_MIN);
  if (stitch_swarm_peer_open(n->swarm, now_ms(n), outbound, p->addr,
                             &p->id) != 0) {
    peer_drop(p, 0); /* the core refused it */
    return;
  }
  p->in_core = 1;
  p->state = PEER_OPEN;
  int rc = uv_read_start((uv_stream_t *)&p->tcp, on_alloc, on_read);
  if (rc != 0) {
    net_log(n, "peer %" PRIu32 " (%s): read: %s", p->id, p->addr,
            uv_strerror(rc));
    peer_drop(p, 1);
  }
}

static void on_connect(uv_connect_t *req, int status) {
  net_peer *p = req->data;
  stitch_net *n = p->net;
  if (p->state != PEER_DIALING)
    return; /* closed while dialing */
  if (status < 0) {
    net_log(n, "connect %s: %s", p->addr, uv_strerror(status));
    stitch_swarm_dial_failed(n->swarm, p->addr, now_ms(n));
    peer_drop(p, 0);
    pump(n);
    return;
  }
  peer_opened(p, 1);
  pump(n);
}

/* A socket bound to the node's fixed local port, for SA's family, handed
 * to P's handle. Every dial of a node behind a NAT comes from it: a NAT
 * that keeps one mapping per local port (endpoint-independent, as
 * Linux's masquerade, which also keeps the port when it can) then shows
 * every peer the same address, which is the one a relay passes on for a
 * punch; and a punch dial is a TCP simultaneous open from that port
 * (docs/swarm.md "Hole punching"). SO_REUSEADDR and SO_REUSEPORT let
 * every dial share the port; the first dial lets the system pick it. */
static int fixed_socket(stitch_net *n, net_peer *p, const struct sockaddr *sa) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return uv_translate_sys_error(errno);
  int one = 1;
  struct sockaddr_storage local;
  memset(&local, 0, sizeof(local));
  socklen_t len;
  if (sa->sa_family == AF_INET6) {
    struct sockaddr_in6 *l6 = (struct sockaddr_in6 *)&local;
    l6->sin6_family = AF_INET6;
    l6->sin6_port = htons((uint16_t)n->fixed_port);
    len = sizeof(*l6);
  } else {
    struct sockaddr_in *l4 = (struct sockaddr_in *)&local;
    l4->sin_family = AF_INET;
    l4->sin_port = htons((uint16_t)n->fixed_port);
    len = sizeof(*l4);
  }
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0 ||
      bind(fd, (struct sockaddr *)&local, len) != 0 ||
      getsockname(fd, (struct sockaddr *)&local, &len) != 0) {
    int err = uv_translate_sys_error(errno);
    close(fd);
    return err;
  }
  int port = ntohs(sa->sa_family == AF_INET6
                       ? ((struct sockaddr_in6 *)&local)->sin6_port
                       : ((struct sockaddr_in *)&local)->sin_port);
  if (n->fixed_port == 0) {
    n->fixed_port = port;
    net_log(n, "dialing from local port %d (no address advertised)", port);
  }
  int rc = uv_tcp_open(&p->tcp, fd);
  if (rc != 0)
    close(fd);
  return rc;
}

static void dial_to(stitch_net *n, const char *addr, const struct sockaddr *sa,
                    unsigned flags) {
  net_peer *p = peer_new(n, addr);
  if (p == NULL) {
    net_log(n, "connect %s: out of memory", addr);
    return;
  }
  p->state = PEER_DIALING;
  p->conn.data = p;
  int rc = 0;
  if (flags & (STITCH_SWARM_DIAL_FIXED | STITCH_SWARM_DIAL_PUNCH))
    rc = fixed_socket(n, p, sa);
  if (rc == 0)
    rc = uv_tcp_connect(&p->conn, &p->tcp, sa, on_connect);
  if (rc != 0) {
    net_log(n, "connect %s: %s", addr, uv_strerror(rc));
    stitch_swarm_dial_failed(n->swarm, addr, now_ms(n));
    peer_drop(p, 0);
  }
}

static void on_resolved(uv_getaddrinfo_t *req, int status,
                        struct addrinfo *res) {
  net_resolve *r = req->data;
  stitch_net *n = r->net;
  if (status == 0 && !n->closing)
    dial_to(n, r->addr, res->ai_addr, r->flags);
  else if (status != 0 && status != UV_ECANCELED) {
    net_log(n, "connect %s: %s", r->addr, uv_strerror(status));
    stitch_swarm_dial_failed(n->swarm, r->addr, now_ms(n));
  }
  uv_freeaddrinfo(res);
  free(r);
  net_release(n);
}

/* Carries out a CONNECT: a numeric address at once, a name after a lookup
 * on the thread pool (never a punch's). */
static void dial(stitch_net *n, const char *addr, unsigned flags) {
  char host[STITCH_SWARM_ADDR_MAX], port[8];
  struct sockaddr_storage ss;
  if (split_addr(addr, host, sizeof(host), port, sizeof(port)) != 0) {
    net_log(n, "connect %s: not host:port", addr);
    return;
  }
  int rc = numeric_addr(host, port, &ss);
  if (rc == 0) {
    dial_to(n, addr, (const struct sockaddr *)&ss, flags);
    return;
  }
  if (rc == STITCH_ENOTFOUND && (flags & STITCH_SWARM_DIAL_PUNCH)) {
    /* A punch's address is what a relay saw on its transport, a number;
     * a name there is a hostile relay's, and its lookup could lead
     * anywhere ("127.1", a LAN host's name): never looked up. */
    net_log(n, "connect %s: a punch to a name, not dialed", addr);
    stitch_swarm_dial_failed(n->swarm, addr, now_ms(n));
    return;
  }
  net_resolve *r = calloc(1, sizeof(*r));
  if (rc != STITCH_ENOTFOUND || r == NULL) {
    net_log(n, "connect %s: %s", addr, r ? "bad port" : "out of memory");
    free(r);
    return;
  }
  r->net = n;
  r->flags = flags;
  r->req.data = r;
  snprintf(r->addr, sizeof(r->addr), "%s", addr);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
  rc = uv_getaddrinfo(n->loop, &r->req, on_resolved, host, port, &hints);
  if (rc != 0) {
    net_log(n, "connect %s: %s", addr, uv_strerror(rc));
    free(r);
    return;
  }
  n->live++;
}

/* ---- The pump: actions, writes, timer ----------------------------------- */

static void on_timer(uv_timer_t *t) {
  stitch_net *n = t->data;
  int rc = stitch_swarm_tick(n->swarm, now_ms(n));
  if (rc != 0)
    net_log(n, "tick: %s", stitch_strerror(rc));
  pump(n);
}

/* The core's actions (stitch_swarm_drain): a CONNECT is dialed, a CLOSE
 * lingers, an APPLY goes to the agent. */
static void op_connect(void *user, const char *addr, unsigned flags) {
  dial(user, addr, flags);
}

static void op_close(void *user, uint32_t peer) {
  net_peer *p = peer_find(user, peer);
  if (p != NULL)
    peer_linger(p);
}

static void op_apply(void *user, uint64_t version, uint32_t object) {
  stitch_net *n = user;
  if (n->cb.apply != NULL)
    n->cb.apply(n->cb.user, version, object);
}

/* Called after every call into the core. Re-entrant calls (an apply
 * callback that answers at once and kicks) fold into the running pump. */
static void pump(stitch_net *n) {
  if (n->swarm == NULL || n->closing)
    return;
  if (n->pumping) {
    n->again = 1;
    return;
  }
  n->pumping = 1;
  /* Until a pass finds nothing to do: a flush that fails drops a peer,
   * and the core may answer that with actions. */
  const stitch_swarm_host ops = {n, op_connect, op_close, op_apply};
  for (size_t took = 1; took || n->again;) {
    n->again = 0;
    if (stitch_swarm_drain(n->swarm, &ops, &took) != 0)
      net_log(n, "actions: more than %u in a row; the rest wait for the "
                 "next pump", STITCH_SWARM_DRAIN_MAX);
    /* Control frames first: the sockets share the uplink's queue, and a
     * REQUEST written after a manifest forwarded to ten neighbours waits
     * for all of them there (docs/simulator.md, "Why they differ"). */
    uint64_t gen = stitch_swarm_sendable_gen(n->swarm);
    for (net_peer *p = n->peers; p != NULL; p = p->next)
      peer_flush(p, NET_CTL_MAX);
    for (net_peer *p = n->peers; p != NULL; p = p->next)
      peer_flush(p, SIZE_MAX);
    /* A flush can give another peer bytes (a manifest's next copy goes
     * when a link that had one asks for more): pass again. */
    if (stitch_swarm_sendable_gen(n->swarm) != gen)
      n->again = 1;
  }
  n->pumping = 0;
  uint64_t wake = stitch_swarm_wake(n->swarm), now = now_ms(n);
  for (net_peer *p = n->peers; p != NULL; p = p->next) {
    if (p->state != PEER_LINGER)
      continue;
    if (p->linger_until <= now)
      peer_drop(p, 0); /* no end of stream from them in time */
    else if (p->linger_until < wake)
      wake = p->linger_until;
  }
  if (wake == UINT64_MAX) { /* nothing to wake for */
    uv_timer_stop(&n->timer);
    return;
  }
  uint64_t delay = wake > now ? wake - now : 0;
  uv_timer_start(&n->timer, on_timer, delay, 0);
}

void stitch_net_kick(stitch_net *n) { pump(n); }

/* ---- Listening ---------------------------------------------------------- */

static void accept_one(stitch_net *n) {
  net_peer *p = peer_new(n, "");
  if (p == NULL) {
    net_log(n, "accept: out of memory");
    return;
  }
  int rc = uv_accept((uv_stream_t *)&n->listener, (uv_stream_t *)&p->tcp);
  if (rc != 0) {
    net_log(n, "accept: %s", uv_strerror(rc));
    peer_drop(p, 0);
    return;
  }
  peer_name(&p->tcp, p->addr, sizeof(p->addr));
  peer_opened(p, 0);
}

static void on_connection(uv_stream_t *server, int status) {
  stitch_net *n = server->data;
  if (status < 0) {
    net_log(n, "accept: %s", uv_strerror(status));
    return;
  }
  if (n->swarm == NULL || n->closing)
    return;
  accept_one(n);
  pump(n);
}

int stitch_net_listen(uv_loop_t *loop, uv_tcp_t *tcp, const char *addr,
                      int backlog, uv_connection_cb on_conn, int *port,
                      const char *what, stitch_diag *d) {
  char host[STITCH_SWARM_ADDR_MAX], ps[8];
  RETURN_IF(split_addr(addr, host, sizeof(host), ps, sizeof(ps)) != 0, d,
            STITCH_EINVAL, "%s '%.200s': not host:port", what, addr);
  struct sockaddr_storage ss;
  int rc = numeric_addr(host, ps, &ss);
  RETURN_IF(rc == STITCH_EINVAL, d, STITCH_EINVAL, "%s '%.200s': bad port",
            what, addr);
  if (rc != 0) { /* a name: look it up once, at start */
    uv_getaddrinfo_t req;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE};
    rc = uv_getaddrinfo(loop, &req, NULL, host, ps, &hints);
    RETURN_IF(rc != 0, d, STITCH_ENOTFOUND, "%s '%.200s': %s", what, addr,
              uv_strerror(rc));
    memcpy(&ss, req.addrinfo->ai_addr, req.addrinfo->ai_addrlen);
    uv_freeaddrinfo(req.addrinfo);
  }
  rc = uv_tcp_bind(tcp, (const struct sockaddr *)&ss, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)tcp, backlog, on_conn);
  RETURN_IF(rc != 0, d, STITCH_EIO, "%s '%.200s': %s", what, addr,
            uv_strerror(rc));
  int len = sizeof(ss);
  rc = uv_tcp_getsockname(tcp, (struct sockaddr *)&ss, &len);
  RETURN_IF(rc != 0, d, STITCH_EIO, "%s '%.200s': %s", what, addr,
            uv_strerror(rc));
  *port = ss.ss_family == AF_INET6
              ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
              : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  return 0;
}

static void on_own_closed(uv_handle_t *h) { net_release(h->data); }

int stitch_net_new(uv_loop_t *loop, const char *listen,
                   const stitch_net_callbacks *cb, stitch_net **out,
                   stitch_diag *d) {
  *out = NULL;
  stitch_net *n = calloc(1, sizeof(*n));
  RETURN_IF(n == NULL, d, STITCH_ENOMEM, "out of memory");
  n->loop = loop;
  if (cb != NULL)
    n->cb = *cb;
  uv_tcp_init(loop, &n->listener);
  uv_timer_init(loop, &n->timer);
  n->listener.data = n;
  n->timer.data = n;
  n->live = 2;
  int rc = stitch_net_listen(loop, &n->listener, listen, NET_BACKLOG,
                             on_connection, &n->port, "listen address", d);
  if (rc != 0) {
    stitch_net_close(n);
    return rc;
  }
  *out = n;
  return 0;
}

int stitch_net_port(const stitch_net *n) { return n->port; }

void stitch_net_start(stitch_net *n, stitch_swarm *swarm) {
  n->swarm = swarm;
  n->started = 1;
  pump(n);
}

void stitch_net_close(stitch_net *n) {
  if (n == NULL || n->closing)
    return;
  for (net_peer *p = n->peers; p != NULL; p = p->next)
    peer_drop(p, n->swarm != NULL);
  n->closing = 1; /* after the drops: pump no longer runs */
  uv_close((uv_handle_t *)&n->listener, on_own_closed);
  uv_close((uv_handle_t *)&n->timer, on_own_closed);
}
