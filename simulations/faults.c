/* faults.c: what stitch-sim does with tools/netlab's schema additions
 * (docs/simulator.md "NAT, faults, loss and jitter"): which nodes sit
 * behind a NAT, the timed faults (partitions, kill -9 and restart, seed
 * restarts) and what they measure, and what a route's loss, jitter and
 * partitions do to a message on the queues network.
 *
 * Which nodes are NATed or killed follows netlab exactly: it draws them
 * with Python's random.Random(SEED_STRING).sample(range(n), k), so this
 * file carries that generator (MT19937, seeded from the string and its
 * SHA-512 as CPython 3 does) and sample()'s algorithm. The same file gives
 * the same nodes in both drivers; test_sim.sh checks it against python3.
 *
 * Faults are measured as tools/netlab_faults.py measures them, at each
 * controller turn (every 50 ms; netlab polls every 200 ms), with the same
 * keys. */
#include "driver.h"

#include <jansson.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Python's random.Random(str) and sample() ------------------------- */

typedef struct pyrand {
  uint32_t mt[624];
  int i;
} pyrand;

static void mt_init(pyrand *r, uint32_t s) {
  r->mt[0] = s;
  for (int i = 1; i < 624; i++)
    r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) +
               (uint32_t)i;
  r->i = 624;
}

/* CPython's init_by_array (Modules/_randommodule.c). */
static void mt_init_array(pyrand *r, const uint32_t *key, size_t n) {
  mt_init(r, 19650218u);
  size_t i = 1, j = 0;
  for (size_t k = 624 > n ? 624 : n; k; k--) {
    r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) *
                            1664525u)) + key[j] + (uint32_t)j;
    i++, j++;
    if (i >= 624) {
      r->mt[0] = r->mt[623];
      i = 1;
    }
    if (j >= n)
      j = 0;
  }
  for (size_t k = 623; k; k--) {
    r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) *
                            1566083941u)) - (uint32_t)i;
    i++;
    if (i >= 624) {
      r->mt[0] = r->mt[623];
      i = 1;
    }
  }
  r->mt[0] = 0x80000000u;
}

static uint32_t mt_next(pyrand *r) {
  if (r->i >= 624) {
    for (int k = 0; k < 624; k++) {
      uint32_t y = (r->mt[k] & 0x80000000u) | (r->mt[(k + 1) % 624] &
                                                 0x7fffffffu);
      r->mt[k] = r->mt[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1) ? 0x9908b0dfu
                                                               : 0);
    }
    r->i = 0;
  }
  uint32_t y = r->mt[r->i++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  return y ^ (y >> 18);
}

/* random.seed(STR) (version 2): the integer whose big-endian bytes are
 * STR then SHA-512(STR), given to init_by_array as 32-bit words, least
 * significant first. STR must not start with a NUL byte. */
static void pyrand_seed(pyrand *r, const char *str) {
  size_t n = strlen(str), len = n + crypto_hash_sha512_BYTES;
  uint8_t be[256 + crypto_hash_sha512_BYTES];
  if (n > 256)
    die("pyrand: seed string too long");
  memcpy(be, str, n);
  crypto_hash_sha512(be + n, (const uint8_t *)str, n);
  size_t words = (len + 3) / 4;
  uint32_t key[(sizeof(be) + 3) / 4];
  memset(key, 0, sizeof(key));
  for (size_t k = 0; k < len; k++) /* byte k from the least significant */
    key[k / 4] |= (uint32_t)be[len - 1 - k] << (8 * (k % 4));
  while (words > 1 && key[words - 1] == 0)
    words--;
  mt_init_array(r, key, words);
}

/* _randbelow(n), n >= 1: getrandbits(n.bit_length()) until below n. */
static uint32_t pyrand_below(pyrand *r, uint32_t n) {
  int k = 0;
  while (k < 32 && (n >> k) != 0)
    k++;
  for (;;) {
    uint32_t x = mt_next(r) >> (32 - k);
    if (x < n)
      return x;
  }
}

/* random.sample(range(N), K) into OUT[0..K), in sample()'s order. */
static void pyrand_sample(pyrand *r, uint32_t n, uint32_t k, uint32_t *out) {
  double setsize = 21;
  if (k > 5)
    setsize += pow(4, ceil(log(k * 3.0) / log(4.0)));
  uint32_t *pool = calloc(n ? n : 1, sizeof(*pool));
  if (pool == NULL)
    die("out of memory");
  if (n <= setsize) {
    for (uint32_t i = 0; i < n; i++)
      pool[i] = i;
    for (uint32_t i = 0; i < k; i++) {
      uint32_t j = pyrand_below(r, n - i);
      out[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
  } else { /* pool[] as the selected set */
    for (uint32_t i = 0; i < k; i++) {
      uint32_t j;
      do
        j = pyrand_below(r, n);
      while (pool[j]);
      pool[j] = 1;
      out[i] = j;
    }
  }
  free(pool);
}

static int u32_cmp(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* ---- NAT -------------------------------------------------------------- */

void nat_assign(sim *s) {
  pyrand r;
  char seed[48];
  snprintf(seed, sizeof(seed), "nat-%llu", (unsigned long long)s->sc.rng_seed);
  pyrand_seed(&r, seed);
  int base = 1; /* node slots in region order, as netlab numbers them */
  for (size_t g = 0; g < s->sc.n_regions; g++) {
    const sim_region *rg = &s->sc.regions[g];
    uint32_t *pick = calloc(rg->nat_nodes ? rg->nat_nodes : 1, sizeof(*pick));
    if (pick == NULL)
      die("out of memory");
    /* Every region draws, as netlab does (an empty sample draws
     * nothing), so a later region's nodes do not depend on this one's
     * NAT being 0 or not beyond what netlab's do. */
    pyrand_sample(&r, rg->nodes, rg->nat_nodes, pick);
    for (unsigned j = 0; j < rg->nat_nodes; j++) {
      s->node[base + (int)pick[j]].nat = 1;
      s->n_nat++;
    }
    free(pick);
    base += (int)rg->nodes;
  }
}

/* ---- Faults ----------------------------------------------------------- */

typedef struct fault_rt {
  uint32_t *nodes; /* kill: node numbers, ascending */
  unsigned n;
  int began, ended, pending, open, converged, rest_done;
  double began_s, ended_s, converged_s, rest_s;
  unsigned behind_at_end, behind_at_kill;
  uint64_t converged_version;
  uint64_t *held_at_kill, *recovered; /* [n] */
} fault_rt;

typedef struct fault_ev {
  double t; /* after the first publish */
  unsigned order, i;
  int end;
} fault_ev;

struct faults {
  fault_rt f[SIM_FAULTS_MAX];
  fault_ev ev[2 * SIM_FAULTS_MAX];
  unsigned n_ev, next;
};

static int ev_cmp(const void *a, const void *b) {
  const fault_ev *x = a, *y = b;
  if (x->t != y->t)
    return x->t < y->t ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

void faults_init(sim *s) {
  const sim_scenario *sc = &s->sc;
  if (sc->n_faults == 0)
    return;
  faults *fs = calloc(1, sizeof(*fs));
  if (fs == NULL)
    die("out of memory");
  s->faults = fs;
  for (unsigned i = 0; i < sc->n_faults; i++) {
    const sim_fault *f = &sc->faults[i];
    fault_rt *r = &fs->f[i];
    if (f->kind == SIM_FAULT_KILL) {
      if (f->n_nodes > 0) {
        r->n = f->n_nodes;
        r->nodes = calloc(r->n, sizeof(*r->nodes));
        if (r->nodes == NULL)
          die("out of memory");
        for (unsigned k = 0; k < r->n; k++)
          r->nodes[k] = f->nodes[k];
      } else { /* as netlab_faults.py: rng_seed and the fault's place */
        double x = nearbyint(f->fraction * sc->nodes);
        r->n = x < 1 ? 1 : (unsigned)x;
        r->nodes = calloc(r->n, sizeof(*r->nodes));
        if (r->nodes == NULL)
          die("out of memory");
        pyrand pr;
        char seed[48];
        snprintf(seed, sizeof(seed), "%llu-%u",
                 (unsigned long long)sc->rng_seed, i);
        pyrand_seed(&pr, seed);
        pyrand_sample(&pr, sc->nodes, r->n, r->nodes);
        qsort(r->nodes, r->n, sizeof(*r->nodes), u32_cmp);
      }
      r->held_at_kill = calloc(r->n, sizeof(*r->held_at_kill));
      r->recovered = calloc(r->n, sizeof(*r->recovered));
      if (r->held_at_kill == NULL || r->recovered == NULL)
        die("out of memory");
      /* One process cannot be killed twice over. */
      for (unsigned j = 0; j < i; j++) {
        const sim_fault *g = &sc->faults[j];
        const fault_rt *q = &fs->f[j];
        if (g->kind != SIM_FAULT_KILL || f->at_s > g->end_s ||
            g->at_s > f->end_s)
          continue;
        for (unsigned a = 0; a < r->n; a++)
          for (unsigned b = 0; b < q->n; b++)
            if (r->nodes[a] == q->nodes[b]) {
              char why[128];
              snprintf(why, sizeof(why), "faults[%u]: overlaps faults[%u] "
                       "on the same process", i, j);
              die(why);
            }
      }
    }
    fs->ev[fs->n_ev++] = (fault_ev){f->at_s, 2 * i, i, 0};
    fs->ev[fs->n_ev++] = (fault_ev){f->end_s, 2 * i + 1, i, 1};
  }
  qsort(fs->ev, fs->n_ev, sizeof(fs->ev[0]), ev_cmp);
}

void faults_free(sim *s) {
  faults *fs = s->faults;
  if (fs == NULL)
    return;
  for (unsigned i = 0; i < SIM_FAULTS_MAX; i++) {
    free(fs->f[i].nodes);
    free(fs->f[i].held_at_kill);
    free(fs->f[i].recovered);
  }
  free(fs);
  s->faults = NULL;
}

double faults_next(const sim *s) {
  const faults *fs = s->faults;
  if (fs == NULL || fs->next == fs->n_ev)
    return INFINITY;
  return SIM_WARMUP_S + fs->ev[fs->next].t;
}

static uint64_t latest_published(const sim *s) {
  return s->next_version > 0 ? s->next_version - 1 : 0;
}

void faults_due(sim *s, double now) {
  faults *fs = s->faults;
  if (fs == NULL)
    return;
  double t = now - SIM_WARMUP_S;
  uint64_t latest = latest_published(s);
  while (fs->next < fs->n_ev && SIM_WARMUP_S + fs->ev[fs->next].t <= now) {
    const fault_ev *e = &fs->ev[fs->next++];
    const sim_fault *f = &s->sc.faults[e->i];
    fault_rt *r = &fs->f[e->i];
    if (!e->end) {
      if (f->kind == SIM_FAULT_KILL) {
        for (unsigned k = 0; k < r->n; k++) {
          node *n = &s->node[1 + r->nodes[k]];
          r->held_at_kill[k] = n->held;
          r->behind_at_kill += n->held < latest;
          node_kill(s, n);
        }
      } else if (f->kind == SIM_FAULT_SEED_RESTART) {
        node_kill(s, &s->node[0]);
      } /* a partition holds packets by its times (sim_path) */
      r->began = 1;
      r->began_s = t;
    } else {
      if (f->kind == SIM_FAULT_KILL) {
        for (unsigned k = 0; k < r->n; k++) {
          node *n = &s->node[1 + r->nodes[k]];
          node_restart(s, n);
          r->recovered[k] = n->held;
        }
      } else if (f->kind == SIM_FAULT_SEED_RESTART) {
        node_restart(s, &s->node[0]);
      }
      r->ended = 1;
      r->ended_s = t;
      r->pending = 1;
    }
  }
}

void faults_observe(sim *s, double now) {
  faults *fs = s->faults;
  if (fs == NULL)
    return;
  double t = now - SIM_WARMUP_S;
  uint64_t latest = latest_published(s);
  unsigned behind = 0;
  for (int i = 1; i <= (int)s->sc.nodes; i++)
    behind += s->node[i].state == NODE_LIVE && s->node[i].held < latest;
  for (unsigned i = 0; i < s->sc.n_faults; i++) {
    fault_rt *r = &fs->f[i];
    if (r->pending) {
      r->behind_at_end = behind;
      r->pending = 0;
      r->open = 1;
    }
    if (r->open && behind == 0) {
      r->converged = 1;
      r->converged_s = t - r->ended_s;
      r->converged_version = latest;
      r->open = 0;
    }
    if (s->sc.faults[i].kind == SIM_FAULT_KILL && r->began && !r->rest_done) {
      int all = 1;
      for (int k = 1; k <= (int)s->sc.nodes && all; k++) {
        int spared = s->node[k].state == NODE_LIVE;
        for (unsigned j = 0; j < r->n && spared; j++)
          spared = (int)r->nodes[j] + 1 != k;
        all = !spared || s->node[k].held >= latest;
      }
      if (all) {
        r->rest_done = 1;
        r->rest_s = t - r->began_s;
      }
    }
  }
}

int faults_done(const sim *s) {
  const faults *fs = s->faults;
  if (fs == NULL)
    return 1;
  if (fs->next < fs->n_ev)
    return 0;
  for (unsigned i = 0; i < s->sc.n_faults; i++)
    if (fs->f[i].pending || fs->f[i].open)
      return 0;
  return 1;
}

int faults_converged(const sim *s) {
  const faults *fs = s->faults;
  for (unsigned i = 0; fs != NULL && i < s->sc.n_faults; i++)
    if (!fs->f[i].converged)
      return 0;
  return 1;
}

static json_t *ms3(double x) { return json_real(round(x * 1e3) / 1e3); }

static json_t *u64_array(const uint64_t *x, unsigned n) {
  json_t *a = json_array();
  for (unsigned k = 0; k < n; k++)
    json_array_append_new(a, json_integer((json_int_t)x[k]));
  return a;
}

void *faults_json(const sim *s) {
  const faults *fs = s->faults;
  json_t *a = json_array();
  static const char *kinds[] = {"partition", "kill", "seed_restart"};
  for (unsigned i = 0; fs != NULL && i < s->sc.n_faults; i++) {
    const sim_fault *f = &s->sc.faults[i];
    const fault_rt *r = &fs->f[i];
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string(kinds[f->kind]));
    json_object_set_new(o, "at_s", json_real(f->at_s));
    if (f->kind == SIM_FAULT_PARTITION) {
      json_object_set_new(o, "a", json_string(s->sc.regions[f->a].name));
      json_object_set_new(o, "b", json_string(s->sc.regions[f->b].name));
    }
    if (f->kind == SIM_FAULT_KILL) {
      json_t *ns = json_array();
      for (unsigned k = 0; k < r->n; k++)
        json_array_append_new(ns, json_integer(r->nodes[k]));
      json_object_set_new(o, "nodes", ns);
    }
    json_object_set_new(o, "end_s", json_real(f->end_s));
    json_object_set_new(o, "began_s", r->began ? ms3(r->began_s) : json_null());
    json_object_set_new(o, "ended_s", r->ended ? ms3(r->ended_s) : json_null());
    json_object_set_new(o, "behind_at_end", r->ended && !r->pending
                                                ? json_integer(r->behind_at_end)
                                                : json_null());
    json_object_set_new(o, "converged_s",
                        r->converged ? ms3(r->converged_s) : json_null());
    json_object_set_new(o, "converged_version",
                        r->converged ? json_integer((json_int_t)
                                                        r->converged_version)
                                     : json_null());
    if (f->kind == SIM_FAULT_KILL) {
      json_object_set_new(o, "held_at_kill", r->began
                              ? u64_array(r->held_at_kill, r->n) : json_null());
      json_object_set_new(o, "behind_at_kill", r->began
                              ? json_integer(r->behind_at_kill) : json_null());
      json_object_set_new(o, "rest_converged_s",
                          r->rest_done ? ms3(r->rest_s) : json_null());
      json_object_set_new(o, "recovered", r->ended
                              ? u64_array(r->recovered, r->n) : json_null());
    }
    json_array_append_new(a, o);
  }
  return a;
}

/* ---- Routes: partitions, loss, jitter --------------------------------- */

static int host_region(const sim *s, int h) {
  return h < s->n_node ? s->node[h].region : s->node[0].region;
}

/* When a partition between the regions of A and B that holds at T ends
 * (the latest end of those that hold then), or T when none holds. */
static double cut_until(const sim *s, int ra, int rb, double t) {
  double until = t;
  for (unsigned i = 0; i < s->sc.n_faults; i++) {
    const sim_fault *f = &s->sc.faults[i];
    if (f->kind != SIM_FAULT_PARTITION ||
        !((f->a == ra && f->b == rb) || (f->a == rb && f->b == ra)))
      continue;
    double a = SIM_WARMUP_S + f->at_s, b = SIM_WARMUP_S + f->end_s;
    if (a <= t && t < b && b > until)
      until = b;
  }
  return until;
}

int sim_path_cut(const sim *s, int a, int b, double t) {
  int ra = host_region(s, a), rb = host_region(s, b);
  return ra != rb && cut_until(s, ra, rb, t) > t;
}

/* A route's one-way latency, jitter bound and loss: within a region its
 * own; across, half of each end's (a member's link carries half of its
 * region's route, as in netlab and platform.cpp) and the backbone's. */
static void route(const sim *s, int ra, int rb, double *lat, double *jit,
                  double *keep) {
  const sim_region *x = &s->sc.regions[ra], *y = &s->sc.regions[rb];
  if (ra == rb) {
    *lat = x->latency_ms / 1e3;
    *jit = x->jitter_ms / 1e3;
    *keep = 1 - x->loss_pct / 100;
    return;
  }
  *lat = (x->latency_ms + y->latency_ms) / 2e3 + s->sc.inter_latency_ms / 1e3;
  *jit = (x->jitter_ms + y->jitter_ms) / 2e3 + s->sc.inter_jitter_ms / 1e3;
  *keep = sqrt(1 - x->loss_pct / 100) * sqrt(1 - y->loss_pct / 100) *
          (1 - s->sc.inter_loss_pct / 100);
}

#define MSS 1448.0     /* TCP payload per packet on a 1500-byte link */
#define RTO_MIN_S 0.2  /* Linux's least retransmission timeout */
#define RTO_MAX_S 120.0

void sim_path(sim *s, int a, int b, size_t bytes, int bulk, double now,
              sim_route *out) {
  int ra = host_region(s, a), rb = host_region(s, b);
  double lat, jit, keep;
  route(s, ra, rb, &lat, &jit, &keep);
  out->depart = now;
  out->inflate = 1;
  out->extra = 0;
  double rtt = 2 * (lat + jit);
  /* A partition: what TCP sent into it is lost, and sent again at each
   * retransmission timeout, doubling; the first after the heal gets
   * through. */
  if (ra != rb && s->faults != NULL) {
    double rto = RTO_MIN_S + rtt, t = now;
    for (int k = 0; k < 64; k++) {
      double until = cut_until(s, ra, rb, t);
      if (until <= t)
        break;
      while (t < until) {
        t += rto;
        rto = fmin(2 * rto, RTO_MAX_S);
      }
    }
    out->depart = t;
  }
  /* Jitter: stitch-linkemu keeps each link's packets in order, so a
   * packet waits for the largest draw of those ahead of it: a bulk
   * message's last packet comes about the bound late, a lone small one
   * half of it on average (between an idle link, 0, and a busy one). */
  out->extra += bulk ? jit : jit / 2;
  /* Loss, as BBR (netlab's congestion control) pays it: the rate is kept,
   * the lost bytes are sent again (1 / (1 - p) of the bytes on every
   * link), and a message with a lost packet arrives about a round trip
   * late (the duplicate ACKs, then the retransmission; several losses in
   * one window are recovered together). */
  if (keep < 1) {
    double p = 1 - keep, packets = ceil((double)bytes / MSS);
    double any = 1 - pow(keep, packets);
    double u = (double)(sim_xorshift(&s->path_rng) >> 11) * 0x1p-53;
    if (u < any) {
      out->extra += rtt;
      s->loss_recoveries++;
    }
    if (bulk) {
      out->inflate = 1 / (1 - p);
      s->loss_resent += (double)bytes * p / (1 - p);
    }
  }
}
