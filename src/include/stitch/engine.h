/* stitch/engine.h: bringing an engine's own memory to a new version in two
 * phases, so that its pause is only the write (docs/python.md "Two phases").
 *
 * stitch_prepared_new runs while the engine serves and writes nothing into
 * its tensors. It plans the path from the version they hold, verifies every
 * chunk, decodes every changed block against the tensors into private
 * memory, and keeps per tensor the elements that change (positions, new
 * values, and the old values they replace); several steps compose into one
 * such list. It then digests each result by streaming the tensor with the
 * list laid over it (stitch_tensor_digests_patched) and refuses a result
 * that does not match the manifest.
 *
 * stitch_prepared_commit is the pause: a scatter, whose cost grows with
 * the number of changes, not with the model. A C or C++ engine prepares on
 * a thread of its own and commits under its own lock; the Python adapter
 * (python/stitch/engine.py) reads the lists through stitch_prepared_tensor,
 * puts them on the tensors' device while the engine serves, and in the
 * pause writes them all in one stitch_gpu_apply_batch (stitch/gpu.h), or
 * with torch; an engine in C with its weights on a GPU can do the same.
 *
 * A tensor that held nothing (version 0), one an anchor rewrites, or one
 * whose list would take more memory than the tensor, is kept whole
 * instead: its new bytes, copied in by the commit. */
#ifndef STITCH_ENGINE_H
#define STITCH_ENGINE_H

#include "stitch/store.h"

#include "stitch/export.h"

#ifdef __cplusplus
extern "C" {
#endif
STITCH_API_BEGIN

typedef struct stitch_prepared stitch_prepared;

typedef struct stitch_prepared_info {
  uint64_t from, to;   /* versions */
  stitch_digest to_id; /* TO's manifest id */
  size_t n_tensors;    /* in TO's manifest: the order of DATA */
  size_t steps;        /* objects along the plan */
  uint64_t blocks;     /* changed blocks decoded, every step */
  uint64_t fetched;    /* bytes of those objects (the plan's) */
  uint64_t changes;    /* listed elements, every tensor */
  uint64_t whole;      /* tensors kept whole */
  uint64_t held_bytes; /* private memory: lists, old values, whole tensors */
  uint64_t old_bytes;  /* of which old values (what a revert writes) */
  int committed;
} stitch_prepared_info;

/* Tensor I's prepared change. */
typedef struct stitch_prepared_tensor {
  stitch_sparse sp;     /* positions and new values; n = 0: none listed */
  const uint8_t *old;   /* sp.n * sp.width bytes: the values they replace */
  const uint8_t *whole; /* not NULL: the tensor's new bytes, all of them
                           (sp.n is then 0) */
  const uint8_t *whole_old; /* with WHOLE: the old bytes, or NULL when the
                               tensors held no version (nothing to revert) */
} stitch_prepared_tensor;

/* Prepares the move of an engine's tensors from HELD (whose manifest id is
 * HELD_ID; 0 and NULL: they hold nothing) to TO, along the cheapest plan in
 * S (stitch_plan_path). DATA[i] and NBYTES[i] are the engine's memory for
 * tensor i of TO's manifest (stitch_store_find(s, to)->m->tensors[i]);
 * every step's tensors must be among them, with the same dtype and shape
 * (STITCH_EMISMATCH). DATA is only read, on up to THREADS threads (0: one
 * per online CPU); it must not change until the commit.
 * A bad chunk fails as stitch_store_apply's do. A result whose digest is not
 * the manifest's, or a block of verified chunks that does not decode
 * against the engine's bytes, is STITCH_EDIGEST, and BAD (NULL, or TO's
 * tensor count of bytes) gets 1 for each such tensor, 0 for the others:
 * the tensors did not hold HELD. S may be closed once this
 * returns; *out owns its memory and is NULL on error. */
int stitch_prepared_new(const stitch_store *s, uint64_t held,
                        const stitch_digest *held_id, uint64_t to,
                        const uint8_t *const *data, const uint64_t *nbytes,
                        unsigned threads, uint8_t *bad, stitch_prepared **out,
                        stitch_diag *d);
void stitch_prepared_free(stitch_prepared *p);

void stitch_prepared_summary(const stitch_prepared *p,
                             stitch_prepared_info *out);
/* I below info.n_tensors; the pointers live as long as P. */
void stitch_prepared_tensor_at(const stitch_prepared *p, size_t i,
                               stitch_prepared_tensor *out);

/* Writes the prepared changes into DATA, the same memory as prepared
 * (another address is STITCH_EMISMATCH, before anything is written), on up
 * to THREADS threads. The engine must not read DATA meanwhile. Once: a
 * second commit is STITCH_EINVAL. It cannot fail once it starts writing. */
int stitch_prepared_commit(stitch_prepared *p, uint8_t *const *data,
                           unsigned threads, stitch_diag *d);
/* Puts back what the commit overwrote (the old values kept at prepare), so
 * that DATA holds HELD again: for an engine whose commit must be undone
 * after it returned (another shard's failed). STITCH_EINVAL before a commit,
 * or when the tensors held nothing. The commit may then be made again. */
int stitch_prepared_revert(stitch_prepared *p, uint8_t *const *data,
                           unsigned threads, stitch_diag *d);

STITCH_API_END
#ifdef __cplusplus
}
#endif
#endif
