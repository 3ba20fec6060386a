/* chunk.c: chunks (proto/chunk.md). A delta object is cut into chunks that
 * decode on their own, and a patch gathers one object's chunks, checks them
 * and applies them.
 *
 * A chunk lists the changed blocks of a range of the object's blocks, each
 * with its coding, payload length, change count and XXH3-64, then the
 * payloads. What else a block needs (dtype, flags, block size) is in the
 * signed manifest, so a chunk decodes without its neighbours, and a peer
 * checks it against its name (BLAKE2b-256) before parsing a byte of it.
 *
 * Parsing still trusts nothing in the chunk (the signer may be buggy): the
 * entry count is compared with the blocks of the range and with the bytes
 * there are before anything is allocated for it, every block must lie in
 * the range, no block of a NEW tensor may be left out, and the payload
 * lengths must add up to the chunk exactly. */
#include "stitch/version.h"

#include "codec/delta_internal.h"
#include "common/bytes.h"
#include "common/diag.h"
#include "common/parallel.h"
#include "version/store_patch.h"

#include <stdlib.h>
#include <string.h>

#define CK_MAGIC "STITCHCK"
#define CK_FORMAT 1
#define CK_HEADER 16 /* magic, format, flags, reserved */
/* The smallest entry: gap, coding, length and changed of one byte each,
 * and the 8-byte checksum. */
#define CK_MIN_ENTRY 12

typedef unsigned long long ull;

static size_t varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

/* ---- Cutting a delta into chunks -------------------------------------- */

/* One changed block of the delta, in object order. */
typedef struct ck_listed {
  const delta_entry *e;
  uint32_t b;   /* block within its tensor */
  uint64_t g;   /* block within the object */
  uint64_t gap; /* g minus (previous listed block + 1) */
} ck_listed;

static uint64_t listed_payload(const ck_listed *l) {
  return l->e->payload_len[l->b];
}

static uint64_t listed_entry(const ck_listed *l) {
  return varint_len(l->gap) + 1 + varint_len(listed_payload(l)) +
         varint_len(l->e->blk_changed[l->b]) + 8;
}

/* Writes the chunk of entries L[0..n) into a malloc'd buffer of SIZE. */
static int write_chunk(const stitch_delta *dl, const ck_listed *l, size_t n,
                       uint64_t size, uint8_t **out) {
  dbuf b = {NULL, 0, 0, (size_t)size};
  uint8_t h[CK_HEADER] = {0};
  memcpy(h, CK_MAGIC, 8);
  h[8] = CK_FORMAT;
  int rc = dbuf_reserve(&b, (size_t)size);
  if (rc == 0)
    rc = dbuf_put(&b, h, sizeof(h));
  if (rc == 0)
    rc = dbuf_varint(&b, n);
  for (size_t i = 0; i < n && rc == 0; i++) {
    const delta_entry *e = l[i].e;
    rc = dbuf_varint(&b, l[i].gap);
    if (rc == 0)
      rc = dbuf_u8(&b, e->coding[l[i].b]);
    if (rc == 0)
      rc = dbuf_varint(&b, e->payload_len[l[i].b]);
    if (rc == 0)
      rc = dbuf_varint(&b, e->blk_changed[l[i].b]);
    if (rc == 0)
      rc = dbuf_u64(&b, e->checksum[l[i].b]);
  }
  for (size_t i = 0; i < n && rc == 0; i++)
    rc = dbuf_put(&b, dl->buf + l[i].e->payload_off[l[i].b],
                  (size_t)listed_payload(&l[i]));
  if (rc == 0 && b.len != size)
    rc = STITCH_EINVAL; /* the size computed above is wrong: a bug */
  if (rc != 0) {
    dbuf_free(&b);
    return rc;
  }
  *out = b.p;
  return 0;
}

/* Groups the N listed blocks greedily into chunks of at most TARGET bytes
 * (a block that alone exceeds it gets its own chunk) and writes them into
 * obj->chunks and bufs, counting obj->n_chunks as it goes. */
static int cut(const stitch_delta *dl, const ck_listed *l, size_t n,
               uint64_t total, size_t target, stitch_object *obj,
               uint8_t **bufs, stitch_diag *d) {
  uint64_t first = 0;
  for (size_t s = 0; s < n;) {
    size_t e = s;
    uint64_t body = 0; /* entries and payloads */
    do {
      body += listed_entry(&l[e]) + listed_payload(&l[e]);
      e++;
    } while (e < n && CK_HEADER + varint_len(e + 1 - s) + body +
                              listed_entry(&l[e]) + listed_payload(&l[e]) <=
                          target);
    uint64_t size = CK_HEADER + varint_len(e - s) + body;
    RETURN_IF(size > STITCH_CHUNK_MAX, d, STITCH_ELIMIT,
              "tensor '%s' block %u alone makes a chunk of %llu bytes, over "
              "the %u-byte limit (use smaller blocks)",
              l[s].e->pub.name, l[s].b, (ull)size, STITCH_CHUNK_MAX);
    RETURN_IF(obj->n_chunks >= STITCH_MAX_CHUNKS, d, STITCH_ELIMIT,
              "more than %u chunks: use a larger chunk size",
              STITCH_MAX_CHUNKS);
    uint64_t end = e == n ? total : l[e - 1].g + 1;
    stitch_chunk_ref *ref = &obj->chunks[obj->n_chunks];
    int rc = write_chunk(dl, l + s, e - s, size, &bufs[obj->n_chunks]);
    RETURN_IF(rc != 0, d, rc, "chunk %llu: %s", (ull)obj->n_chunks,
              stitch_strerror(rc));
    stitch_hash(bufs[obj->n_chunks], (size_t)size, &ref->hash);
    ref->size = size;
    ref->first_block = first;
    ref->n_blocks = end - first;
    obj->bytes += size;
    obj->n_chunks++;
    first = end;
    s = e;
  }
  return 0;
}

/* Lists the changed blocks of DL (*l malloc'd) and counts all blocks. */
static int list_blocks(const stitch_delta *dl, ck_listed **l, size_t *n,
                       uint64_t *total, stitch_diag *d) {
  size_t count = 0;
  for (size_t i = 0; i < dl->count; i++) {
    const stitch_delta_tensor *t = &dl->t[i].pub;
    count += t->blocks - t->blocks_by_coding[STITCH_CODING_SAME];
  }
  *l = malloc((count ? count : 1) * sizeof(**l));
  RETURN_IF(*l == NULL, d, STITCH_ENOMEM, "out of memory");
  uint64_t g = 0, next = 0;
  size_t k = 0;
  for (size_t i = 0; i < dl->count; i++) {
    const delta_entry *e = &dl->t[i];
    for (uint32_t b = 0; b < e->pub.blocks; b++, g++) {
      if (e->coding[b] == STITCH_CODING_SAME)
        continue;
      (*l)[k++] = (ck_listed){e, b, g, g - next};
      next = g + 1;
    }
  }
  *n = k;
  *total = g;
  return 0;
}

int stitch_chunks_from_delta(const stitch_delta *dl, size_t target,
                             stitch_object *obj, uint8_t ***bufs,
                             stitch_diag *d) {
  *bufs = NULL;
  obj->block_log2 = dl->block_log2;
  obj->tflags = NULL;
  obj->n_chunks = 0;
  obj->chunks = NULL;
  obj->bytes = 0;
  if (target == 0)
    target = STITCH_CHUNK_DEFAULT;
  RETURN_IF(target > STITCH_CHUNK_MAX, d, STITCH_EINVAL,
            "chunk size %zu exceeds the %u-byte limit", target,
            STITCH_CHUNK_MAX);
  ck_listed *l = NULL;
  size_t n = 0;
  uint64_t total = 0;
  CHECK_RC(list_blocks(dl, &l, &n, &total, d));
  size_t cap = n ? n : 1;
  obj->tflags = malloc(dl->count ? dl->count : 1);
  obj->chunks = calloc(cap, sizeof(*obj->chunks));
  *bufs = calloc(cap, sizeof(**bufs));
  int rc = 0;
  if (obj->tflags == NULL || obj->chunks == NULL || *bufs == NULL)
    rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  for (size_t i = 0; i < dl->count && rc == 0; i++)
    obj->tflags[i] = dl->t[i].flags;
  if (rc == 0)
    rc = cut(dl, l, n, total, target, obj, *bufs, d);
  free(l);
  if (rc != 0) {
    stitch_chunks_free(*bufs, obj->n_chunks);
    *bufs = NULL;
    stitch_object_clear(obj);
  }
  return rc;
}

void stitch_chunks_free(uint8_t **bufs, uint64_t n) {
  if (bufs == NULL)
    return;
  for (uint64_t i = 0; i < n; i++)
    free(bufs[i]);
  free(bufs);
}

void stitch_object_clear(stitch_object *obj) {
  if (obj == NULL)
    return;
  free(obj->tflags);
  free(obj->chunks);
  obj->tflags = NULL;
  obj->chunks = NULL;
  obj->n_chunks = 0;
  obj->bytes = 0;
}

/* ---- Patches ------------------------------------------------------------ */

/* One changed block of a chunk that was added. */
typedef struct ck_block {
  const uint8_t *payload; /* into the chunk's buffer */
  uint64_t len, changed, checksum;
  uint64_t tensor, local; /* manifest tensor, block within it */
  uint8_t coding;
} ck_block;

typedef struct ck_chunk {
  ck_block *blk; /* [n]; NULL until added */
  uint64_t n;
  uint64_t k0; /* the patch block number of blk[0], once complete */
  int added;
} ck_chunk;

typedef struct ck_tensor {
  uint64_t first;      /* object block index of its first block */
  uint64_t new_before; /* blocks of NEW tensors before it */
  uint64_t symbols;
  sym_fmt f;
  int is_new;
} ck_tensor;

struct stitch_patch {
  const stitch_manifest *m;
  const stitch_object *o;
  uint64_t B;     /* symbols per block */
  uint64_t total; /* blocks in the object */
  ck_tensor *t;   /* [n_tensors + 1]; the last one only ends the list */
  ck_chunk *c;    /* [n_chunks] */
  uint64_t missing;
  uint64_t listed; /* blocks listed by the chunks added so far */
  size_t scratch;
};

/* The tensor holding object block g < total: the last one starting at or
 * before it (tensors without blocks start where the next one does). */
static uint64_t tensor_of(const stitch_patch *p, uint64_t g) {
  uint64_t lo = 0, hi = p->m->n_tensors;
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (p->t[mid].first <= g)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* Blocks of NEW tensors before object block g <= total. */
static uint64_t new_before(const stitch_patch *p, uint64_t g) {
  if (g >= p->total)
    return p->t[p->m->n_tensors].new_before;
  const ck_tensor *t = &p->t[tensor_of(p, g)];
  return t->new_before + (t->is_new ? g - t->first : 0);
}

static int setup_tensors(stitch_patch *p, stitch_diag *d) {
  const stitch_manifest *m = p->m;
  uint64_t g = 0, nb = 0;
  size_t largest = 1;
  for (uint64_t i = 0; i < m->n_tensors; i++) {
    const stitch_mtensor *mt = &m->tensors[i];
    ck_tensor *t = &p->t[i];
    uint8_t fl = p->o->tflags[i];
    size_t es = stitch_dtype_size(mt->dtype);
    RETURN_IF(es == 0, d, STITCH_EDTYPE, "tensor %llu: unknown dtype %d",
              (ull)i, (int)mt->dtype);
    RETURN_IF(fl & ~(DELTA_TF_NIBBLE | DELTA_TF_NEW) ||
                  sym_fmt_for(mt->dtype, fl & DELTA_TF_NIBBLE, &t->f) != 0,
              d, STITCH_EFORMAT, "tensor %llu: bad delta flags %u", (ull)i, fl);
    /* The bound keeps 2 x nbytes and every block's byte offset in range. */
    RETURN_IF(mt->nbytes % es != 0 || mt->nbytes > UINT64_MAX / 16, d,
              STITCH_EFORMAT, "tensor %llu: %llu bytes of %s", (ull)i,
              (ull)mt->nbytes, stitch_dtype_name(mt->dtype));
    t->symbols = fl & DELTA_TF_NIBBLE ? 2 * mt->nbytes : mt->nbytes / es;
    t->is_new = (fl & DELTA_TF_NEW) != 0;
    t->first = g;
    t->new_before = nb;
    uint64_t blocks = t->symbols / p->B + (t->symbols % p->B != 0);
    RETURN_IF(blocks > UINT64_MAX - g, d, STITCH_ELIMIT,
              "object: too many blocks");
    g += blocks;
    nb += t->is_new ? blocks : 0;
    if (mt->nbytes > largest)
      largest = mt->nbytes < SIZE_MAX ? (size_t)mt->nbytes : SIZE_MAX;
  }
  p->t[m->n_tensors].first = g;
  p->t[m->n_tensors].new_before = nb;
  p->total = g;
  /* Scratch holds one dense block, which is never larger than a tensor. */
  size_t work = (size_t)8 << p->o->block_log2;
  p->scratch = work < largest ? work : largest;
  return 0;
}

/* Blocks [a, b) are in no entry of chunk CI (SIZE_MAX: in no chunk's
 * range): none may be a NEW tensor's, which has no base to stay as. */
static int check_left_out(const stitch_patch *p, size_t ci, uint64_t a,
                          uint64_t b, stitch_diag *d) {
  if (new_before(p, a) == new_before(p, b))
    return 0;
  /* Name the first NEW tensor with a block in [a, b). */
  uint64_t i = tensor_of(p, a);
  while (!p->t[i].is_new || p->t[i + 1].first <= a ||
         p->t[i + 1].first == p->t[i].first)
    i++;
  const char *name = p->m->tensors[i].name;
  if (ci == SIZE_MAX)
    return stitch_diag_set(d, STITCH_EFORMAT,
                           "object: blocks of new tensor '%s' are in no "
                           "chunk",
                           name);
  return stitch_diag_set(d, STITCH_EFORMAT,
                         "chunk %zu: leaves out a block of new tensor '%s'", ci,
                         name);
}

/* Chunk ranges are in order and do not overlap; blocks between them are
 * unchanged (our writer leaves no gaps, proto/manifest.md allows them). */
static int setup_chunks(stitch_patch *p, stitch_diag *d) {
  const stitch_object *o = p->o;
  uint64_t at = 0; /* the first block after the previous range */
  for (uint64_t j = 0; j < o->n_chunks; j++) {
    const stitch_chunk_ref *r = &o->chunks[j];
    RETURN_IF(r->first_block < at || r->n_blocks == 0 ||
                  r->first_block > p->total ||
                  r->n_blocks > p->total - r->first_block,
              d, STITCH_EFORMAT,
              "chunk %llu: blocks %llu+%llu overlap the previous chunk's or "
              "pass the object's %llu",
              (ull)j, (ull)r->first_block, (ull)r->n_blocks, (ull)p->total);
    RETURN_IF(r->size == 0 || r->size > STITCH_CHUNK_MAX, d, STITCH_EFORMAT,
              "chunk %llu: size %llu is out of range", (ull)j, (ull)r->size);
    CHECK_RC(check_left_out(p, SIZE_MAX, at, r->first_block, d));
    at = r->first_block + r->n_blocks;
  }
  return check_left_out(p, SIZE_MAX, at, p->total, d);
}

int stitch_patch_new(const stitch_manifest *m, size_t obj, stitch_patch **out,
                     stitch_diag *d) {
  *out = NULL;
  RETURN_IF(m == NULL || obj >= m->n_objects || m->objects == NULL, d,
            STITCH_EINVAL, "the manifest has no object %zu", obj);
  const stitch_object *o = &m->objects[obj];
  RETURN_IF(o->block_log2 < DELTA_MIN_BLOCK_LOG2 ||
                o->block_log2 > DELTA_MAX_BLOCK_LOG2,
            d, STITCH_EFORMAT, "object %zu: bad block size 2^%u", obj,
            o->block_log2);
  RETURN_IF(m->n_tensors > 0 && (m->tensors == NULL || o->tflags == NULL), d,
            STITCH_EINVAL, "object %zu: no tensors or flags", obj);
  RETURN_IF(o->n_chunks > STITCH_MAX_CHUNKS ||
                (o->n_chunks > 0 && o->chunks == NULL),
            d, STITCH_EINVAL, "object %zu: bad chunk list", obj);
  RETURN_IF(m->n_tensors >= SIZE_MAX / sizeof(ck_tensor), d, STITCH_ELIMIT,
            "too many tensors");
  stitch_patch *p = calloc(1, sizeof(*p));
  RETURN_IF(p == NULL, d, STITCH_ENOMEM, "out of memory");
  p->m = m;
  p->o = o;
  p->B = 1ull << o->block_log2;
  p->missing = o->n_chunks;
  p->t = calloc((size_t)m->n_tensors + 1, sizeof(*p->t));
  p->c = calloc(o->n_chunks ? (size_t)o->n_chunks : 1, sizeof(*p->c));
  int rc = 0;
  if (p->t == NULL || p->c == NULL)
    rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  if (rc == 0)
    rc = setup_tensors(p, d);
  if (rc == 0)
    rc = setup_chunks(p, d);
  if (rc != 0) {
    stitch_patch_free(p);
    return rc;
  }
  *out = p;
  return 0;
}

void stitch_patch_free(stitch_patch *p) {
  if (p == NULL)
    return;
  for (uint64_t j = 0; p->c != NULL && j < p->o->n_chunks; j++)
    free(p->c[j].blk);
  free(p->c);
  free(p->t);
  free(p);
}

/* Reads entry k of chunk CI; *next is the first block it may name. */
static int parse_entry(const stitch_patch *p, size_t ci, rd *r, uint64_t k,
                       uint64_t *next, ck_block *out, stitch_diag *d) {
  const stitch_chunk_ref *ref = &p->o->chunks[ci];
  uint64_t end = ref->first_block + ref->n_blocks, gap;
  RETURN_IF(rd_varint(r, &gap), d, STITCH_ETRUNCATED,
            "chunk %zu: entry %llu is truncated", ci, (ull)k);
  RETURN_IF(gap >= end - *next, d, STITCH_EFORMAT,
            "chunk %zu: entry %llu lies past the chunk's blocks", ci, (ull)k);
  uint64_t g = *next + gap;
  CHECK_RC(check_left_out(p, ci, *next, g, d));
  out->tensor = tensor_of(p, g);
  const ck_tensor *t = &p->t[out->tensor];
  const char *name = p->m->tensors[out->tensor].name;
  out->local = g - t->first;
  uint64_t left = t->symbols - out->local * p->B;
  uint64_t syms = left < p->B ? left : p->B;
  RETURN_IF(rd_u8(r, &out->coding) || rd_varint(r, &out->len) ||
                rd_varint(r, &out->changed) || rd_u64(r, &out->checksum),
            d, STITCH_ETRUNCATED, "chunk %zu: entry %llu is truncated", ci,
            (ull)k);
  RETURN_IF(
      out->coding == STITCH_CODING_SAME || out->coding >= STITCH_CODING_COUNT_,
      d, STITCH_EFORMAT, "chunk %zu: tensor '%s' block %llu has bad coding %u",
      ci, name, (ull)out->local, out->coding);
  RETURN_IF(t->is_new && out->coding != STITCH_CODING_PLANES &&
                out->coding != STITCH_CODING_RAW,
            d, STITCH_EFORMAT,
            "chunk %zu: new tensor '%s' uses a coding that needs a base", ci,
            name);
  RETURN_IF(out->changed > syms, d, STITCH_EFORMAT,
            "chunk %zu: tensor '%s' block %llu claims more changes than "
            "symbols",
            ci, name, (ull)out->local);
  *next = g + 1;
  return 0;
}

static int parse_entries(const stitch_patch *p, size_t ci, rd *r, ck_block *blk,
                         uint64_t n, stitch_diag *d) {
  const stitch_chunk_ref *ref = &p->o->chunks[ci];
  uint64_t next = ref->first_block, paid = 0;
  for (uint64_t k = 0; k < n; k++) {
    CHECK_RC(parse_entry(p, ci, r, k, &next, &blk[k], d));
    /* r->pos only grows, so this bounds paid before it can wrap. */
    RETURN_IF(blk[k].len > r->len - r->pos ||
                  paid > r->len - r->pos - blk[k].len,
              d, STITCH_ETRUNCATED,
              "chunk %zu: payloads run past the end of the chunk", ci);
    paid += blk[k].len;
  }
  CHECK_RC(check_left_out(p, ci, next, ref->first_block + ref->n_blocks, d));
  size_t rest = r->len - r->pos;
  RETURN_IF(paid > rest, d, STITCH_ETRUNCATED,
            "chunk %zu: payloads of %llu bytes run past its %zu last bytes", ci,
            (ull)paid, rest);
  RETURN_IF(paid < rest, d, STITCH_EFORMAT,
            "chunk %zu: %llu bytes after the last payload", ci,
            (ull)(rest - paid));
  const uint8_t *at = r->p + r->pos;
  for (uint64_t k = 0; k < n; k++) {
    blk[k].payload = at;
    at += blk[k].len;
  }
  return 0;
}

static int parse_chunk(stitch_patch *p, size_t ci, const uint8_t *buf,
                       size_t len, stitch_diag *d) {
  const stitch_chunk_ref *ref = &p->o->chunks[ci];
  rd r = {buf, len, 0};
  const uint8_t *h;
  RETURN_IF(rd_bytes(&r, CK_HEADER, &h), d, STITCH_ETRUNCATED,
            "chunk %zu: %zu bytes, shorter than its header", ci, len);
  RETURN_IF(memcmp(h, CK_MAGIC, 8) != 0, d, STITCH_EFORMAT,
            "chunk %zu: not a stitch chunk (bad magic)", ci);
  unsigned fmt = h[8] | h[9] << 8;
  RETURN_IF(fmt != CK_FORMAT, d, STITCH_EVERSION,
            "chunk %zu: format %u, this build reads %d", ci, fmt, CK_FORMAT);
  RETURN_IF(h[10] | h[11] | h[12] | h[13] | h[14] | h[15], d, STITCH_EVERSION,
            "chunk %zu: unknown flags", ci);
  uint64_t n;
  RETURN_IF(rd_varint(&r, &n), d, STITCH_ETRUNCATED,
            "chunk %zu: bad entry count", ci);
  RETURN_IF(n > ref->n_blocks, d, STITCH_EFORMAT,
            "chunk %zu: %llu entries for a range of %llu blocks", ci, (ull)n,
            (ull)ref->n_blocks);
  RETURN_IF(n > (r.len - r.pos) / CK_MIN_ENTRY, d, STITCH_ETRUNCATED,
            "chunk %zu: %llu entries do not fit in its %zu bytes", ci, (ull)n,
            len);
  ck_block *blk = malloc((n ? (size_t)n : 1) * sizeof(*blk));
  RETURN_IF(blk == NULL, d, STITCH_ENOMEM, "out of memory");
  int rc = parse_entries(p, ci, &r, blk, n, d);
  if (rc != 0) {
    free(blk);
    return rc;
  }
  p->c[ci].blk = blk;
  p->c[ci].n = n;
  return 0;
}

static int patch_add(stitch_patch *p, size_t index, const uint8_t *buf,
                     size_t len, int proven, stitch_diag *d) {
  const stitch_object *o = p->o;
  RETURN_IF(index >= o->n_chunks, d, STITCH_EINVAL,
            "chunk %zu: the object has %llu chunks", index, (ull)o->n_chunks);
  ck_chunk *c = &p->c[index];
  RETURN_IF(c->added, d, STITCH_EEXISTS, "chunk %zu: added twice", index);
  const stitch_chunk_ref *ref = &o->chunks[index];
  RETURN_IF(len != ref->size, d, STITCH_ECHECKSUM,
            "chunk %zu: size %zu, the manifest says %llu", index, len,
            (ull)ref->size);
  if (!proven) {
    stitch_digest h;
    stitch_hash(buf, len, &h);
    RETURN_IF(memcmp(h.b, ref->hash.b, sizeof(h.b)) != 0, d, STITCH_ECHECKSUM,
              "chunk %zu: hash mismatch", index);
  }
  CHECK_RC(parse_chunk(p, index, buf, len, d));
  c->added = 1;
  p->listed += c->n;
  if (--p->missing == 0) {
    uint64_t k = 0;
    for (uint64_t j = 0; j < o->n_chunks; j++) {
      p->c[j].k0 = k;
      k += p->c[j].n;
    }
  }
  return 0;
}

int stitch_patch_add(stitch_patch *p, size_t index, const uint8_t *buf,
                     size_t len, stitch_diag *d) {
  return patch_add(p, index, buf, len, 0, d);
}

int patch_add_proven(stitch_patch *p, size_t index, const uint8_t *buf,
                     size_t len, stitch_diag *d) {
  return patch_add(p, index, buf, len, 1, d);
}

uint64_t stitch_patch_missing(const stitch_patch *p) { return p->missing; }

uint64_t stitch_patch_block_count(const stitch_patch *p) {
  return p->missing ? 0 : p->listed;
}

/* Block k < listed of a complete patch. */
static const ck_block *block_k(const stitch_patch *p, uint64_t k) {
  uint64_t lo = 0, hi = p->o->n_chunks;
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (p->c[mid].k0 <= k)
      lo = mid;
    else
      hi = mid;
  }
  return &p->c[lo].blk[k - p->c[lo].k0];
}

static block_span span_of(const stitch_patch *p, const ck_block *b) {
  const ck_tensor *t = &p->t[b->tensor];
  block_span sp = {b->local * p->B, 0};
  sp.n = t->symbols - sp.start < p->B ? t->symbols - sp.start : p->B;
  return sp;
}

/* Where block B lies in its tensor, in bytes. */
static stitch_patch_block bytes_of(const stitch_patch *p, const ck_block *b) {
  unsigned bits = p->t[b->tensor].f.bits, sb = bits <= 8 ? 1 : bits / 8;
  block_span sp = span_of(p, b);
  stitch_patch_block out = {b->tensor, 0, 0};
  out.byte_off = bits == 4 ? sp.start / 2 : sp.start * sb;
  out.byte_len = bits == 4 ? sp.n / 2 : sp.n * sb;
  return out;
}

void stitch_patch_block_at(const stitch_patch *p, uint64_t k,
                           stitch_patch_block *out) {
  memset(out, 0, sizeof(*out));
  if (!p->missing && k < p->listed)
    *out = bytes_of(p, block_k(p, k));
}

size_t stitch_patch_scratch_bytes(const stitch_patch *p) { return p->scratch; }

/* Decodes block B into BLOCK, its own bytes (blocks are independent, so
 * the span starts at 0 there). */
static int decode(const stitch_patch *p, const ck_block *b, uint8_t *block,
                  uint8_t *scratch, stitch_diag *d) {
  block_span sp = {0, span_of(p, b).n};
  return delta_block_decode(
      &p->t[b->tensor].f, sp, b->coding, b->payload, (size_t)b->len, b->changed,
      b->checksum, block, scratch, p->m->tensors[b->tensor].name, b->local, d);
}

int stitch_patch_decode_block(const stitch_patch *p, uint64_t k, uint8_t *block,
                              uint8_t *scratch, stitch_diag *d) {
  RETURN_IF(p->missing, d, STITCH_EINVAL, "patch: %llu chunks missing",
            (ull)p->missing);
  RETURN_IF(k >= p->listed, d, STITCH_EINVAL,
            "patch: no block %llu (it has %llu)", (ull)k, (ull)p->listed);
  return decode(p, block_k(p, k), block, scratch, d);
}

/* Every changed block is one work item. */
typedef struct patch_job {
  const stitch_patch *p;
  uint8_t *const *data;
} patch_job;

static int apply_item(void *ctx, size_t item, uint8_t *scratch,
                      stitch_diag *d) {
  patch_job *j = ctx;
  const ck_block *b = block_k(j->p, item);
  return decode(j->p, b, j->data[b->tensor] + bytes_of(j->p, b).byte_off,
                scratch, d);
}

int stitch_patch_apply(const stitch_patch *p, uint8_t *const *data,
                       const uint64_t *nbytes, unsigned threads,
                       stitch_diag *d) {
  RETURN_IF(p->missing, d, STITCH_EINVAL, "patch: %llu chunks missing",
            (ull)p->missing);
  const stitch_manifest *m = p->m;
  for (uint64_t i = 0; i < m->n_tensors; i++)
    RETURN_IF(nbytes[i] != m->tensors[i].nbytes, d, STITCH_EMISMATCH,
              "tensor '%s': %llu bytes given, the manifest says %llu",
              m->tensors[i].name, (ull)nbytes[i], (ull)m->tensors[i].nbytes);
  patch_job j = {p, data};
  return stitch_parallel_diag((size_t)p->listed, threads, p->scratch,
                              apply_item, &j, d);
}
