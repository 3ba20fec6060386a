/* verify.c: check a whole store. */
#include "stitch/store.h"

#include "common/diag.h"

#include <inttypes.h>
#include <string.h>

/* Every chunk of every object is present, hashes to its name and parses;
 * every version's parent is held (or older than everything held); every
 * version is reachable from nothing. */
int stitch_store_verify(const stitch_store *s, uint64_t *chunks,
                        stitch_diag *d) {
  size_t n = stitch_store_count(s);
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

