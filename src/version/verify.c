/* verify.c: check a whole store. Reads only. */
#include "stitch/store.h"

#include "common/diag.h"

#include <inttypes.h>
#include <string.h>

/* Object O of M applies to a base the store holds under the id and the
 * view digest the object names. Signatures alone do not give this: the
 * trainer's key can sign a delta that names the wrong base, and a node
 * would learn of it only when the apply is refused. A base older than
 * everything held (retention) cannot be checked and is skipped. */
static int check_base(const stitch_store *s, const stitch_manifest *m,
                      uint32_t o, stitch_diag *d) {
  const stitch_object *ob = &m->objects[o];
  if (ob->kind == STITCH_OBJ_ANCHOR ||
      ob->base_version < stitch_store_at(s, 0)->m->version)
    return 0;
  const char *kind = stitch_obj_kind_name(ob->kind);
  const stitch_vref *b = stitch_store_find(s, ob->base_version);
  RETURN_IF(b == NULL, d, STITCH_EGAP,
            "version %" PRIu64 " object %u: its base, version %" PRIu64
            ", is missing",
            m->version, o, ob->base_version);
  RETURN_IF(memcmp(b->id.b, ob->base_id.b, 32) != 0, d, STITCH_EBASE,
            "version %" PRIu64 " object %u: a %s from version %" PRIu64
            " under another id than the store's version %" PRIu64,
            m->version, o, kind, ob->base_version, ob->base_version);
  RETURN_IF(memcmp(b->m->view.b, ob->base_view.b, 32) != 0, d, STITCH_EBASE,
            "version %" PRIu64 " object %u: a %s from version %" PRIu64
            " whose base view digest is not version %" PRIu64 "'s",
            m->version, o, kind, ob->base_version, ob->base_version);
  return 0;
}

/* `latest` names the newest version held, or is absent (a node's store
 * has none); every version's parent is held (or older than everything
 * held) under the id it names; every object's base likewise; every chunk
 * of every object is present, hashes to its name and parses; every version
 * is reachable from nothing. */
int stitch_store_verify(const stitch_store *s, uint64_t *chunks,
                        stitch_diag *d) {
  size_t n = stitch_store_count(s);
  uint64_t named = stitch_store_latest_named(s);
  uint64_t newest = stitch_store_latest(s);
  /* Readers go to the newest version anyway, but a `latest` behind it
   * means the file was moved back by hand (a rollback attempt) or a
   * publish stopped between the manifest and `latest`. */
  RETURN_IF(named != 0 && named < newest, d, STITCH_EROLLBACK,
            "latest names version %" PRIu64 ", but the store holds signed "
            "versions up to %" PRIu64 ": moved back, or a publish did not "
            "finish",
            named, newest);
  for (size_t i = 0; i < n; i++) {
    const stitch_vref *r = stitch_store_at(s, i);
    const stitch_manifest *m = r->m;
    if (i > 0 && m->parent_version >= stitch_store_at(s, 0)->m->version) {
      const stitch_vref *p = stitch_store_find(s, m->parent_version);
      if (p == NULL)
        return stitch_diag_set(d, STITCH_EGAP,
                               "version %" PRIu64 ": parent %" PRIu64
                               " is missing",
                               m->version, m->parent_version);
      if (memcmp(p->id.b, m->parent_id.b, 32) != 0)
        return stitch_diag_set(d, STITCH_EROLLBACK,
                               "version %" PRIu64 " names another parent "
                               "than the store's version %" PRIu64 ": a fork",
                               m->version, m->parent_version);
    }
    for (uint32_t o = 0; o < m->n_objects; o++)
      CHECK_RC(check_base(s, m, o, d));
    for (uint32_t o = 0; o < m->n_objects; o++) {
      stitch_patch *p;
      CHECK_RC(stitch_patch_new(m, o, &p, d));
      int rc = 0;
      for (uint64_t c = 0; rc == 0 && c < m->objects[o].n_chunks; c++) {
        const uint8_t *buf;
        size_t len;
        rc = stitch_store_get_chunk(s, &m->objects[o].chunks[c].hash, &buf,
                                    &len, d);
        if (rc == 0) {
          rc = stitch_patch_add(p, (size_t)c, buf, len, d);
          stitch_store_release(buf, len);
          ++*chunks;
        }
      }
      stitch_patch_free(p);
      if (rc != 0) {
        stitch_diag why = d ? *d : (stitch_diag){{0}};
        return stitch_diag_set(d, rc, "version %" PRIu64 " object %u: %s",
                               m->version, o, why.msg);
      }
    }
    stitch_plan plan;
    CHECK_RC(stitch_plan_path(stitch_store_at(s, 0), n, 0, NULL, m->version,
                              &plan, d));
  }
  return 0;
}
