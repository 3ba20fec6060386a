/* synth_rand.c: randomness for stitch-synth.
 *
 * Per-element draws are counter-based (a hash of seed, tensor, element and
 * step), so no generator state is carried between steps and threads can
 * split the work any way they like. A hash becomes a draw through a
 * quantile table rather than Box-Muller: a lookup and a lerp cost a few ns,
 * which is most of the per-element budget at 1e8 elements a step. The table
 * has 4096 bins; the outer bins end at the 1/262144 quantiles (about 4.6
 * sigma for the normal), far enough for gradient noise. */
#include "synth.h"

#include <math.h>

#define PI 3.14159265358979323846
#define SQRT2 1.41421356237309504880

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void synth_rng_seed(synth_rng *r, uint64_t key) {
  uint64_t z = key;
  for (int i = 0; i < 4; i++) {
    z += SYNTH_GOLDEN;
    r->s[i] = synth_mix64(z);
  }
}

uint64_t synth_rng_next(synth_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

double synth_rng_uniform(synth_rng *r) {
  return ((double)(synth_rng_next(r) >> 11) + 0.5) * 0x1p-53;
}

double synth_rng_normal(synth_rng *r) {
  /* One of the pair is dropped: init draws are not the hot path. */
  double u1 = synth_rng_uniform(r), u2 = synth_rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * PI * u2);
}

typedef struct mixture {
  int n;
  double w[2], sd[2];
} mixture;

static double mix_cdf(const mixture *mx, double x) {
  double c = 0;
  for (int i = 0; i < mx->n; i++)
    c += mx->w[i] * 0.5 * erfc(-x / (mx->sd[i] * SQRT2));
  return c;
}

static double mix_quantile(const mixture *mx, double p) {
  double lo = -40, hi = 40;
  for (int i = 0; i < 200 && hi - lo > 1e-12; i++) {
    double mid = 0.5 * (lo + hi);
    if (mix_cdf(mx, mid) < p)
      lo = mid;
    else
      hi = mid;
  }
  return 0.5 * (lo + hi);
}

static void fill(synth_qtable *t, const mixture *mx) {
  const double tail = 1.0 / ((double)SYNTH_QN * 64);
  for (unsigned k = 0; k <= SYNTH_QN; k++) {
    double p = (double)k / SYNTH_QN;
    if (k == 0)
      p = tail;
    else if (k == SYNTH_QN)
      p = 1 - tail;
    t->q[k] = (float)mix_quantile(mx, p);
  }
}

void synth_qtable_normal(synth_qtable *t) {
  mixture mx = {1, {1, 0}, {1, 0}};
  fill(t, &mx);
}

void synth_qtable_heavy(synth_qtable *t) {
  /* 90% N(0, s^2) + 10% N(0, (2.5 s)^2), s set for unit variance:
   * kurtosis 3 * (0.9 + 0.1 * 2.5^4) / (0.9 + 0.1 * 2.5^2)^2 ~ 6.2. */
  double s = 1.0 / sqrt(0.9 + 0.1 * 6.25);
  mixture mx = {2, {0.9, 0.1}, {s, 2.5 * s}};
  fill(t, &mx);
}
