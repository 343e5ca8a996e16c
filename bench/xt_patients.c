/* How many patients of one CT's size fit in one GPU's memory, per model form (issue 29):
 * dense float, NanoVDB Float / Fp16 / Fp8 of the classified CT (nvdb-convert's default, models/
 * xt_ct_body.h), with and without the brick pool of the bricks traversal or the one working set per GPU
 * of the dense traversal, and a Gaussian mixture - each from the device bytes its model kind states (the
 * figure GET /v1/models reports), so no GPU is needed. Render times are measured on the GPU
 * separately (xtwin-bench; docs/BENCHMARKS.md).
 *
 *   xtwin-patients --volume CT [--convert hu|mu] [--energy KEV] [--gmm FILE.xgmm | --gaussians N]
 *                  [--reserve-gib G] [--classify body|off]
 *
 * Capacity = floor((GPU bytes - reserve) / device bytes per patient) for the two cards the project
 * uses (H100: ~78 GiB usable, H200: ~139 GiB: the device notes' figures); the reserve (default 2
 * GiB) stands for the CUDA context and one projector's frame scratch, shared by all patients. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_ct_body.h"
#include "xt_gmm.h"
#include "xt_hu.h"
#include "xt_load.h"
#include "xt_model_kind.h"
#include "xt_nvdb.h"
#include "xt_nvdb_bricks.h"
#include "xt_nvdb_build.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static const struct {
  const char *name;
  double gib;
} cards[] = {{"H100 (78 GiB)", 78.0}, {"H200 (139 GiB)", 139.0}};

static double reserve_gib = 2.0;

/* shared: bytes per GPU beside the reserve that every patient shares (a projector's working set) */
static void row_shared(const char *form, uint64_t bytes, uint64_t dense, uint64_t shared, const char *note) {
  printf("| %s | %llu | %.1f %% |", form, (unsigned long long)bytes, 100.0 * (double)bytes / (double)dense);
  for (size_t c = 0; c < sizeof cards / sizeof cards[0]; c++)
    printf(" %.0f |", floor(((cards[c].gib - reserve_gib) * GIB - (double)shared) / (double)bytes));
  printf(" %s |\n", note);
}

static void row(const char *form, uint64_t bytes, uint64_t dense, const char *note) {
  row_shared(form, bytes, dense, 0, note);
}

/* The device bytes of the grid of v (a converted copy, exactly as nvdb-convert builds it) and,
 * when bricks != NULL, what XT_NVDB_TRAVERSAL=bricks adds: the brick pool (xt_nvdb_bricks.h). */
static int grid_bytes(const xt_volume *v, int quant, uint64_t *dev, uint64_t *bricks, xt_msg *msg) {
  xt_nvdb_build_options o = {quant, 0.0, 0.0, 1e-4, NULL};
  uint32_t *w = NULL;
  uint64_t bytes = 0;
  xt_nvdb *g = NULL;
  xt_model *m = NULL;
  int rc = xt_nvdb_build(v, &o, &w, &bytes, msg);
  if (!rc) rc = xt_nvdb_from_blob(w, bytes, NULL, "grid", &g, msg);
  if (!rc && (rc = xt_model_from_nvdb(g, "grid", &m, msg))) xt_nvdb_free(g);
  if (!rc) rc = xt_model_device_bytes(m, dev);
  if (!rc && bricks) {
    xt_nvdb_bricks_host h;
    if (!(rc = xt_nvdb_bricks_build(xt_model_nvdb(m), &h, msg))) *bricks = xt_nvdb_bricks_bytes(&h);
    xt_nvdb_bricks_free(&h);
  }
  xt_model_free(m);
  return rc;
}

static int usage(void) {
  fprintf(stderr, "usage: xtwin-patients --volume CT [--convert hu|mu] [--energy KEV] [--gmm FILE.xgmm | --gaussians N] "
                  "[--reserve-gib G] [--classify body|off]\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *volume = NULL, *gmm = NULL;
  int hu = 1, classify = 1;
  double energy = 60, gaussians = 100000;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) return usage();
    if (!strcmp(a, "--volume")) volume = v;
    else if (!strcmp(a, "--convert") && (!strcmp(v, "hu") || !strcmp(v, "mu"))) hu = !strcmp(v, "hu");
    else if (!strcmp(a, "--energy")) energy = atof(v);
    else if (!strcmp(a, "--gmm")) gmm = v;
    else if (!strcmp(a, "--gaussians")) gaussians = atof(v);
    else if (!strcmp(a, "--reserve-gib")) reserve_gib = atof(v);
    else if (!strcmp(a, "--classify") && (!strcmp(v, "body") || !strcmp(v, "off"))) classify = !strcmp(v, "body");
    else return usage();
    i++;
  }
  if (!volume || !(energy >= 20 && energy <= 150) || !(gaussians >= 1) || !(reserve_gib >= 0 && reserve_gib < 78))
    return usage();
  xt_msg msg = {{0}};
  xt_load_options lo = {.convert = hu ? XT_LOAD_HU_TO_MU : XT_LOAD_MU, .energy_kev = energy};
  xt_model *dm = NULL, *gm = NULL;
  int rc = xt_model_load(volume, &lo, "ct", &dm, &msg);
  if (rc || !xt_model_volume(dm) || xt_model_volume(dm)->type != XT_VOXEL_F32) {
    fprintf(stderr, "xtwin-patients: --volume %s: %s\n", volume, rc ? msg.text : "not a dense volume");
    xt_model_free(dm);
    return 1;
  }
  xt_volume *v = xt_model_volume(dm);
  uint64_t dense = 0, f32 = 0, f16 = 0, f8 = 0, gb = 0, br32 = 0, br8 = 0, fix = 0, brix = 0;
  xt_model_device_bytes(dm, &dense);
  xt_ct_body_report br;
  memset(&br, 0, sizeof br);
  if (hu && classify) {
    xt_hu_calib cal;
    if ((rc = xt_hu_calib_make(XT_HU_BILINEAR, energy, 0, &cal, &msg)) ||
        (rc = xt_ct_body_classify(v, xt_hu_calib_mu(&cal, -500), 0.0, &br, &msg)))
      goto fail;
  }
  if ((rc = grid_bytes(v, XT_NVDB_Q_FLOAT, &f32, &br32, &msg)) || (rc = grid_bytes(v, XT_NVDB_Q_FP16, &f16, NULL, &msg)) ||
      (rc = grid_bytes(v, XT_NVDB_Q_FP8, &f8, &br8, &msg)) || (rc = grid_bytes(v, XT_NVDB_Q_INDEX, &fix, &brix, &msg)))
    goto fail;
  char gnote[160];
  if (gmm) {
    if ((rc = xt_model_load(gmm, &lo, "gmm", &gm, &msg)) || !xt_model_gmm(gm)) {
      fprintf(stderr, "xtwin-patients: --gmm %s: %s\n", gmm, rc ? msg.text : "not a Gaussian mixture");
      rc = rc ? rc : 1;
      goto done;
    }
    xt_model_device_bytes(gm, &gb);
    snprintf(gnote, sizeof gnote, "%zu Gaussians of %s", xt_model_gmm(gm)->count, gmm);
  } else {
    gb = (uint64_t)gaussians * XT_GMM_DEVICE_BYTES_PER_GAUSSIAN;
    snprintf(gnote, sizeof gnote, "%.0f Gaussians (assumed: --gaussians)", gaussians);
  }
  printf("%s: %dx%dx%d voxels, %.3gx%.3gx%.3g mm%s\n", volume, v->dim[0], v->dim[1], v->dim[2], v->spacing[0],
         v->spacing[1], v->spacing[2],
         hu && classify ? "; grids of the classified CT (nvdb-convert's default)" : "; grids of the CT as loaded");
  if (hu && classify)
    printf("classification: %.1f %% of the voxels made background, line-integral mass dropped %.2f %%\n",
           100.0 * (double)br.outside / (double)br.voxels, br.mass > 0 ? 100.0 * br.mass_dropped / br.mass : 0.0);
  printf("reserve per GPU (context, frame scratch): %.1f GiB\n\n", reserve_gib);
  printf("| form | device bytes / patient | of dense |");
  for (size_t c = 0; c < sizeof cards / sizeof cards[0]; c++) printf(" patients, %s |", cards[c].name);
  printf(" note |\n|---|---|---|---|---|---|\n");
  row("dense float", dense, dense, "the linear copy (AUTO adds a texture copy above the L2 size: 2x)");
  row("NanoVDB Float", f32, dense, "exact to the classified CT");
  row("NanoVDB index (nvdb-convert's default for mu)", fix, dense,
      "exact to the classified CT: an IndexGrid and a float channel of the active voxels");
  row("NanoVDB Fp16", f16, dense, "per-leaf 16-bit");
  row("NanoVDB Fp8", f8, dense, "per-leaf 8-bit");
  row("NanoVDB Float + bricks", f32 + br32, dense, "XT_NVDB_TRAVERSAL=bricks: the grid and its brick pool (float bricks)");
  row("NanoVDB Fp8 + bricks", f8 + br8, dense, "the same for Fp8: the pool holds decoded floats");
  row("NanoVDB index + bricks", fix + brix, dense, "the same for the index form");
  /* XT_NVDB_TRAVERSAL=dense: one working set per projector, the domain (here the CT's box) as floats
   * with the voxel kind's guard bands, and a texture copy of it above the L2 size (50 MiB assumed:
   * H100 and H200) */
  const uint64_t slice = (uint64_t)v->dim[0] * v->dim[1];
  uint64_t ws = (xt_volume_voxels(v) + 2 * (slice + 1)) * sizeof(float);
  if (xt_volume_voxels(v) * sizeof(float) > 50ull << 20) ws += xt_volume_voxels(v) * sizeof(float);
  char wnote[200];
  snprintf(wnote, sizeof wnote, "XT_NVDB_TRAVERSAL=dense: the grid, and one working set of %llu bytes per GPU for all",
           (unsigned long long)ws);
  row_shared("NanoVDB index + working set", fix, dense, ws, wnote);
  row_shared("NanoVDB Fp8 + working set", f8, dense, ws, "the same for Fp8 (the working set holds decoded floats)");
  row("GMM", gb, dense, gnote);
  rc = 0;
  goto done;
fail:
  fprintf(stderr, "xtwin-patients: %s\n", msg.text);
done:
  xt_model_free(gm);
  xt_model_free(dm);
  return rc ? 1 : 0;
}
