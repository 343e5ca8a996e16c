/* Flattening a NanoVDB grid into the brick pool of xt_nvdb_bricks.h, on the host, once per model.
 *
 * Each coarse cell (8^3 block aligned in index space) of the domain is probed at one of its voxels
 * inside the domain through the same read every renderer uses (models/xt_nvdb_access.h): a leaf
 * there (the region's edge is 1) means the whole block is that leaf, and its 512 values are read
 * voxel by voxel (inactive = background) into a brick; otherwise the block lies in a tile or the
 * background (edge >= 8, aligned), one value, kept in the palette. Labels go through the grid's
 * material table here, so the march integrates mu as the reference does: mu[label] (float) x length. */
#include "xt_nvdb_bricks.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_nvdb_access.h"

/* The mu of a stored value, as proj_cpu_nvdb.c's add_segment takes it. */
static float mu_of(const xt_nvdb *g, float v) { return g->labels ? g->materials->mu[xt_nvdb_label(v)] : v; }

/* The palette entry for v: an equal recent entry (the last 64 looked at: tiles of one value come
 * in runs), else a new one. */
static int32_t palette_entry(xt_nvdb_bricks_host *h, float v, size_t *cap, int *ok) {
  const size_t from = h->npalette > 64 ? h->npalette - 64 : 0;
  for (size_t i = h->npalette; i-- > from;)
    if (memcmp(&h->palette[i], &v, sizeof v) == 0) return -1 - (int32_t)i;
  if (h->npalette == *cap) {
    const size_t nc = *cap ? 2 * *cap : 64;
    float *p = realloc(h->palette, nc * sizeof *p);
    if (!p) {
      *ok = 0;
      return -1;
    }
    h->palette = p;
    *cap = nc;
  }
  h->palette[h->npalette] = v;
  return -1 - (int32_t)h->npalette++;
}

/* The cells of block (cx, cy, cz) (table coordinates) that are content - every domain voxel whose
 * mu differs from bg, bit for bit: a brick's rows from their first to their last such voxel, a
 * constant block (brick < 0) whole - added to the hull in the domain's cell space. */
static void hull_add_block(const xt_nvdb_bricks_host *h, const int c[3], int32_t brick, float bg, xt_hull_acc *acc) {
  const xt_nvdb_bricks *b = &h->b;
  int o[3], l[3], u[3]; /* the block's first cell, and its domain cells [l, u] from there */
  for (int a = 0; a < 3; a++) {
    o[a] = 8 * (c[a] + b->c0[a]) - b->lo[a];
    l[a] = o[a] < 0 ? -o[a] : 0;
    u[a] = o[a] + 7 > b->n[a] - 1 ? b->n[a] - 1 - o[a] : 7;
  }
  if (brick < 0) {
    xt_hull_add_cells(acc, o[0] + l[0], o[0] + u[0], o[1] + l[1], o[1] + u[1], o[2] + l[2], o[2] + u[2]);
    return;
  }
  const float *br = h->pool + (size_t)brick * 512;
  for (int z = l[2]; z <= u[2]; z++)
    for (int y = l[1]; y <= u[1]; y++) {
      const float *row = br + 8 * y + 64 * z;
      int x0 = l[0], x1 = u[0];
      while (x0 <= u[0] && memcmp(&row[x0], &bg, sizeof bg) == 0) x0++;
      if (x0 > u[0]) continue;
      while (memcmp(&row[x1], &bg, sizeof bg) == 0) x1--;
      xt_hull_add_cells(acc, o[0] + x0, o[0] + x1, o[1] + y, o[1] + y, o[2] + z, o[2] + z);
    }
}

/* The content box: the blocks that are bricks or constant at another value than the background's
 * mu, widened by one cell (background: exact either way) and clipped to the domain; and in the
 * same pass the content hull (bricks7, xt_hull.h): the 26-DOP of their content voxels, as the
 * dense kind's hull of its rows. */
static void content_bounds(const xt_nvdb *g, xt_nvdb_bricks_host *h) {
  xt_nvdb_bricks *b = &h->b;
  const float bg = mu_of(g, g->background);
  int lo[3] = {INT32_MAX, INT32_MAX, INT32_MAX}, hi[3] = {-1, -1, -1};
  xt_hull_acc acc;
  xt_hull_begin(&acc);
  size_t e = 0;
  for (int cz = 0; cz < b->nc[2]; cz++)
    for (int cy = 0; cy < b->nc[1]; cy++)
      for (int cx = 0; cx < b->nc[0]; cx++, e++) {
        const int32_t t = h->table[e];
        if (t < 0 && memcmp(&h->palette[-1 - t], &bg, sizeof bg) == 0) continue;
        const int c[3] = {cx, cy, cz};
        for (int a = 0; a < 3; a++) {
          lo[a] = c[a] < lo[a] ? c[a] : lo[a];
          hi[a] = c[a] > hi[a] ? c[a] : hi[a];
        }
        hull_add_block(h, c, t, bg, &acc);
      }
  b->bgmu = bg;
  b->content = hi[0] >= 0;
  b->hull = xt_hull_end(&acc, b->hlo, b->hhi);
  for (int a = 0; a < 3; a++) {
    if (!b->content) {
      b->clo[a] = b->chi[a] = 0;
      continue;
    }
    const int l = 8 * (lo[a] + b->c0[a]) - b->lo[a] - 1, u = 8 * (hi[a] + b->c0[a] + 1) - b->lo[a] + 1;
    b->clo[a] = l < 0 ? 0 : l;
    b->chi[a] = u > b->n[a] ? b->n[a] : u;
  }
}

/* The level of every table entry: the largest aligned cube (2^L blocks a side, L <= 4, at cells c0
 * + multiples of 2^L) inside the table whose blocks are all constant at one value (bit for bit);
 * 0 for bricks. A cube of level L is 8 cubes of level L - 1 of that value. */
static int region_levels(xt_nvdb_bricks_host *h) {
  const xt_nvdb_bricks *b = &h->b;
  if (!(h->level = calloc(h->ntable ? h->ntable : 1, 1))) return 0;
  const size_t nx = (size_t)b->nc[0], nxy = nx * (size_t)b->nc[1];
  for (int L = 1; L <= 4; L++) {
    const int s = 1 << L, hs = s / 2;
    for (int z = 0; z + s <= b->nc[2]; z += s)
      for (int y = 0; y + s <= b->nc[1]; y += s)
        for (int x = 0; x + s <= b->nc[0]; x += s) {
          const size_t e0 = (size_t)x + nx * (size_t)y + nxy * (size_t)z;
          if (h->table[e0] >= 0 || h->level[e0] != L - 1) continue;
          const float v = h->palette[-1 - h->table[e0]];
          int ok = 1;
          for (int k = 1; k < 8 && ok; k++) { /* the other 7 half cubes: their first block */
            const size_t e = e0 + (size_t)(k & 1) * hs + nx * (size_t)((k >> 1) & 1) * hs + nxy * (size_t)(k >> 2) * hs;
            ok = h->table[e] < 0 && h->level[e] == L - 1 && memcmp(&h->palette[-1 - h->table[e]], &v, sizeof v) == 0;
          }
          if (!ok) continue;
          for (int k = 0; k < s; k++)
            for (int j = 0; j < s; j++) memset(h->level + e0 + nx * (size_t)j + nxy * (size_t)k, L, (size_t)s);
        }
  }
  return 1;
}

int xt_nvdb_bricks_build(const xt_nvdb *g, xt_nvdb_bricks_host *h, xt_msg *msg) {
  memset(h, 0, sizeof *h);
  if (!g || !g->words || (g->labels && !g->materials)) return xt_fail(msg, XT_EINVAL, "nvdb bricks: no grid");
  size_t nt = 1;
  for (int a = 0; a < 3; a++) {
    h->b.lo[a] = g->lo[a];
    h->b.n[a] = g->hi[a] - g->lo[a] + 1;
    h->b.c0[a] = xt_nvdb_coarse(g->lo[a]);
    h->b.nc[a] = xt_nvdb_coarse(g->hi[a]) - h->b.c0[a] + 1;
    nt *= (size_t)h->b.nc[a];
  }
  if (nt > (size_t)INT32_MAX) return xt_fail(msg, XT_ETOOLARGE, "nvdb bricks: %zu coarse cells (at most 2^31 - 1)", nt);
  /* leaves first: the pool is allocated once, at its final size */
  const size_t nleaf = g->nodes[0];
  if (nleaf > (size_t)INT32_MAX) return xt_fail(msg, XT_ETOOLARGE, "nvdb bricks: %zu leaves", nleaf);
  h->table = malloc(nt * sizeof *h->table);
  h->pool = malloc((nleaf ? nleaf : 1) * 512 * sizeof *h->pool);
  if (!h->table || !h->pool) {
    xt_nvdb_bricks_free(h);
    return xt_fail(msg, XT_ENOMEM, "nvdb bricks: out of memory for %zu bricks", nleaf);
  }
  h->ntable = nt;
  pnanovdb_buf_t buf = pnanovdb_make_buf(g->words, g->bytes / 4);
  pnanovdb_grid_handle_t grid = {pnanovdb_address_null()};
  pnanovdb_readaccessor_t acc;
  pnanovdb_readaccessor_init(&acc, pnanovdb_tree_get_root(buf, pnanovdb_grid_get_tree(buf, grid)));
  size_t pcap = 0;
  int ok = 1;
  size_t e = 0;
  for (int cz = 0; cz < h->b.nc[2]; cz++)
    for (int cy = 0; cy < h->b.nc[1]; cy++)
      for (int cx = 0; cx < h->b.nc[0]; cx++, e++) {
        const int c[3] = {cx + h->b.c0[0], cy + h->b.c0[1], cz + h->b.c0[2]};
        int p[3];
        for (int a = 0; a < 3; a++) p[a] = 8 * c[a] < g->lo[a] ? g->lo[a] : 8 * c[a]; /* a voxel of the domain */
        pnanovdb_coord_t ijk = {p[0], p[1], p[2]};
        int dim;
        const float v = xt_nvdb_probe(g->grid_type, buf, &acc, &ijk, g->background, &dim);
        if (dim != 1) {
          h->table[e] = palette_entry(h, mu_of(g, v), &pcap, &ok);
          if (!ok) goto oom;
          continue;
        }
        if (h->nbricks == nleaf) { /* more leaf blocks than the grid counts leaves: not a grid we made */
          xt_nvdb_bricks_free(h);
          return xt_fail(msg, XT_EINTERNAL, "nvdb bricks: more leaf blocks than the grid's %zu leaves", nleaf);
        }
        float *br = h->pool + h->nbricks * 512;
        for (int z = 0; z < 8; z++)
          for (int y = 0; y < 8; y++)
            for (int x = 0; x < 8; x++) {
              const pnanovdb_coord_t vc = {8 * c[0] + x, 8 * c[1] + y, 8 * c[2] + z};
              int d;
              br[x + 8 * y + 64 * z] = mu_of(g, xt_nvdb_probe(g->grid_type, buf, &acc, &vc, g->background, &d));
            }
        h->table[e] = (int32_t)h->nbricks++;
      }
  content_bounds(g, h);
  if (!region_levels(h)) goto oom;
  if (!h->palette) { /* never NULL (the device copies one entry at least): an unused 0 */
    if (!(h->palette = malloc(sizeof *h->palette))) goto oom;
    h->palette[0] = 0.f;
  }
  h->b.table = h->table;
  h->b.pool = h->pool;
  h->b.palette = h->palette;
  h->b.level = h->level;
  return 0;
oom:
  xt_nvdb_bricks_free(h);
  return xt_fail(msg, XT_ENOMEM, "nvdb bricks: out of memory");
}

void xt_nvdb_bricks_free(xt_nvdb_bricks_host *h) {
  free(h->table);
  free(h->pool);
  free(h->palette);
  free(h->level);
  memset(h, 0, sizeof *h);
}

uint64_t xt_nvdb_bricks_bytes(const xt_nvdb_bricks_host *h) {
  return (uint64_t)h->ntable * 5 + (uint64_t)h->nbricks * 2048 + (uint64_t)(h->npalette ? h->npalette : 1) * 4;
}
