/* stitch/store.h: the version store, the catch-up planner, publishing, and
 * transactional apply to a weights file (proto/store.md, docs/versions.md).
 */
#ifndef STITCH_STORE_H
#define STITCH_STORE_H

#include "stitch/version.h"

#include "stitch/export.h"

#ifdef __cplusplus
extern "C" {
#endif
STITCH_API_BEGIN

/* ---- The store: a content-addressed directory ------------------------- */

typedef struct stitch_store stitch_store;

/* A verified manifest with its id (the hash of its signed bytes). */
typedef struct stitch_vref {
  const stitch_manifest *m;
  stitch_digest id;
} stitch_vref;

/* Opens DIR for swarm SWARM, creating it when CREATE is set. Loads and
 * verifies every manifest (signature, swarm, fields); a manifest that does
 * not verify, or two manifests with one version number, make the open fail.
 */
int stitch_store_open(const char *dir, const stitch_pubkey *swarm, int create,
                      stitch_store **out, stitch_diag *d);
void stitch_store_close(stitch_store *s);

/* The newest version the store holds, every manifest verified (0: none):
 * what a reader pulls to. It does not trust the `latest` file, which is
 * not signed: a `latest` moved back by hand holds no reader back. */
uint64_t stitch_store_latest(const stitch_store *s);
/* The version the `latest` file names (0: there is none). The publisher's
 * record of the last version it finished; stitch_store_verify reports one
 * below stitch_store_latest. */
uint64_t stitch_store_latest_named(const stitch_store *s);

/* Reading a store another process writes (a publisher, a node agent),
 * without opening it: what stitchd's seed watches. Nothing is verified
 * here; whoever uses the bytes verifies them (stitch_manifest_open). */

/* The signed bytes of the manifest of VERSION with id ID in the store at
 * DIR; *out is malloc'd (free()), at most STITCH_MANIFEST_MAX bytes.
 * STITCH_ENOTFOUND when the store holds no such manifest. */
int stitch_store_read_manifest(const char *dir, uint64_t version,
                               const stitch_digest *id, uint8_t **out,
                               size_t *len, stitch_diag *d);

typedef struct stitch_store_entry {
  uint64_t version;
  stitch_digest id;
} stitch_store_entry;

/* The manifests of the store at DIR above version AFTER, up to the version
 * its `latest` file names (a publisher moves `latest` once every file of
 * a version is durable), ascending by version; *latest gets that version
 * (0: no `latest` yet). *out is malloc'd (free()), NULL when *n is 0. */
int stitch_store_scan(const char *dir, uint64_t after,
                      stitch_store_entry **out, size_t *n, uint64_t *latest,
                      stitch_diag *d);
/* Versions held, ascending; the store owns them. The refs are one array:
 * stitch_store_at(s, 0) is its start (for stitch_plan_path). */
size_t stitch_store_count(const stitch_store *s);
const stitch_vref *stitch_store_at(const stitch_store *s, size_t i);
/* NULL when the store does not hold that version. */
const stitch_vref *stitch_store_find(const stitch_store *s, uint64_t version);

/* Writes a chunk (after checking BUF hashes to HASH): whole (temporary,
 * rename) but not fsynced, so after a power loss it may be empty or short
 * (stitch_store_sync makes every chunk written so far durable). A chunk
 * already present is left alone if its bytes still hash to HASH, and
 * replaced if not: how the store's owner repairs a chunk that went bad. */
int stitch_store_put_chunk(stitch_store *s, const stitch_digest *hash,
                           const uint8_t *buf, size_t len, stitch_diag *d);
/* Makes every chunk written so far durable, with one syncfs of the store's
 * filesystem. */
int stitch_store_sync(stitch_store *s, stitch_diag *d);
/* Maps a chunk read-only into *buf / *len; release with
 * stitch_store_release. The bytes are not re-hashed here (the patch does). */
int stitch_store_get_chunk(const stitch_store *s, const stitch_digest *hash,
                           const uint8_t **buf, size_t *len, stitch_diag *d);
/* The same, for bytes sent on: a chunk this handle has not written or
 * checked since it opened is hashed first, and one that does not hash to
 * its name (a crash's short file, a bad disk) is STITCH_ECHECKSUM. */
int stitch_store_get_chunk_checked(const stitch_store *s,
                                   const stitch_digest *hash,
                                   const uint8_t **buf, size_t *len,
                                   stitch_diag *d);
void stitch_store_release(const uint8_t *buf, size_t len);
/* Removes a chunk. For the store's owner only: readers (stitch_pull,
 * stitch_store_apply, stitch_store_verify) never change the store. */
void stitch_store_drop_chunk(const stitch_store *s, const stitch_digest *hash);
int stitch_store_has_chunk(const stitch_store *s, const stitch_digest *hash);
/* Verifies a signed manifest and adds it. Refuses a version at or below one
 * held under another id (STITCH_EROLLBACK). Adding the same bytes twice is
 * a no-op. */
int stitch_store_put_manifest(stitch_store *s, const uint8_t *buf, size_t len,
                              stitch_diag *d);
/* Advances `latest` once every chunk of VERSION is held. Never backwards:
 * VERSION below what `latest` names is refused (STITCH_EROLLBACK) and the
 * file is left as it is. */
int stitch_store_set_latest(stitch_store *s, uint64_t version, stitch_diag *d);
/* Drops versions older than the retention window: KEEP versions back from
 * latest, extended back to the newest anchor at or before the window's
 * start, so that every kept version stays reachable. Chunks no kept version
 * needs are removed. */
int stitch_store_gc(stitch_store *s, unsigned keep, stitch_diag *d);
/* The same window counted back from NEWEST instead of `latest`: a node's
 * store, which holds only the objects its plans needed, keeps what it can
 * serve around the version its weights hold. */
int stitch_store_retain(stitch_store *s, uint64_t newest, unsigned keep,
                        stitch_diag *d);

/* Checks the whole store: `latest` (when the file exists) names the newest
 * version held (STITCH_EROLLBACK if it is behind); every chunk of every
 * object is present, hashes to its name and parses; every version's parent
 * is held under the id it names (or is older than everything held); every
 * delta or cumulative object's base is held under the id and view digest
 * it names (or is older than everything held); every version is reachable
 * from nothing. *chunks counts the chunks checked. Reads only. */
int stitch_store_verify(const stitch_store *s, uint64_t *chunks,
                        stitch_diag *d);

/* ---- Catch-up planning ------------------------------------------------ */

#define STITCH_PLAN_MAX 64

typedef struct stitch_plan_step {
  uint64_t version;
  uint32_t object;  /* index into the manifest's objects */
  uint64_t bytes;
} stitch_plan_step;

typedef struct stitch_plan {
  size_t n;
  stitch_plan_step step[STITCH_PLAN_MAX];
  uint64_t bytes; /* sum over the steps */
} stitch_plan;

/* The fewest bytes that take a node from FROM (version 0: nothing) to TO,
 * given verified manifests V[0..n) in ascending version order. FROM_ID is
 * the id of the node's version (ignored for 0). Fails with STITCH_EROLLBACK
 * when TO is below FROM or V holds FROM under another id, and STITCH_EGAP
 * when no chain of objects connects them. */
int stitch_plan_path(const stitch_vref *v, size_t n, uint64_t from,
                     const stitch_digest *from_id, uint64_t to,
                     stitch_plan *out, stitch_diag *d);

/* ---- Publishing ------------------------------------------------------- */

typedef struct stitch_publish_opts {
  size_t chunk_bytes;        /* 0: STITCH_CHUNK_DEFAULT */
  unsigned max_chain;        /* deltas after an anchor before the next
                                anchor; 0: 32 */
  double anchor_ratio;       /* anchor when delta >= ratio x anchor; 0: 0.5 */
  unsigned cumulative_every; /* cumulative delta from the last anchor every
                                this many versions; 0: 4; -1u: never */
  unsigned keep;             /* retention window in versions; 0: 16 */
  unsigned threads;          /* 0: all CPUs */
  uint64_t time_unix;        /* 0: now */
  int sparse_mode;           /* the delta encoder's (stitch/delta.h):
                                0 (STITCH_SPARSE_FAST), or
                                STITCH_SPARSE_FASTEST for a busy trainer */
  void (*progress)(void *arg, const char *what, uint64_t done,
                   uint64_t total);
  void *progress_arg;
} stitch_publish_opts;

typedef struct stitch_publish_result {
  uint64_t version;
  stitch_digest id;
  uint64_t view_bytes;  /* bytes of the tensors */
  size_t n_objects;
  stitch_obj_kind kind[STITCH_MAX_OBJECTS];
  uint64_t base[STITCH_MAX_OBJECTS];
  uint64_t bytes[STITCH_MAX_OBJECTS];
  uint64_t chunks[STITCH_MAX_OBJECTS];
} stitch_publish_result;

/* Makes CKPT the next version in the store at DIR (created if missing),
 * signed with SK. The publisher keeps a copy of the previous view (and of
 * the last anchor's) under DIR/publisher to diff against. Crash-safe: the
 * `latest` pointer moves only after every file is durable. */
int stitch_publish(const char *dir, const stitch_seckey *sk,
                   const stitch_st *ckpt, const stitch_publish_opts *opts,
                   stitch_publish_result *res, stitch_diag *d);

/* ---- Weights files: state, journal, apply ----------------------------- */

/* What a weights file holds, recorded in PATH.stitch-state. */
typedef struct stitch_wstate {
  stitch_pubkey swarm;
  uint64_t version;
  stitch_digest id;
  stitch_digest view;
  /* Set by stitch_weights_state when the file's size, mtime or inode
   * differ from when the state was written: something else changed the
   * weights, so the state cannot be trusted until they are digested. */
  int stale;
} stitch_wstate;

/* Reads the state (STITCH_ENOTFOUND when there is none). */
int stitch_weights_state(const char *path, stitch_wstate *st, stitch_diag *d);
/* Finishes or undoes an apply that a crash interrupted (PATH.stitch-journal),
 * leaving the file at exactly one version, after stitch_weights_sweep.
 * *recovered (may be NULL) is set when there was a journal to settle. A
 * file with no journal (and no state) is nothing to recover: 0. */
int stitch_weights_recover(const char *path, int *recovered, stitch_diag *d);
/* Removes the temporaries of PATH, PATH.stitch-state and
 * PATH.stitch-journal (PATH.tmp.<pid>.XXXXXX and so on) whose writing
 * process is gone, as a kill -9 during an apply leaves them; those of a
 * live process stay. *removed (may be NULL) counts the files removed.
 * Every pull, apply and recover does this first. */
int stitch_weights_sweep(const char *path, unsigned *removed, stitch_diag *d);

typedef struct stitch_apply_opts {
  unsigned threads;
  /* Testing hook: stop (return STITCH_EIO) after this many in-place writes;
   * 0: never. Lets tests cut an apply short at chosen points. */
  uint64_t fail_after;
  void (*progress)(void *arg, const char *what, uint64_t done,
                   uint64_t total);
  void *progress_arg;
} stitch_apply_opts;

/* Applies a complete patch of object OBJ of version VR to the weights file
 * at PATH as one transaction: in place through an undo journal when the
 * layout allows, otherwise by writing a new file. The file must hold the
 * object's base (any, or none, for an anchor). Every tensor digest is
 * checked before the state records VR; on any failure the file is left at
 * its old version. */
int stitch_weights_apply(const char *path, const stitch_vref *vr, size_t obj,
                         const stitch_patch *p, const stitch_apply_opts *o,
                         stitch_diag *d);

/* Applies object OBJ of version VR to the weights at PATH with the chunks
 * store S holds: each is checked against the manifest, and one that fails
 * fails the apply (STITCH_ECHECKSUM, STITCH_EFORMAT or STITCH_ETRUNCATED,
 * naming the chunk) with S left as it is; then stitch_weights_apply. S is
 * only read: its owner repairs a bad chunk by putting a good copy
 * (stitch_store_put_chunk replaces one that does not hash to its name). */
int stitch_store_apply(const stitch_store *s, const char *path,
                       const stitch_vref *vr, uint32_t obj,
                       const stitch_apply_opts *o, stitch_diag *d);

typedef struct stitch_pull_result {
  uint64_t from, to;
  stitch_plan plan;
  int recovered;
} stitch_pull_result;

/* Brings the weights file at PATH from its version to the store's latest
 * (stitch_store_latest: the newest signed version), along the cheapest
 * plan, verifying every signature, chunk and digest. Recovers and sweeps
 * PATH first (stitch_weights_recover). Reads the store, never writes it. */
int stitch_pull(const char *dir, const stitch_pubkey *swarm, const char *path,
                const stitch_apply_opts *o, stitch_pull_result *res,
                stitch_diag *d);

STITCH_API_END
#ifdef __cplusplus
}
#endif
#endif
