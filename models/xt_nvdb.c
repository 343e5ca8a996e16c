/* NanoVDB grids (xt_nvdb.h): the .nvdb file reader and the checks that make a grid from an
 * untrusted file safe to traverse.
 *
 * The file (NanoVDB 32.4, util/IO.h) is a sequence of segments: a 16-byte header (u64 magic
 * "NanoVDB0", u32 version, u16 grid count, u16 codec), then per grid 176 bytes of metadata and its
 * name, then the grid blobs (codec NONE: the grid's bytes; ZIP: u64 size + a zlib stream). One
 * grid is kept, as its own blob: PNanoVDB reads it in place on the host and the same bytes are
 * uploaded to the GPU.
 *
 * Traversal follows offsets stored in the file, so before anything reads the grid every node is
 * visited once and checked to lie inside the blob (root tiles -> upper -> lower -> leaves, each
 * level's count capped by the tree's own node counts, so a file whose offsets alias cannot make
 * the walk explode). The same walk decodes every active value: mu must be finite, label ids
 * must name an entry of the table. The checksum is NanoVDB's GridChecksum: CRC-32 of the header
 * part ("partial", what the builder and nanovdb_convert write) and, when present, of the nodes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <zlib.h>

#include "xt_model_kind.h"
#include "xt_nvdb.h"
#include "xt_nvdb_access.h"

_Static_assert(PNANOVDB_GRID_TYPE_FLOAT == XT_NVDB_FLOAT && PNANOVDB_GRID_TYPE_INT16 == XT_NVDB_INT16 &&
                   PNANOVDB_GRID_TYPE_FP4 == XT_NVDB_FP4 && PNANOVDB_GRID_TYPE_FP8 == XT_NVDB_FP8 &&
                   PNANOVDB_GRID_TYPE_FP16 == XT_NVDB_FP16 && PNANOVDB_GRID_TYPE_FPN == XT_NVDB_FPN &&
                   PNANOVDB_GRID_TYPE_INDEX == XT_NVDB_INDEX,
               "xt_nvdb.h grid types are PNanoVDB's");
_Static_assert(PNANOVDB_GRID_SIZE == 672 && PNANOVDB_TREE_SIZE == 64 && PNANOVDB_GRIDBLINDMETADATA_SIZE == 288,
               "NanoVDB 32.4 layout");

#define FILE_HEADER 16
#define FILE_META 176
#define GRID_NAME_MAX 256
#define NANOVDB_MAJOR 32u
#define CRC_EMPTY 0xffffffffu

/* ------------------------------------------------------------------------------------------ */
/* Little helpers over the blob                                                               */
/* ------------------------------------------------------------------------------------------ */

static uint32_t u32at(const uint8_t *b, uint64_t off) {
  uint32_t v;
  memcpy(&v, b + off, 4);
  return v;
}
static uint64_t u64at(const uint8_t *b, uint64_t off) {
  uint64_t v;
  memcpy(&v, b + off, 8);
  return v;
}
static int32_t i32at(const uint8_t *b, uint64_t off) {
  int32_t v;
  memcpy(&v, b + off, 4);
  return v;
}
static pnanovdb_address_t addr(uint64_t off) {
  pnanovdb_address_t a = {off};
  return a;
}
static double f64at(const uint8_t *b, uint64_t off) {
  double v;
  memcpy(&v, b + off, 8);
  return v;
}

const char *xt_nvdb_type_name(uint32_t t) {
  switch (t) {
  case XT_NVDB_FLOAT: return "float";
  case XT_NVDB_INT16: return "int16";
  case XT_NVDB_FP4: return "fp4";
  case XT_NVDB_FP8: return "fp8";
  case XT_NVDB_FP16: return "fp16";
  case XT_NVDB_FPN: return "fpN";
  case XT_NVDB_INDEX: return "index";
  }
  return "unsupported";
}

static int supported(uint32_t t) {
  return t == XT_NVDB_FLOAT || t == XT_NVDB_INT16 || t == XT_NVDB_FP4 || t == XT_NVDB_FP8 || t == XT_NVDB_FP16 ||
         t == XT_NVDB_FPN || t == XT_NVDB_INDEX;
}

/* NanoVDB's names for the grid types it has (GridType in NanoVDB.h), for the error message. */
static const char *nanovdb_type_name(uint32_t t) {
  static const char *const names[] = {"Unknown", "Float", "Double", "Int16", "Int32", "Int64", "Vec3f",
                                      "Vec3d",   "Mask",  "Half",   "UInt32", "Boolean", "RGBA8", "Fp4",
                                      "Fp8",     "Fp16",  "FpN",    "Vec4f",  "Vec4d",   "Index"};
  return t < sizeof names / sizeof names[0] ? names[t] : "?";
}

/* Bytes of a leaf: fixed per type, FpN's from the leaf's own bit width (0 when invalid). */
static uint64_t leaf_bytes(uint32_t gt, const uint8_t *b, uint64_t leaf) {
  if (gt != XT_NVDB_FPN) return pnanovdb_grid_type_constants[gt].leaf_size;
  const uint32_t log_bits = (u32at(b, leaf + PNANOVDB_LEAF_OFF_BBOX_DIF_AND_FLAGS) >> 24) >> 5;
  if (log_bits > 4) return 0;
  return (uint64_t)pnanovdb_grid_type_constants[gt].leaf_size + (64u << log_bits);
}

uint32_t xt_nvdb_head_crc(const uint32_t *words, uint64_t bytes) {
  const uint8_t *b = (const uint8_t *)words;
  const uint32_t gt = u32at(b, PNANOVDB_GRID_OFF_GRID_TYPE);
  const uint64_t root = PNANOVDB_GRID_SIZE + u64at(b, PNANOVDB_GRID_SIZE + PNANOVDB_TREE_OFF_NODE_OFFSET_ROOT);
  if (!supported(gt) || bytes < PNANOVDB_GRID_SIZE + PNANOVDB_TREE_SIZE || root > bytes - 28) return 0;
  /* GridChecksum: from byte 16 over grid + tree + root (with its tiles), as if contiguous */
  const uint32_t tiles = u32at(b, root + PNANOVDB_ROOT_OFF_TABLE_SIZE);
  uint64_t end = (uint64_t)PNANOVDB_GRID_SIZE + PNANOVDB_TREE_SIZE + pnanovdb_grid_type_constants[gt].root_size +
                 (uint64_t)tiles * pnanovdb_grid_type_constants[gt].root_tile_size;
  if (end > bytes) end = bytes;
  uLong crc = crc32(0L, Z_NULL, 0);
  for (uint64_t off = 16; off < end;) { /* zlib takes uInt lengths */
    uint64_t n = end - off > (1u << 30) ? (1u << 30) : end - off;
    crc = crc32(crc, b + off, (uInt)n);
    off += n;
  }
  return (uint32_t)crc;
}

/* ------------------------------------------------------------------------------------------ */
/* The walk: every node inside the blob, every active value valid                             */
/* ------------------------------------------------------------------------------------------ */

typedef struct walk {
  const uint8_t *b;
  uint64_t size; /* grid bytes */
  uint32_t gt;
  const char *what;
  int labels, nmat;
  uint64_t active;
  uint32_t seen[3]; /* leaves, lowers, uppers visited */
  uint32_t count[3];
  uint64_t lo_node; /* nodes lie after the grid, tree and root headers */
  uint64_t values;  /* index form: the channel's length (every index read must be below it) */
} walk;

/* Index form: the stored index at `entry` (a tile, the background) is inside the channel. */
static int index_ok(const walk *w, uint64_t entry, const char *where, xt_msg *msg) {
  if (w->gt != XT_NVDB_INDEX || u64at(w->b, entry) < w->values) return 0;
  return xt_fail(msg, XT_EFORMAT, "%s: %s index %llu outside the value channel (%llu values)", w->what, where,
                 (unsigned long long)u64at(w->b, entry), (unsigned long long)w->values);
}

/* Index form: a leaf's values (from mValueOff: its active voxels when sparse, else all 512) are
 * inside the channel. */
static int leaf_index_ok(const walk *w, uint64_t leaf, xt_msg *msg) {
  if (w->gt != XT_NVDB_INDEX) return 0;
  const uint64_t off = u64at(w->b, leaf + pnanovdb_grid_type_constants[XT_NVDB_INDEX].leaf_off_table);
  uint64_t n = 512;
  if ((u32at(w->b, leaf + PNANOVDB_LEAF_OFF_BBOX_DIF_AND_FLAGS) >> 24) & 16u) {
    n = 0;
    for (int q = 0; q < 16; q++) n += (uint64_t)__builtin_popcount(u32at(w->b, leaf + PNANOVDB_LEAF_OFF_VALUE_MASK + 4u * (uint64_t)q));
  }
  if (off <= w->values && n <= w->values - off) return 0;
  return xt_fail(msg, XT_EFORMAT, "%s: leaf at byte %llu indexes values %llu..%llu outside the value channel (%llu values)",
                 w->what, (unsigned long long)leaf, (unsigned long long)off, (unsigned long long)(off + n),
                 (unsigned long long)w->values);
}

/* Index form: blind data 0 is the float channel, inside the grid; its length in *values. */
static int find_channel(const uint8_t *b, uint64_t size, uint32_t grid_class, const char *what, uint64_t *values,
                        xt_msg *msg) {
  if (grid_class != PNANOVDB_GRID_CLASS_INDEX_GRID)
    return xt_fail(msg, XT_EFORMAT, "%s: an Index grid of class %u (IndexGrid expected)", what, grid_class);
  const uint32_t count = u32at(b, PNANOVDB_GRID_OFF_BLIND_METADATA_COUNT);
  const int64_t m = (int64_t)u64at(b, PNANOVDB_GRID_OFF_BLIND_METADATA_OFFSET);
  if (count == 0 || m < PNANOVDB_GRID_SIZE || (uint64_t)m > size || size - (uint64_t)m < PNANOVDB_GRIDBLINDMETADATA_SIZE)
    return xt_fail(msg, XT_EFORMAT, "%s: an Index grid without its value channel (blind data 0)", what);
  const int64_t rel = (int64_t)u64at(b, (uint64_t)m + PNANOVDB_GRIDBLINDMETADATA_OFF_BYTE_OFFSET);
  const uint64_t n = u64at(b, (uint64_t)m + PNANOVDB_GRIDBLINDMETADATA_OFF_ELEMENT_COUNT);
  const uint32_t cls = u32at(b, (uint64_t)m + PNANOVDB_GRIDBLINDMETADATA_OFF_DATA_CLASS);
  const uint32_t type = u32at(b, (uint64_t)m + PNANOVDB_GRIDBLINDMETADATA_OFF_DATA_TYPE);
  const uint64_t at = (uint64_t)m + (uint64_t)rel;
  if (cls != 4u || type != XT_NVDB_FLOAT)
    return xt_fail(msg, XT_EFORMAT, "%s: blind data 0 of an Index grid is not a float channel (class %u, type %u)", what,
                   cls, type);
  if (rel < 0 || at > size || at % 4 != 0 || n == 0 || n > (size - at) / 4)
    return xt_fail(msg, XT_EFORMAT, "%s: the value channel (%llu floats) lies outside the grid", what,
                   (unsigned long long)n);
  *values = n;
  return 0;
}

static int node_ok(const walk *w, uint64_t addr, uint64_t bytes) {
  return addr >= w->lo_node && addr % 32 == 0 && bytes <= w->size && addr <= w->size - bytes;
}

/* An active value: finite mu, or a label id inside the table. */
static int value_ok(walk *w, float v, const char *where, xt_msg *msg) {
  if (!isfinite(v)) return xt_fail(msg, XT_ENANDATA, "%s: non-finite value %g in a %s", w->what, v, where);
  if (w->labels) {
    const float r = floorf(v + 0.5f); /* as xt_nvdb_label rounds */
    if (!(r >= 0.f && r < (float)w->nmat))
      return xt_fail(msg, XT_ERANGE, "%s: label %g in a %s is outside the material table (%d entries)", w->what, v,
                     where, w->nmat);
  }
  return 0;
}

static int walk_leaf(walk *w, uint64_t leaf, xt_msg *msg) {
  const uint64_t nb = leaf_bytes(w->gt, w->b, leaf < w->size - 16 ? leaf : 0);
  if (!nb || !node_ok(w, leaf, nb)) return xt_fail(msg, XT_EFORMAT, "%s: leaf node at byte %llu outside the grid", w->what,
                                                   (unsigned long long)leaf);
  if (++w->seen[0] > w->count[0])
    return xt_fail(msg, XT_EFORMAT, "%s: more leaf nodes than the tree's count %u", w->what, w->count[0]);
  int irc = leaf_index_ok(w, leaf, msg);
  if (irc) return irc;
  pnanovdb_buf_t buf = pnanovdb_make_buf((uint32_t *)(uintptr_t)w->b, w->size / 4);
  pnanovdb_leaf_handle_t lh = {addr(leaf)};
  const pnanovdb_coord_t base = pnanovdb_leaf_get_bbox_min(buf, lh);
  for (uint32_t n = 0; n < 512; n++) {
    if (!pnanovdb_leaf_get_value_mask(buf, lh, n)) continue;
    w->active++;
    pnanovdb_coord_t ijk = {base.x + (int)(n >> 6), base.y + (int)((n >> 3) & 7), base.z + (int)(n & 7)};
    /* quantised types: the table's start; the read finds the voxel's code from ijk */
    const pnanovdb_address_t a = pnanovdb_leaf_get_value_address(w->gt, buf, lh, &ijk);
    int rc = value_ok(w, xt_nvdb_read(w->gt, buf, a, &ijk, 0u), "leaf", msg);
    if (rc) return rc;
  }
  return 0;
}

/* Internal nodes: level 1 lower (16^3 entries of 8^3), level 2 upper (32^3 entries of 128^3). */
static int walk_internal(walk *w, uint64_t node, int level, xt_msg *msg) {
  const pnanovdb_grid_type_constants_t *c = &pnanovdb_grid_type_constants[w->gt];
  const uint64_t nb = level == 2 ? c->upper_size : c->lower_size;
  const char *name = level == 2 ? "upper" : "lower";
  if (!node_ok(w, node, nb))
    return xt_fail(msg, XT_EFORMAT, "%s: %s node at byte %llu outside the grid", w->what, name, (unsigned long long)node);
  if (++w->seen[level] > w->count[level])
    return xt_fail(msg, XT_EFORMAT, "%s: more %s nodes than the tree's count %u", w->what, name, w->count[level]);
  const uint32_t entries = level == 2 ? 32768u : 4096u;
  const uint64_t vmask = level == 2 ? PNANOVDB_UPPER_OFF_VALUE_MASK : PNANOVDB_LOWER_OFF_VALUE_MASK;
  const uint64_t cmask = level == 2 ? PNANOVDB_UPPER_OFF_CHILD_MASK : PNANOVDB_LOWER_OFF_CHILD_MASK;
  const uint64_t table = node + (level == 2 ? c->upper_off_table : c->lower_off_table);
  const uint64_t tile_voxels = level == 2 ? (uint64_t)128 * 128 * 128 : 512;
  for (uint32_t n = 0; n < entries; n++) {
    const int child = (u32at(w->b, node + cmask + 4u * (n >> 5)) >> (n & 31)) & 1;
    const uint64_t entry = table + (uint64_t)c->table_stride * n;
    if (child) {
      const int64_t off = (int64_t)u64at(w->b, entry);
      const uint64_t dst = node + (uint64_t)off;
      int rc = level == 2 ? walk_internal(w, dst, 1, msg) : walk_leaf(w, dst, msg);
      if (rc) return rc;
    } else if ((u32at(w->b, node + vmask + 4u * (n >> 5)) >> (n & 31)) & 1) {
      pnanovdb_buf_t buf = pnanovdb_make_buf((uint32_t *)(uintptr_t)w->b, w->size / 4);
      pnanovdb_coord_t z = {0, 0, 0};
      w->active += tile_voxels;
      int rc = index_ok(w, entry, "tile", msg);
      if (rc) return rc;
      rc = value_ok(w, xt_nvdb_read(w->gt, buf, addr(entry), &z, (pnanovdb_uint32_t)level), "tile", msg);
      if (rc) return rc;
    }
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The xtwin record (blind data)                                                              */
/* ------------------------------------------------------------------------------------------ */

typedef struct record {
  int present, labels;
  int lo[3], hi[3];
  double energy;
  int nmat;
  const uint8_t *mat;
} record;

static int find_record(const uint8_t *b, uint64_t size, const char *what, record *r, xt_msg *msg) {
  memset(r, 0, sizeof *r);
  const uint32_t count = u32at(b, PNANOVDB_GRID_OFF_BLIND_METADATA_COUNT);
  const int64_t off = (int64_t)u64at(b, PNANOVDB_GRID_OFF_BLIND_METADATA_OFFSET);
  if (count == 0) return 0;
  if (count > 1024 || off < PNANOVDB_GRID_SIZE || (uint64_t)off > size ||
      (uint64_t)count * PNANOVDB_GRIDBLINDMETADATA_SIZE > size - (uint64_t)off)
    return xt_fail(msg, XT_EFORMAT, "%s: blind metadata outside the grid", what);
  for (uint32_t i = 0; i < count; i++) {
    const uint64_t m = (uint64_t)off + (uint64_t)i * PNANOVDB_GRIDBLINDMETADATA_SIZE;
    char name[GRID_NAME_MAX];
    memcpy(name, b + m + PNANOVDB_GRIDBLINDMETADATA_OFF_NAME, sizeof name);
    name[sizeof name - 1] = '\0';
    if (strcmp(name, XT_NVDB_RECORD_NAME) != 0) continue;
    /* NanoVDB's C++ (GridBlindMetaData::setBlindData) stores the offset from the metadata entry */
    const int64_t rel = (int64_t)u64at(b, m + PNANOVDB_GRIDBLINDMETADATA_OFF_BYTE_OFFSET);
    const uint64_t len = u64at(b, m + PNANOVDB_GRIDBLINDMETADATA_OFF_ELEMENT_COUNT);
    const uint64_t at = m + (uint64_t)rel;
    if (rel < 0 || at > size || len > size - at || len < XT_NVDB_RECORD_HEADER)
      return xt_fail(msg, XT_EFORMAT, "%s: xtwin record outside the grid", what);
    const uint8_t *p = b + at;
    if (memcmp(p, XT_NVDB_RECORD_MAGIC, 8) != 0 || u32at(p, 8) != XT_NVDB_RECORD_VERSION)
      return xt_fail(msg, XT_EFORMAT, "%s: xtwin record: bad magic or version %u", what, u32at(p, 8));
    r->present = 1;
    r->labels = (int)(u32at(p, 12) & 1u);
    for (int a = 0; a < 3; a++) {
      r->lo[a] = i32at(p, 16 + 4 * (uint64_t)a);
      r->hi[a] = i32at(p, 28 + 4 * (uint64_t)a);
    }
    r->energy = f64at(p, 40);
    const uint32_t n = u32at(p, 48);
    if (n > XT_MAX_MATERIALS || (r->labels && n == 0) ||
        len < XT_NVDB_RECORD_HEADER + (uint64_t)n * XT_NVDB_RECORD_MATERIAL)
      return xt_fail(msg, XT_EFORMAT, "%s: xtwin record: %u materials in %llu bytes", what, n, (unsigned long long)len);
    r->nmat = (int)n;
    r->mat = p + XT_NVDB_RECORD_HEADER;
    return 0;
  }
  return 0;
}

static int table_from_record(const record *r, const char *what, xt_material_table *t, xt_msg *msg) {
  memset(t, 0, sizeof *t);
  t->count = r->nmat;
  t->energy_kev = r->energy;
  snprintf(t->source, sizeof t->source, "the grid's xtwin record");
  for (int i = 0; i < r->nmat; i++) {
    const uint8_t *e = r->mat + (size_t)i * XT_NVDB_RECORD_MATERIAL;
    float mu;
    memcpy(&mu, e, 4);
    t->density[i] = f64at(e, 8);
    memcpy(t->name[i], e + 16, XT_MATERIAL_NAME_MAX);
    t->name[i][XT_MATERIAL_NAME_MAX - 1] = '\0';
    if (!isfinite(mu) || mu < 0.f) return xt_fail(msg, XT_EFORMAT, "%s: xtwin record: material %d has mu %g", what, i, mu);
    t->mu[i] = mu;
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* A grid blob -> xt_nvdb                                                                      */
/* ------------------------------------------------------------------------------------------ */

static int check_checksum(const uint8_t *b, uint64_t size, const char *what, xt_msg *msg) {
  const uint64_t cs = u64at(b, PNANOVDB_GRID_OFF_CHECKSUM);
  const uint32_t head = (uint32_t)cs;
  if (head == CRC_EMPTY) return 0; /* disabled by the writer */
  const uint32_t got = xt_nvdb_head_crc((const uint32_t *)(const void *)b, size);
  if (got != head)
    return xt_fail(msg, XT_EFORMAT, "%s: checksum mismatch (header CRC-32 %08x, file says %08x): the grid is corrupt",
                   what, got, head);
  /* The full (node) part, which writers leave off by default, is not checked: the walk bounds
   * every node and value, which is what traversal needs. */
  return 0;
}

static int build(uint32_t *words, uint64_t bytes, const xt_nvdb_load_options *opt, const char *what, int checksum,
                 xt_nvdb **out, xt_msg *msg) {
  xt_nvdb *g = NULL;
  int rc = 0;
  const uint8_t *b = (const uint8_t *)words;
  *out = NULL;
  if (bytes < PNANOVDB_GRID_SIZE + PNANOVDB_TREE_SIZE) {
    rc = xt_fail(msg, XT_ETRUNCATED, "%s: grid of %llu bytes is truncated", what, (unsigned long long)bytes);
    goto fail;
  }
  if (u64at(b, PNANOVDB_GRID_OFF_MAGIC) != PNANOVDB_MAGIC_NUMBER) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: grid has no NanoVDB magic", what);
    goto fail;
  }
  const uint32_t ver = u32at(b, PNANOVDB_GRID_OFF_VERSION);
  if ((ver >> 21) != NANOVDB_MAJOR) {
    rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: grid is NanoVDB %u.%u.%u (this build reads 32.x)", what, ver >> 21,
                 (ver >> 10) & 2047u, ver & 1023u);
    goto fail;
  }
  const uint64_t gsize = u64at(b, PNANOVDB_GRID_OFF_GRID_SIZE);
  if (gsize > bytes || gsize < PNANOVDB_GRID_SIZE + PNANOVDB_TREE_SIZE) {
    rc = xt_fail(msg, XT_ETRUNCATED, "%s: grid says %llu bytes, %llu present", what, (unsigned long long)gsize,
                 (unsigned long long)bytes);
    goto fail;
  }
  const uint32_t gt = u32at(b, PNANOVDB_GRID_OFF_GRID_TYPE);
  if (!supported(gt)) {
    rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: grid type %s is not supported (Float, Fp4, Fp8, Fp16, FpN, Int16, Index)", what,
                 nanovdb_type_name(gt));
    goto fail;
  }
  const pnanovdb_grid_type_constants_t *c = &pnanovdb_grid_type_constants[gt];
  const uint64_t tree = PNANOVDB_GRID_SIZE;
  const uint64_t root = tree + u64at(b, tree + PNANOVDB_TREE_OFF_NODE_OFFSET_ROOT);
  if (root < tree + PNANOVDB_TREE_SIZE || root > gsize || gsize - root < c->root_size) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: root node outside the grid", what);
    goto fail;
  }
  const uint32_t tiles = u32at(b, root + PNANOVDB_ROOT_OFF_TABLE_SIZE);
  const uint64_t root_end = root + c->root_size + (uint64_t)tiles * c->root_tile_size;
  if (tiles > gsize / c->root_tile_size || root_end > gsize) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: root table of %u tiles outside the grid", what, tiles);
    goto fail;
  }
  if (checksum && (rc = check_checksum(b, gsize, what, msg))) goto fail;
  uint64_t values = 0;
  if (gt == XT_NVDB_INDEX && ((ver >> 10) & 2047u) != 4u) {
    /* later 32.x minors changed what an Index leaf stores (a prefix sum where 32.4 has the offset) */
    rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: an Index grid of NanoVDB %u.%u (this build reads Index grids of 32.4)", what,
                 ver >> 21, (ver >> 10) & 2047u);
    goto fail;
  }
  if (gt == XT_NVDB_INDEX) {
    if ((rc = find_channel(b, gsize, u32at(b, PNANOVDB_GRID_OFF_GRID_CLASS), what, &values, msg))) goto fail;
    if (u64at(b, root + c->root_off_background) >= values) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: background index outside the value channel", what);
      goto fail;
    }
  }

  g = calloc(1, sizeof *g);
  if (!g) {
    rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", what);
    goto fail;
  }
  g->words = words;
  words = NULL;
  g->bytes = gsize;
  g->grid_type = gt;
  g->grid_class = u32at(b, PNANOVDB_GRID_OFF_GRID_CLASS);
  memcpy(g->grid_name, b + PNANOVDB_GRID_OFF_GRID_NAME, sizeof g->grid_name);
  g->grid_name[sizeof g->grid_name - 1] = '\0';
  /* The name goes into reports (JSON: valid UTF-8 only) and messages: printable ASCII kept, any
   * other byte shown as '?' (the name a client asks for is matched against the file's own). */
  for (char *ch = g->grid_name; *ch; ch++)
    if ((unsigned char)*ch < 0x20 || (unsigned char)*ch > 0x7e) *ch = '?';

  /* The map: index -> world, NanoVDB's double matrix (row-major, world = M ijk + v). */
  {
    const uint64_t map = PNANOVDB_GRID_OFF_MAP;
    double det;
    for (int i = 0; i < 3; i++) {
      for (int j = 0; j < 3; j++) g->index_to_model.m[i][j] = f64at(b, map + PNANOVDB_MAP_OFF_MATD + 8 * (uint64_t)(3 * i + j));
      g->index_to_model.t[i] = f64at(b, map + PNANOVDB_MAP_OFF_VECD + 8 * (uint64_t)i);
    }
    int ok = 1;
    for (int i = 0; i < 3; i++) {
      ok &= isfinite(g->index_to_model.t[i]) && fabs(g->index_to_model.t[i]) < 1e7;
      double n2 = 0;
      for (int j = 0; j < 3; j++) {
        ok &= isfinite(g->index_to_model.m[i][j]);
        n2 += g->index_to_model.m[j][i] * g->index_to_model.m[j][i];
      }
      ok &= n2 >= 1e-8 && n2 <= 1e8; /* voxel edges of 1e-4 .. 1e4 mm */
    }
    det = ok ? xt_aff_det(&g->index_to_model) : 0;
    if (!ok || !(fabs(det) > 1e-15)) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: grid map is singular, non-finite or absurd (voxel edges must be 1e-4..1e4 mm)",
                   what);
      goto fail;
    }
  }

  /* What the values mean, and the domain. */
  record r;
  if ((rc = find_record(b, gsize, what, &r, msg))) goto fail;
  g->has_record = r.present;
  g->energy_kev = r.present && r.energy >= 1.0 && r.energy <= 500.0 ? r.energy : 0.0;
  g->labels = r.present ? r.labels : (gt == XT_NVDB_INT16 || (opt && opt->labels));
  if (r.present && !r.labels && opt && opt->labels) {
    rc = xt_fail(msg, XT_EINVAL, "%s: the grid holds mu (its xtwin record says so), not labels", what);
    goto fail;
  }
  if (g->labels) {
    g->materials = calloc(1, sizeof *g->materials);
    if (!g->materials) {
      rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", what);
      goto fail;
    }
    if (r.present) rc = table_from_record(&r, what, g->materials, msg);
    else rc = xt_materials_default(opt && opt->energy_kev > 0 ? opt->energy_kev : XT_DEFAULT_ENERGY_KEV, g->materials, msg);
    if (rc) goto fail;
  }
  {
    pnanovdb_buf_t buf = pnanovdb_make_buf(g->words, gsize / 4);
    pnanovdb_coord_t z = {0, 0, 0};
    g->background = xt_nvdb_read(gt, buf, addr(root + c->root_off_background), &z, 4u);
  }
  for (int a = 0; a < 3; a++) {
    g->lo[a] = r.present ? r.lo[a] : i32at(b, root + PNANOVDB_ROOT_OFF_BBOX_MIN + 4 * (uint64_t)a);
    g->hi[a] = r.present ? r.hi[a] : i32at(b, root + PNANOVDB_ROOT_OFF_BBOX_MAX + 4 * (uint64_t)a);
  }
  for (int a = 0; a < 3; a++) {
    const int64_t lo = g->lo[a], hi = g->hi[a];
    if (hi < lo) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: the grid is empty (no active values, no domain)", what);
      goto fail;
    }
    if (hi - lo + 1 > XT_NVDB_MAX_EXTENT || lo <= -XT_NVDB_MAX_COORD || hi >= XT_NVDB_MAX_COORD) {
      rc = xt_fail(msg, XT_ERANGE, "%s: absurd bounds: index %c from %lld to %lld (at most %d voxels, |i| < %d)", what,
                   "xyz"[a], (long long)lo, (long long)hi, XT_NVDB_MAX_EXTENT, XT_NVDB_MAX_COORD);
      goto fail;
    }
  }

  /* Every node inside the blob; every active value valid. */
  {
    walk w;
    memset(&w, 0, sizeof w);
    w.b = b;
    w.size = gsize;
    w.gt = gt;
    w.what = what;
    w.labels = g->labels;
    w.nmat = g->labels ? g->materials->count : 0;
    w.count[0] = u32at(b, tree + PNANOVDB_TREE_OFF_NODE_COUNT_LEAF);
    w.count[1] = u32at(b, tree + PNANOVDB_TREE_OFF_NODE_COUNT_LOWER);
    w.count[2] = u32at(b, tree + PNANOVDB_TREE_OFF_NODE_COUNT_UPPER);
    w.lo_node = root_end;
    w.values = values;
    if ((rc = value_ok(&w, g->background, "background", msg))) goto fail;
    for (uint32_t t = 0; t < tiles; t++) {
      const uint64_t tile = root + c->root_size + (uint64_t)t * c->root_tile_size;
      const int64_t child = (int64_t)u64at(b, tile + PNANOVDB_ROOT_TILE_OFF_CHILD);
      if (child) {
        if ((rc = walk_internal(&w, root + (uint64_t)child, 2, msg))) goto fail;
      } else if (u32at(b, tile + PNANOVDB_ROOT_TILE_OFF_STATE)) {
        pnanovdb_buf_t buf = pnanovdb_make_buf(g->words, gsize / 4);
        pnanovdb_coord_t z = {0, 0, 0};
        w.active += (uint64_t)4096 * 4096 * 4096;
        if ((rc = index_ok(&w, tile + c->root_tile_off_value, "root tile", msg))) goto fail;
        if ((rc = value_ok(&w, xt_nvdb_read(gt, buf, addr(tile + c->root_tile_off_value), &z, 3u), "root tile", msg)))
          goto fail;
      }
    }
    g->active_voxels = w.active;
    for (int k = 0; k < 3; k++) g->nodes[k] = w.seen[k];
    g->nodes[3] = tiles;
  }
  g->mu_background = g->labels ? g->materials->mu[xt_nvdb_label(g->background)] : g->background;
  *out = g;
  return 0;

fail:
  free(words);
  xt_nvdb_free(g);
  return rc;
}

int xt_nvdb_from_blob(uint32_t *words, uint64_t bytes, const xt_nvdb_load_options *opt, const char *what,
                      xt_nvdb **out, xt_msg *msg) {
  return build(words, bytes, opt, what ? what : "grid", 0, out, msg);
}

void xt_nvdb_free(xt_nvdb *g) {
  if (!g) return;
  free(g->words);
  free(g->materials);
  free(g);
}

/* ------------------------------------------------------------------------------------------ */
/* The file                                                                                   */
/* ------------------------------------------------------------------------------------------ */

typedef struct file_meta {
  uint64_t grid_size, file_size;
  uint32_t grid_type, name_size;
  uint16_t codec;
  char name[GRID_NAME_MAX];
} file_meta;

static uint32_t *alloc_blob(uint64_t bytes) {
  const uint64_t n = (bytes + 31) & ~(uint64_t)31;
  if (n != (size_t)n) return NULL;
  uint32_t *p = aligned_alloc(32, (size_t)n);
  if (p && n > bytes) memset((uint8_t *)p + bytes, 0, (size_t)(n - bytes));
  return p;
}

/* Reads the blob of meta (at the file's position) with its codec into a fresh aligned buffer. */
static int read_blob(FILE *f, const char *path, const file_meta *m, uint16_t codec, uint32_t **out, xt_msg *msg) {
  *out = NULL;
  uint32_t *words = alloc_blob(m->grid_size);
  uint8_t *z = NULL;
  int rc = 0;
  if (!words) return xt_fail(msg, XT_ENOMEM, "%s: out of memory for a %llu-byte grid", path, (unsigned long long)m->grid_size);
  if (codec == 0) {
    if (fread(words, 1, (size_t)m->grid_size, f) != m->grid_size) {
      rc = xt_fail(msg, XT_ETRUNCATED, "%s: truncated: grid \"%s\" has fewer than %llu bytes", path, m->name,
                   (unsigned long long)m->grid_size);
      goto fail;
    }
  } else {
    uint64_t zn;
    if (fread(&zn, 8, 1, f) != 1 || m->file_size < 8 || zn > m->file_size - 8) { /* zn + 8 would wrap */
      rc = xt_fail(msg, XT_ETRUNCATED, "%s: truncated or bad ZIP block of grid \"%s\"", path, m->name);
      goto fail;
    }
    z = malloc(zn ? (size_t)zn : 1);
    if (!z) {
      rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
      goto fail;
    }
    if (fread(z, 1, (size_t)zn, f) != zn) {
      rc = xt_fail(msg, XT_ETRUNCATED, "%s: truncated: ZIP block of grid \"%s\"", path, m->name);
      goto fail;
    }
    uLongf dn = (uLongf)m->grid_size;
    int zr = uncompress((Bytef *)words, &dn, z, (uLong)zn);
    if (zr != Z_OK || dn != m->grid_size) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: ZIP block of grid \"%s\" does not inflate to %llu bytes (%s)", path, m->name,
                   (unsigned long long)m->grid_size, zr == Z_OK ? "size differs" : zError(zr));
      goto fail;
    }
  }
  free(z);
  *out = words;
  return 0;
fail:
  free(z);
  free(words);
  return rc;
}

int xt_nvdb_load(const char *path, const xt_nvdb_load_options *opt, xt_nvdb **out, xt_msg *msg) {
  FILE *f = NULL;
  uint32_t *words = NULL;
  int rc = 0;
  char names[200] = "";
  size_t nlen = 0;
  const char *want = opt && opt->grid && *opt->grid ? opt->grid : NULL;
  *out = NULL;
  if ((rc = xt__fopen_regular(path, &f, NULL, msg))) return rc; /* never blocks on a FIFO */
  if (fseeko(f, 0, SEEK_END) != 0) {
    rc = xt_fail(msg, XT_EIO, "%s: cannot seek", path);
    goto fail;
  }
  const uint64_t fsize = (uint64_t)ftello(f);
  rewind(f);
  for (int segment = 0;; segment++) {
    uint8_t h[FILE_HEADER];
    const uint64_t at = (uint64_t)ftello(f);
    size_t got = fread(h, 1, sizeof h, f);
    if (got == 0 && segment > 0) break; /* end of file after whole segments */
    if (got != sizeof h) {
      rc = xt_fail(msg, XT_ETRUNCATED, "%s: truncated: %zu of the 16 header bytes at byte %llu", path, got,
                   (unsigned long long)at);
      goto fail;
    }
    if (u64at(h, 0) != PNANOVDB_MAGIC_NUMBER) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: not a NanoVDB file (wrong magic at byte %llu)", path, (unsigned long long)at);
      goto fail;
    }
    const uint32_t ver = u32at(h, 8);
    uint16_t count, codec;
    memcpy(&count, h + 12, 2);
    memcpy(&codec, h + 14, 2);
    if ((ver >> 21) != NANOVDB_MAJOR) {
      rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: NanoVDB file version %u.%u.%u (this build reads 32.x)", path, ver >> 21,
                   (ver >> 10) & 2047u, ver & 1023u);
      goto fail;
    }
    if (count == 0) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: segment at byte %llu holds no grid", path, (unsigned long long)at);
      goto fail;
    }
    if (codec > 1) {
      rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: codec %s is not supported (NONE, ZIP)", path, codec == 2 ? "BLOSC" : "unknown");
      goto fail;
    }
    int hit = -1;
    uint64_t skip = 0, rest = 0;
    file_meta sel;
    memset(&sel, 0, sizeof sel);
    for (int i = 0; i < count; i++) {
      uint8_t m[FILE_META];
      file_meta fm;
      if (fread(m, 1, sizeof m, f) != sizeof m) {
        rc = xt_fail(msg, XT_ETRUNCATED, "%s: truncated in the metadata of grid %d", path, i);
        goto fail;
      }
      memset(&fm, 0, sizeof fm);
      fm.grid_size = u64at(m, 0);
      fm.file_size = u64at(m, 8);
      fm.grid_type = u32at(m, 32);
      fm.name_size = u32at(m, 136);
      memcpy(&fm.codec, m + 168, 2);
      if (fm.name_size == 0 || fm.name_size > GRID_NAME_MAX) {
        rc = xt_fail(msg, XT_EFORMAT, "%s: grid %d: name of %u bytes", path, i, fm.name_size);
        goto fail;
      }
      if (fread(fm.name, 1, fm.name_size, f) != fm.name_size) {
        rc = xt_fail(msg, XT_ETRUNCATED, "%s: truncated in the name of grid %d", path, i);
        goto fail;
      }
      fm.name[fm.name_size - 1] = '\0';
      if (fm.grid_size > XT_NVDB_MAX_BYTES || fm.file_size > fsize) {
        rc = xt_fail(msg, fm.file_size > fsize ? XT_ETRUNCATED : XT_ETOOLARGE,
                     "%s: %s: grid \"%s\" claims %llu bytes (%llu on disk) in a %llu-byte file", path,
                     fm.file_size > fsize ? "truncated" : "too large", fm.name,
                     (unsigned long long)fm.grid_size, (unsigned long long)fm.file_size, (unsigned long long)fsize);
        goto fail;
      }
      if (nlen < sizeof names - 40)
        nlen += (size_t)snprintf(names + nlen, sizeof names - nlen, "%s\"%s\"", nlen ? ", " : "", fm.name);
      if (hit < 0 && (!want || strcmp(fm.name, want) == 0)) {
        hit = i;
        sel = fm;
      } else if (hit < 0) skip += fm.file_size;
      else rest += fm.file_size;
    }
    if (hit < 0) {
      if (fseeko(f, (off_t)skip, SEEK_CUR) != 0) {
        rc = xt_fail(msg, XT_EIO, "%s: cannot seek", path);
        goto fail;
      }
      continue;
    }
    (void)rest;
    if (fseeko(f, (off_t)skip, SEEK_CUR) != 0 || (uint64_t)ftello(f) + sel.file_size > fsize) {
      rc = xt_fail(msg, XT_ETRUNCATED, "%s: truncated: grid \"%s\" needs %llu bytes at byte %llu", path, sel.name,
                   (unsigned long long)sel.file_size, (unsigned long long)((uint64_t)ftello(f)));
      goto fail;
    }
    if (codec == 0 && sel.file_size != sel.grid_size) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: grid \"%s\": %llu bytes on disk for a %llu-byte grid", path, sel.name,
                   (unsigned long long)sel.file_size, (unsigned long long)sel.grid_size);
      goto fail;
    }
    if ((rc = read_blob(f, path, &sel, codec, &words, msg))) goto fail;
    fclose(f);
    f = NULL;
    char what[600];
    snprintf(what, sizeof what, "%s: grid \"%s\"", path, sel.name);
    return build(words, sel.grid_size, opt, what, 1, out, msg);
  }
  if (want) rc = xt_fail(msg, XT_ENOTFOUND, "%s: no grid named \"%s\" (grids: %s)", path, want, names);
  else rc = xt_fail(msg, XT_EFORMAT, "%s: no grid", path);
fail:
  if (f) fclose(f);
  free(words);
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Queries                                                                                    */
/* ------------------------------------------------------------------------------------------ */

void xt_nvdb_bounds(const xt_nvdb *g, xt_vec3 *lo, xt_vec3 *hi) {
  /* voxel i fills [i - 0.5, i + 0.5]: the eight corners of the domain's cubes, mapped */
  double mn[3] = {INFINITY, INFINITY, INFINITY}, mx[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (int c = 0; c < 8; c++) {
    xt_vec3 p = xt_v3((c & 1 ? g->hi[0] + 0.5 : g->lo[0] - 0.5), (c & 2 ? g->hi[1] + 0.5 : g->lo[1] - 0.5),
                      (c & 4 ? g->hi[2] + 0.5 : g->lo[2] - 0.5));
    xt_vec3 q = xt_aff_apply(&g->index_to_model, p);
    for (int a = 0; a < 3; a++) {
      double v = xt_v3_get(q, a);
      if (v < mn[a]) mn[a] = v;
      if (v > mx[a]) mx[a] = v;
    }
  }
  *lo = xt_v3(mn[0], mn[1], mn[2]);
  *hi = xt_v3(mx[0], mx[1], mx[2]);
}

uint64_t xt_nvdb_domain_voxels(const xt_nvdb *g) {
  uint64_t n = 1;
  for (int a = 0; a < 3; a++) n *= (uint64_t)((int64_t)g->hi[a] - g->lo[a] + 1);
  return n;
}

double xt_nvdb_active_fraction(const xt_nvdb *g) {
  const uint64_t n = xt_nvdb_domain_voxels(g);
  return n ? (double)g->active_voxels / (double)n : 0.0;
}

double xt_nvdb_mu(const xt_nvdb *g, int i, int j, int k) {
  if (i < g->lo[0] || i > g->hi[0] || j < g->lo[1] || j > g->hi[1] || k < g->lo[2] || k > g->hi[2]) return 0.0;
  pnanovdb_buf_t buf = pnanovdb_make_buf(g->words, g->bytes / 4);
  pnanovdb_grid_handle_t grid = {pnanovdb_address_null()};
  pnanovdb_readaccessor_t acc;
  pnanovdb_readaccessor_init(&acc, pnanovdb_tree_get_root(buf, pnanovdb_grid_get_tree(buf, grid)));
  pnanovdb_coord_t ijk = {i, j, k};
  int dim;
  const float v = xt_nvdb_probe(g->grid_type, buf, &acc, &ijk, g->background, &dim);
  return g->labels ? (double)g->materials->mu[xt_nvdb_label(v)] : (double)v;
}

void xt_nvdb_decode(const xt_nvdb *g, float *dst) {
  pnanovdb_buf_t buf = pnanovdb_make_buf(g->words, g->bytes / 4);
  pnanovdb_grid_handle_t grid = {pnanovdb_address_null()};
  pnanovdb_readaccessor_t acc;
  pnanovdb_readaccessor_init(&acc, pnanovdb_tree_get_root(buf, pnanovdb_grid_get_tree(buf, grid)));
  const int n[3] = {g->hi[0] - g->lo[0] + 1, g->hi[1] - g->lo[1] + 1, g->hi[2] - g->lo[2] + 1};
  const int nrun = xt_nvdb_decode_nrun(g->lo, n);
  const unsigned long long runs = (unsigned long long)nrun * (unsigned long long)n[1] * (unsigned long long)n[2];
  for (unsigned long long t = 0; t < runs; t++)
    xt_nvdb_decode_run(g->grid_type, buf, &acc, g->lo, n, nrun, t, g->background, g->labels ? g->materials->mu : NULL,
                       dst);
}

/* ------------------------------------------------------------------------------------------ */
/* The NVDB kind                                                                              */
/* ------------------------------------------------------------------------------------------ */

int xt_model_from_nvdb(xt_nvdb *g, const char *name, xt_model **out, xt_msg *msg) {
  return xt_model_create(XT_MODEL_NVDB, g, name ? name : "nvdb", out, msg);
}

static void nvdb_free(void *payload) { xt_nvdb_free(payload); }

static int nvdb_bounds(const xt_model *m, xt_vec3 *lo, xt_vec3 *hi) {
  xt_nvdb_bounds(xt_model_nvdb(m), lo, hi);
  return 0;
}

/* The grid's voxels are its domain's (the box the background fills), not only the active ones.
 * The sidecar has never described grids beyond their kind (tests/golden/ freezes that). */
static void nvdb_describe(const xt_model *m, xt_model_view view, const xt_json_out *o) {
  const xt_nvdb *g = xt_model_nvdb(m);
  if (view != XT_MODEL_VIEW_REPORT) return;
  o->begin(o->ctx, "grid", 0);
  o->string(o->ctx, "name", g->grid_name);
  o->string(o->ctx, "type", xt_nvdb_type_name(g->grid_type));
  o->boolean(o->ctx, "labels", g->labels);
  o->end(o->ctx);
  o->integer(o->ctx, "voxels", (int64_t)xt_nvdb_domain_voxels(g));
  o->real(o->ctx, "active_fraction", xt_nvdb_active_fraction(g));
}

/* Label grids read as label volumes (their own table), mu grids as dense ones (HU classes at the
 * grid's energy). */
static int nvdb_matter(const xt_model *m, xt_model_matter *out, xt_msg *msg) {
  const xt_nvdb *g = xt_model_nvdb(m);
  if (!g) return xt_fail(msg, XT_EINVAL, "channels: model %s has no grid", m->name);
  out->kind = g->labels ? XT_MATTER_LABELS : XT_MATTER_MU_CLASSES;
  out->table = g->materials;
  out->energy_kev = g->energy_kev > 0 ? g->energy_kev : XT_DEFAULT_ENERGY_KEV;
  return 0;
}

/* The CUDA kind uploads the blob padded to 32 bytes, and a label grid's table as 256 floats. */
static uint64_t nvdb_device_bytes(const xt_model *m) {
  const xt_nvdb *g = xt_model_nvdb(m);
  return ((g->bytes + 31) & ~(uint64_t)31) + (g->labels ? 256 * sizeof(float) : 0);
}

const xt_model_kind_ops xt_model_kind_nvdb = {.name = "nvdb",
                                              .free = nvdb_free,
                                              .bounds = nvdb_bounds,
                                              .describe = nvdb_describe,
                                              .matter = nvdb_matter,
                                              .device_bytes = nvdb_device_bytes};
