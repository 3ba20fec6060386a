/* synth_model.c: a transformer-shaped checkpoint sized to a parameter budget.
 *
 * Names and layouts follow Hugging Face Llama/Qwen2 checkpoints (weights are
 * [out_features, in_features]), so tools that special-case norms, biases or
 * embeddings see what they would see in a real model. Every matrix's last dim
 * is a multiple of 64, so fp8 blocks and nvfp4's 16-element blocks apply;
 * norms and biases are 1-D, which the quantized views keep in BF16.
 *
 * Initial weights stand in for a pretrained checkpoint, not a fresh one:
 * matrices are N(0, 0.02^2) with a per-row lognormal scale (sigma 0.25), as
 * trained rows differ in norm; norm weights are exp(N(0, 0.1^2)), around 1.0;
 * biases N(0, 0.02^2). What matters for absorption is |w| relative to the
 * learning rate, and std 0.02 keeps that the same at every model size. */
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Key domains, so streams for different purposes never coincide. */
#define KEY_TENSOR 0x74656e73ULL
#define KEY_INIT 0x696e6974ULL
#define KEY_GRAD 0x67726164ULL

typedef struct dims {
  uint64_t d, ff, vocab, heads, kv, hd, layers, total;
} dims;

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static uint64_t per_layer(const dims *s, int biases) {
  uint64_t kvd = s->kv * s->hd;
  uint64_t n = 2 * s->d * s->d + 2 * kvd * s->d; /* q, o; k, v */
  n += 3 * s->d * s->ff;                         /* gate, up, down */
  n += 2 * s->d;                                 /* two norms */
  if (biases)
    n += s->d + 2 * kvd;
  return n;
}

static uint64_t outer(const dims *s) { return 2 * s->vocab * s->d + s->d; }

/* Fills everything but layers for hidden size D. */
static void shape_for(dims *s, uint64_t d, uint64_t params, int gqa) {
  s->d = d;
  s->hd = d >= 2048 ? 128 : 64;
  s->heads = d / s->hd;
  s->kv = s->heads;
  if (gqa) {
    uint64_t want = s->heads / 4 ? s->heads / 4 : 1;
    while (s->heads % want != 0)
      want--;
    s->kv = want;
  }
  s->ff = round_up(8 * d / 3, 64);
  s->vocab = 8 * d < 32768 ? 8 * d : 32768;
  /* Tiny budgets: the embedding and head get at most half of it. */
  uint64_t cap = params / (4 * d) / 64 * 64;
  if (cap < 64)
    cap = 64;
  if (s->vocab > cap)
    s->vocab = cap;
}

int synth_model_plan(synth_model *m, const char *preset, uint64_t params,
                     uint64_t seed, char *err, size_t errlen) {
  memset(m, 0, sizeof(*m));
  int gqa;
  if (strcmp(preset, "small") == 0)
    gqa = 0;
  else if (strcmp(preset, "qwen") == 0)
    gqa = 1;
  else {
    snprintf(err, errlen, "unknown --model '%s' (small, qwen)", preset);
    return -1;
  }
  m->biases = gqa;
  snprintf(m->preset, sizeof(m->preset), "%s", preset);

  /* Width and depth: the candidate closest to the budget, with a mild
   * preference for about 100 hidden units per layer (Llama-7B has 128). */
  dims best = {0};
  double best_score = INFINITY;
  for (uint64_t d = 64; d <= 16384; d += d >= 2048 ? 128 : 64) {
    dims s;
    shape_for(&s, d, params, gqa);
    uint64_t pl = per_layer(&s, m->biases), o = outer(&s);
    double l = params > o ? (double)(params - o) / (double)pl : 0;
    s.layers = (uint64_t)(l + 0.5);
    if (s.layers < 1)
      s.layers = 1;
    if (s.layers > 512)
      continue;
    s.total = o + s.layers * pl;
    double score = fabs(log((double)s.total / (double)params)) +
                   0.1 * fabs(log((double)d / (double)s.layers / 100.0));
    if (score < best_score) {
      best_score = score;
      best = s;
    }
  }
  if (best.d == 0 || best.total > 2 * params || 2 * best.total < params) {
    snprintf(err, errlen, "cannot shape a model of %llu params",
             (unsigned long long)params);
    return -1;
  }
  m->hidden = best.d;
  m->ffn = best.ff;
  m->vocab = best.vocab;
  m->heads = best.heads;
  m->kv_heads = best.kv;
  m->head_dim = best.hd;
  m->layers = best.layers;

  size_t cap = 4 + m->layers * 12;
  m->t = calloc(cap, sizeof(*m->t));
  if (m->t == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  uint64_t kvd = m->kv_heads * m->head_dim, d = m->hidden;
#define ADD(kind_, r_, c_, ...)                                               \
  do {                                                                        \
    synth_tensor *t_ = &m->t[m->count++];                                     \
    snprintf(t_->name, sizeof(t_->name), __VA_ARGS__);                        \
    t_->kind = (kind_);                                                       \
    t_->rows = (r_);                                                          \
    t_->cols = (c_);                                                          \
  } while (0)
  ADD(SYNTH_EMBED, m->vocab, d, "model.embed_tokens.weight");
  for (uint64_t l = 0; l < m->layers; l++) {
    const char *p = "model.layers";
    unsigned long long li = (unsigned long long)l;
    ADD(SYNTH_NORM, 1, d, "%s.%llu.input_layernorm.weight", p, li);
    ADD(SYNTH_MATRIX, d, d, "%s.%llu.self_attn.q_proj.weight", p, li);
    if (m->biases)
      ADD(SYNTH_BIAS, 1, d, "%s.%llu.self_attn.q_proj.bias", p, li);
    ADD(SYNTH_MATRIX, kvd, d, "%s.%llu.self_attn.k_proj.weight", p, li);
    if (m->biases)
      ADD(SYNTH_BIAS, 1, kvd, "%s.%llu.self_attn.k_proj.bias", p, li);
    ADD(SYNTH_MATRIX, kvd, d, "%s.%llu.self_attn.v_proj.weight", p, li);
    if (m->biases)
      ADD(SYNTH_BIAS, 1, kvd, "%s.%llu.self_attn.v_proj.bias", p, li);
    ADD(SYNTH_MATRIX, d, d, "%s.%llu.self_attn.o_proj.weight", p, li);
    ADD(SYNTH_NORM, 1, d, "%s.%llu.post_attention_layernorm.weight", p, li);
    ADD(SYNTH_MATRIX, m->ffn, d, "%s.%llu.mlp.gate_proj.weight", p, li);
    ADD(SYNTH_MATRIX, m->ffn, d, "%s.%llu.mlp.up_proj.weight", p, li);
    ADD(SYNTH_MATRIX, d, m->ffn, "%s.%llu.mlp.down_proj.weight", p, li);
  }
  ADD(SYNTH_NORM, 1, d, "model.norm.weight");
  ADD(SYNTH_MATRIX, m->vocab, d, "lm_head.weight");
#undef ADD

  uint64_t off = 0;
  for (size_t i = 0; i < m->count; i++) {
    synth_tensor *t = &m->t[i];
    int one_d = t->kind == SYNTH_NORM || t->kind == SYNTH_BIAS;
    t->ndim = one_d ? 1 : 2;
    t->shape[0] = one_d ? t->cols : t->rows;
    t->shape[1] = t->cols;
    t->numel = t->rows * t->cols;
    t->offset = off;
    off += t->numel;
    t->key = synth_mix64(seed ^ synth_mix64(KEY_TENSOR + i));
    t->init_std = 0.02f;
  }
  m->numel = off;
  return 0;
}

static float lognormal(synth_rng *r, double sigma) {
  return (float)exp(sigma * synth_rng_normal(r));
}

/* Gradient structure (see synth_adam.c for how it is used):
 *   gmag        per-tensor gradient magnitude, 1e-3 x lognormal(0.5)
 *   mrow, mcol  per-row and per-column magnitudes, lognormal(0.5): Adam
 *               mostly normalizes these away, as it does in training
 *   srow, scol  per-row and per-column strength of the persistent signal
 *               relative to the noise, lognormal(0.5): rows that see a
 *               consistent gradient drift at ~lr a step, noisy ones less
 *   present     embedding rows: the chance a token occurs in a batch,
 *               falling off like a Zipfian vocabulary (min(1, 64/sqrt(i+1)));
 *               absent rows get a zero gradient that step. */
int synth_model_grad_init(synth_model *m, uint64_t seed) {
  for (size_t i = 0; i < m->count; i++) {
    synth_tensor *t = &m->t[i];
    t->mrow = malloc(t->rows * sizeof(float));
    t->srow = malloc(t->rows * sizeof(float));
    t->mcol = malloc(t->cols * sizeof(float));
    t->scol = malloc(t->cols * sizeof(float));
    if (!t->mrow || !t->srow || !t->mcol || !t->scol)
      return -1;
    synth_rng r;
    synth_rng_seed(&r, t->key ^ synth_mix64(KEY_GRAD ^ seed));
    t->gmag = 1e-3f * lognormal(&r, 0.5);
    int one_d = t->rows == 1;
    for (uint64_t k = 0; k < t->rows; k++) {
      t->mrow[k] = one_d ? 1.0f : lognormal(&r, 0.5);
      t->srow[k] = one_d ? 1.0f : lognormal(&r, 0.5);
    }
    for (uint64_t k = 0; k < t->cols; k++) {
      t->mcol[k] = lognormal(&r, 0.5);
      t->scol[k] = lognormal(&r, 0.5);
    }
    if (t->kind == SYNTH_EMBED) {
      t->present = malloc(t->rows * sizeof(float));
      if (t->present == NULL)
        return -1;
      for (uint64_t k = 0; k < t->rows; k++) {
        double q = 64.0 / sqrt((double)k + 1);
        t->present[k] = (float)(q < 1 ? q : 1);
      }
    }
  }
  return 0;
}

void synth_model_init_weights(const synth_model *m, uint64_t seed, float *w) {
  synth_qtable table; /* 16 KiB */
  const synth_qtable *nt = &table;
  synth_qtable_normal(&table);
  for (size_t i = 0; i < m->count; i++) {
    const synth_tensor *t = &m->t[i];
    uint64_t key = t->key ^ synth_mix64(KEY_INIT ^ seed);
    synth_rng r;
    synth_rng_seed(&r, key);
    float *p = w + t->offset;
    for (uint64_t row = 0; row < t->rows; row++) {
      float rs = t->kind == SYNTH_MATRIX || t->kind == SYNTH_EMBED
                     ? lognormal(&r, 0.25)
                     : 1.0f;
      for (uint64_t c = 0; c < t->cols; c++) {
        uint64_t idx = row * t->cols + c;
        float z = synth_qdraw(nt, synth_mix64(key + idx * SYNTH_GOLDEN));
        if (t->kind == SYNTH_NORM)
          p[idx] = expf(0.1f * z);
        else
          p[idx] = t->init_std * rs * z;
      }
    }
  }
}

void synth_model_free(synth_model *m) {
  if (m == NULL || m->t == NULL)
    return;
  for (size_t i = 0; i < m->count; i++) {
    free(m->t[i].mrow);
    free(m->t[i].srow);
    free(m->t[i].mcol);
    free(m->t[i].scol);
    free(m->t[i].present);
  }
  free(m->t);
  m->t = NULL;
}
