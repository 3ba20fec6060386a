/* synth.h: the model and optimizer behind stitch-synth (docs/synth.md).
 *
 * Three pieces, one file each:
 *   synth_rand.c   counter-based randomness (splitmix64 finalizer, quantile
 *                  tables for normal and heavy-tailed draws)
 *   synth_model.c  a transformer-shaped set of FP32 tensors sized to a
 *                  parameter budget, and its initial weights
 *   synth_adam.c   plausible gradients and one AdamW step
 * Every random draw is a pure function of (seed, tensor, element, step), so a
 * trajectory is reproducible bit for bit and independent of iteration order.
 */
#ifndef STITCH_SYNTH_H
#define STITCH_SYNTH_H

#include <stddef.h>
#include <stdint.h>

/* ---- randomness --------------------------------------------------------- */

static inline uint64_t synth_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

#define SYNTH_GOLDEN 0x9e3779b97f4a7c15ULL

/* Sequential stream (xoshiro256**), for the few draws made once per run. */
typedef struct synth_rng {
  uint64_t s[4];
} synth_rng;

void synth_rng_seed(synth_rng *r, uint64_t key);
uint64_t synth_rng_next(synth_rng *r);
double synth_rng_uniform(synth_rng *r); /* (0, 1) */
double synth_rng_normal(synth_rng *r);  /* Box-Muller */

/* Quantile tables: a 64-bit hash becomes a draw by table lookup and linear
 * interpolation (12 index bits, 24 fraction bits), a few ns per draw. */
#define SYNTH_QBITS 12
#define SYNTH_QN (1u << SYNTH_QBITS)

typedef struct synth_qtable {
  float q[SYNTH_QN + 1];
} synth_qtable;

/* Standard normal, and a unit-variance scale mixture of normals with excess
 * kurtosis ~3 (heavy-ish tails, as minibatch gradient noise has). */
void synth_qtable_normal(synth_qtable *t);
void synth_qtable_heavy(synth_qtable *t);

static inline float synth_qdraw(const synth_qtable *t, uint64_t h) {
  uint32_t k = (uint32_t)(h >> (64 - SYNTH_QBITS));
  float f = (float)((h >> 16) & 0xffffff) * 0x1p-24f;
  return t->q[k] + f * (t->q[k + 1] - t->q[k]);
}

/* ---- model -------------------------------------------------------------- */

typedef enum synth_kind {
  SYNTH_MATRIX = 0, /* linear layer weight [out, in] */
  SYNTH_EMBED,      /* token embedding [vocab, hidden]: sparse row gradients */
  SYNTH_NORM,       /* RMSNorm weight, ~1.0 */
  SYNTH_BIAS,
} synth_kind;

#define SYNTH_NAME_MAX 96

typedef struct synth_tensor {
  char name[SYNTH_NAME_MAX];
  synth_kind kind;
  int ndim;
  uint64_t shape[2];
  uint64_t rows, cols; /* 1-D: rows = 1 */
  uint64_t numel;
  uint64_t offset; /* element offset into the masters array */
  uint64_t key;    /* per-tensor random key */
  float init_std;
  /* Gradient structure, fixed for the run (see synth_adam.c):
   * g = G_t * gmag * mrow[i] * mcol[j] * (A * srow[i] * scol[j] * P + xi). */
  float gmag;
  float *mrow, *srow; /* [rows] */
  float *mcol, *scol; /* [cols] */
  float *present;     /* SYNTH_EMBED: [rows] chance a row is in the batch */
} synth_tensor;

typedef struct synth_model {
  char preset[16];
  uint64_t hidden, ffn, vocab, heads, kv_heads, head_dim, layers;
  int biases;
  size_t count;
  synth_tensor *t;
  uint64_t numel;
} synth_model;

/* Presets: "small" (Llama-style: MHA, gated MLP, RMSNorm, untied head) and
 * "qwen" (GQA with q/k/v biases). Picks hidden size and depth so the total
 * is near PARAMS with a sane width/depth ratio. On failure writes a reason
 * into err (size errlen) and returns -1. */
int synth_model_plan(synth_model *m, const char *preset, uint64_t params,
                     uint64_t seed, char *err, size_t errlen);
/* Allocates the gradient-structure arrays; -1 on out of memory. */
int synth_model_grad_init(synth_model *m, uint64_t seed);
/* Fills W (m->numel floats) with the initial weights. */
void synth_model_init_weights(const synth_model *m, uint64_t seed, float *w);
void synth_model_free(synth_model *m);

/* ---- optimizer ---------------------------------------------------------- */

typedef struct synth_adam {
  float lr, beta1, beta2, eps, wd;
  float signal; /* A: weight of the persistent component (relative to noise) */
  float *m, *v; /* [numel], zeroed at start */
  synth_qtable normal, heavy;
  uint64_t seed;
} synth_adam;

typedef struct synth_step_stats {
  uint64_t bf16_changed; /* masters whose BF16 rounding changed this step */
  double abs_update;     /* sum of |w_new - w_old| */
} synth_step_stats;

/* Applies optimizer step T (1-based) to part PART of NPARTS of W (each
 * tensor's rows are split evenly), so threads can run disjoint parts; the
 * result does not depend on the split. Adds to st. */
void synth_adam_step(synth_adam *a, const synth_model *m, float *w, uint64_t t,
                     unsigned part, unsigned nparts, synth_step_stats *st);

#endif
