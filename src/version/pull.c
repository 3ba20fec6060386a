/* pull.c: bring a weights file to the store's latest version. */
#define _GNU_SOURCE
#include "stitch/store.h"

#include "common/diag.h"
#include "version/journal.h"
#include "version/store_patch.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A file with no state, or one changed since its state was written: adopt
 * it if its view digest is a version the store holds, so weights made by
 * `stitch view` or copied by hand can join. */
static int adopt(const char *path, const stitch_store *s, stitch_wstate *st,
                 stitch_diag *d) {
  stitch_st *cur;
  CHECK_RC(stitch_st_open(path, &cur, d));
  stitch_digest view;
  int rc = stitch_view_digest(cur, &view, NULL);
  stitch_st_free(cur);
  CHECK_RC(rc);
  for (size_t i = stitch_store_count(s); i-- > 0;) {
    const stitch_vref *r = stitch_store_at(s, i);
    if (memcmp(r->m->view.b, view.b, 32) == 0) {
      *st = (stitch_wstate){r->m->swarm, r->m->version, r->id, r->m->view, 0};
      return wstate_write(path, st, d);
    }
  }
  return stitch_diag_set(d, STITCH_EBASE,
                         "%s holds no stitch state and matches no version "
                         "in the store; move it away to start from an anchor",
                         path);
}

int store_patch_open(const stitch_store *s, const stitch_vref *vr, uint32_t obj,
                     void (*progress)(void *, const char *, uint64_t, uint64_t),
                     void *progress_arg, store_patch *sp, stitch_diag *d) {
  memset(sp, 0, sizeof(*sp));
  RETURN_IF(obj >= vr->m->n_objects, d, STITCH_EINVAL, "no object %u", obj);
  const stitch_object *ob = &vr->m->objects[obj];
  CHECK_RC(stitch_patch_new(vr->m, obj, &sp->p, d));
  size_t n = (size_t)ob->n_chunks;
  sp->n = n;
  sp->bufs = calloc(n ? n : 1, sizeof(*sp->bufs));
  sp->lens = calloc(n ? n : 1, sizeof(*sp->lens));
  int rc = sp->bufs && sp->lens ? 0
                                : stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  for (size_t c = 0; rc == 0 && c < n; c++) {
    rc = stitch_store_get_chunk(s, &ob->chunks[c].hash, &sp->bufs[c],
                                &sp->lens[c], d);
    /* Hashed once on this node's path: by the put that stored it, if
     * this handle's (proofs.h), else here. */
    if (rc == 0 && store_chunk_proven(s, &ob->chunks[c].hash))
      rc = patch_add_proven(sp->p, c, sp->bufs[c], sp->lens[c], d);
    else if (rc == 0)
      rc = stitch_patch_add(sp->p, c, sp->bufs[c], sp->lens[c], d);
    /* A chunk that does not verify stays where it is: the store is its
     * owner's (a publisher's, or stitchd's, whose next put of the chunk
     * replaces it), and a reader that deleted it would turn one bad file
     * into a missing one for every other reader. */
    if (rc == STITCH_ECHECKSUM || rc == STITCH_EFORMAT ||
        rc == STITCH_ETRUNCATED) {
      stitch_diag why = d ? *d : (stitch_diag){{0}};
      char hex[65];
      stitch_digest_hex(&ob->chunks[c].hash, hex);
      rc = stitch_diag_set(d, rc,
                           "object %u, chunk %.16s...: %s (the store is "
                           "left as it is)",
                           obj, hex, why.msg);
    }
    if (rc == 0 && progress != NULL)
      progress(progress_arg, "verify chunks", c + 1, n);
  }
  if (rc != 0 && d != NULL) {
    stitch_diag why = *d;
    stitch_diag_set(d, rc, "version %" PRIu64 ": %s", vr->m->version,
                    why.msg);
  }
  if (rc != 0)
    store_patch_close(sp);
  return rc;
}

void store_patch_close(store_patch *sp) {
  stitch_patch_free(sp->p);
  for (size_t c = 0; sp->bufs != NULL && c < sp->n; c++)
    if (sp->bufs[c] != NULL)
      stitch_store_release(sp->bufs[c], sp->lens[c]);
  free(sp->bufs);
  free(sp->lens);
  memset(sp, 0, sizeof(*sp));
}

int stitch_store_apply(const stitch_store *s, const char *path,
                       const stitch_vref *vr, uint32_t obj,
                       const stitch_apply_opts *o, stitch_diag *d) {
  store_patch sp;
  CHECK_RC(store_patch_open(s, vr, obj, o ? o->progress : NULL,
                            o ? o->progress_arg : NULL, &sp, d));
  int rc = stitch_weights_apply(path, vr, obj, sp.p, o, d);
  store_patch_close(&sp);
  return rc;
}

int stitch_pull(const char *dir, const stitch_pubkey *swarm, const char *path,
                const stitch_apply_opts *o, stitch_pull_result *res,
                stitch_diag *d) {
  stitch_pull_result tmp;
  res = res ? res : &tmp;
  memset(res, 0, sizeof(*res));
  CHECK_RC(stitch_weights_recover(path, &res->recovered, d));
  stitch_store *s;
  CHECK_RC(stitch_store_open(dir, swarm, 0, &s, d));
  int rc = 0;
  uint64_t latest = stitch_store_latest(s);
  if (latest == 0)
    rc = stitch_diag_set(d, STITCH_ENOTFOUND, "%s holds no version yet", dir);
  stitch_wstate st;
  memset(&st, 0, sizeof(st));
  stitch_diag sub;
  if (rc == 0) {
    rc = stitch_weights_state(path, &st, &sub);
    if ((rc == 0 && st.stale) || (rc == STITCH_ENOTFOUND && access(path, F_OK) == 0))
      rc = adopt(path, s, &st, d); /* identify the bytes by their digest */
    else if (rc == STITCH_ENOTFOUND)
      rc = 0; /* nothing yet: start from an anchor */
    else if (rc != 0 && d != NULL)
      *d = sub;
  }
  if (rc == 0 && st.version > 0 && memcmp(st.swarm.b, swarm->b, 32) != 0)
    rc = stitch_diag_set(d, STITCH_ESWARM,
                         "%s holds weights of another swarm", path);
  res->from = st.version;
  res->to = latest;
  if (rc == 0)
    rc = stitch_plan_path(stitch_store_at(s, 0), stitch_store_count(s),
                          st.version, &st.id, latest, &res->plan, d);
  for (size_t k = 0; rc == 0 && k < res->plan.n; k++) {
    const stitch_plan_step *step = &res->plan.step[k];
    rc = stitch_store_apply(s, path, stitch_store_find(s, step->version),
                            step->object, o, d);
  }
  stitch_store_close(s);
  return rc;
}
