/* synth_adam.c: plausible gradients and one AdamW step.
 *
 * The gradient of element (i, j) of a tensor at step t is
 *
 *   g = G_t * gmag * mrow[i] * mcol[j] * (A * srow[i] * scol[j] * P + xi)
 *
 *   P    persistent direction, unit variance: each element drifts from one
 *        normal draw to the next over an epoch of 32 steps (cos/sin blend,
 *        so the variance stays 1), with a per-element phase so epochs do not
 *        turn over all at once. Lag-k correlation ~cos(pi k / 64): momentum
 *        matters and directions persist for tens of steps, as in RL runs
 *        that keep pushing on the same features.
 *   xi   fresh minibatch noise each step, heavy-ish tails (synth_rand.c).
 *   A    --signal, the persistent share (default 0.5): per element the
 *        noise dominates, as it does at RL batch sizes.
 *   G_t  per-step gradient-norm swing, lognormal(0.3) for the whole model
 *        times lognormal(0.1) per tensor.
 * Embedding rows whose token is absent from the batch get g = 0 (Adam still
 * moves them on momentum). The rest of the structure is in synth_model.c.
 *
 * The update is PyTorch's AdamW (decoupled weight decay, bias correction,
 * eps outside the square root), all in FP32:
 *   w *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
 *
 * Cost: three hashes, three table draws, a sqrt and a divide per element. */
#include "synth.h"

#include <math.h>
#include <string.h>

#define PI 3.14159265358979323846
#define EPOCH_LOG2 5
#define EPOCH (1u << EPOCH_LOG2)

#define KEY_PERSIST 0x70657273ULL
#define KEY_NOISE 0x6e6f6973ULL
#define KEY_ROWS 0x726f7773ULL
#define KEY_SCALE 0x7363616cULL

/* BF16 bits by round to nearest even; finite inputs only (ours are). */
static inline uint32_t bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

#define ROW_BLOCK 256
#define LANES 8

/* The AdamW update of N elements; returns the sum of |dw| and adds the
 * count of BF16 changes to *changed. Written in lanes of 8 with separate
 * accumulators, so the compiler can vectorize it without reassociating. */
static double adam_block(float *restrict w, float *restrict m,
                         float *restrict v, const float *restrict g, size_t n,
                         float b1, float b2, float step, float inv_sbc2,
                         float eps, float decay, uint64_t *changed) {
  float moved[LANES] = {0};
  uint32_t diff[LANES] = {0};
  size_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (size_t k = 0; k < LANES; k++) {
      float w0 = w[j + k], gg = g[j + k];
      float mm = b1 * m[j + k] + (1 - b1) * gg;
      float vv = b2 * v[j + k] + (1 - b2) * gg * gg;
      float w1 = w0 * decay - step * mm / (sqrtf(vv) * inv_sbc2 + eps);
      m[j + k] = mm;
      v[j + k] = vv;
      w[j + k] = w1;
      diff[k] += bf16_bits(w0) != bf16_bits(w1);
      moved[k] += fabsf(w1 - w0);
    }
  for (; j < n; j++) {
    float w0 = w[j], gg = g[j];
    float mm = b1 * m[j] + (1 - b1) * gg;
    float vv = b2 * v[j] + (1 - b2) * gg * gg;
    float w1 = w0 * decay - step * mm / (sqrtf(vv) * inv_sbc2 + eps);
    m[j] = mm;
    v[j] = vv;
    w[j] = w1;
    diff[0] += bf16_bits(w0) != bf16_bits(w1);
    moved[0] += fabsf(w1 - w0);
  }
  double sum = 0;
  for (size_t k = 0; k < LANES; k++) {
    sum += moved[k];
    *changed += diff[k];
  }
  return sum;
}

void synth_adam_step(synth_adam *a, const synth_model *m, float *w, uint64_t t,
                     unsigned part, unsigned nparts, synth_step_stats *st) {
  float blend_c[EPOCH], blend_s[EPOCH];
  for (unsigned f = 0; f < EPOCH; f++) {
    blend_c[f] = (float)cos(PI / 2 * f / EPOCH);
    blend_s[f] = (float)sin(PI / 2 * f / EPOCH);
  }
  const float b1 = a->beta1, b2 = a->beta2, eps = a->eps;
  const float step = (float)(a->lr / (1 - pow(a->beta1, (double)t)));
  const float inv_sbc2 = (float)(1 / sqrt(1 - pow(a->beta2, (double)t)));
  const float decay = 1.0f - a->lr * a->wd;
  const float sig = a->signal;
  const uint64_t tkey = synth_mix64(a->seed ^ synth_mix64(KEY_SCALE + t));
  const float g_step = expf(0.3f * synth_qdraw(&a->normal, tkey));
  const uint64_t e0 = t >> EPOCH_LOG2;

  uint64_t changed = 0;
  double moved = 0;
  float g[ROW_BLOCK];
  for (size_t ti = 0; ti < m->count; ti++) {
    const synth_tensor *tn = &m->t[ti];
    uint64_t r0 = tn->rows * part / nparts, r1 = tn->rows * (part + 1) / nparts;
    if (r0 == r1)
      continue;
    uint64_t ek[3];
    for (int k = 0; k < 3; k++)
      ek[k] = synth_mix64(tn->key ^ synth_mix64(KEY_PERSIST + e0 + k));
    const uint64_t nk = synth_mix64(tn->key ^ synth_mix64(KEY_NOISE + t));
    const uint64_t rk = synth_mix64(tn->key ^ synth_mix64(KEY_ROWS + t));
    const float g_tensor =
        g_step * tn->gmag *
        expf(0.1f * synth_qdraw(&a->normal, synth_mix64(nk ^ KEY_SCALE)));
    const uint64_t cols = tn->cols;
    for (uint64_t i = r0; i < r1; i++) {
      float mag = g_tensor * tn->mrow[i], sr = sig * tn->srow[i];
      if (tn->present != NULL &&
          (float)(synth_mix64(rk + i) >> 40) * 0x1p-24f >= tn->present[i])
        mag = 0; /* token not in this batch */
      for (uint64_t j0 = 0; j0 < cols; j0 += ROW_BLOCK) {
        size_t n = cols - j0 < ROW_BLOCK ? (size_t)(cols - j0) : ROW_BLOCK;
        /* Pass 1, scalar: hashes and table draws. */
        uint64_t ig = (i * cols + j0) * SYNTH_GOLDEN;
        const float *mc = tn->mcol + j0, *sc = tn->scol + j0;
        for (size_t j = 0; j < n; j++, ig += SYNTH_GOLDEN) {
          unsigned ph = (unsigned)(t + (ig >> (64 - EPOCH_LOG2)));
          unsigned f = ph & (EPOCH - 1);
          unsigned e = (unsigned)((ph >> EPOCH_LOG2) - e0);
          float p =
              blend_c[f] * synth_qdraw(&a->normal, synth_mix64(ek[e] + ig)) +
              blend_s[f] * synth_qdraw(&a->normal, synth_mix64(ek[e + 1] + ig));
          float xi = synth_qdraw(&a->heavy, synth_mix64(nk + ig));
          g[j] = mag * mc[j] * (sr * sc[j] * p + xi);
        }
        /* Pass 2, vectorizable: the update itself. */
        uint64_t off = tn->offset + i * cols + j0;
        moved += adam_block(w + off, a->m + off, a->v + off, g, n, b1, b2,
                            step, inv_sbc2, eps, decay, &changed);
      }
    }
  }
  st->bf16_changed += changed;
  st->abs_update += moved;
}
