/* The CUDA Gaussian kind's math on the host, without a GPU (label cpu; built where nvcc is):
 * xt_gmm_footprint.h's footprint, silhouette conic, AccuTile row spans and per-pixel term are the
 * functions the kernels call. Here they run on the CPU, with the kernels' data flow emulated
 * (tile lists in Gaussian order, batches of XT_GMM_BATCH summed in float, batches in double), and
 * are checked against independent oracles:
 *
 *  - every frame against the float64 reference (xt_ref_render_f64): relative L2 < 1e-5, max
 *    error <= 1e-4 of the frame maximum (the GPU test's bound);
 *  - the tile sets against brute force: every pixel centre whose ray passes within the cut-off
 *    (the reference's double-precision test, xt_gmm_line.h) lies in a tile of the Gaussian's set
 *    (never missed), and the set has few tiles without such a pixel (tight: AccuTile);
 *  - Gaussians crossing the detector plane (erf form), and the culling of those beyond it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "xt_gmm_footprint.h"

extern "C" {
#include "xt_gmm_line.h"
#include "xt_proj.h"
#include "xt_test.h"
}
#include "xt_test_gmm.h"

static xt_geometry random_geometry(int cols, int rows, double pitch, double sod, double sid) {
  static xt_detector_mode mode;
  mode = xt_mode_custom("t", cols, rows, pitch, pitch * urand(0.8, 1.25), sod, sid);
  xt_pose p = xt_pose_default(&mode);
  p.primary_deg = urand(-180, 180);
  p.secondary_deg = urand(-40, 40);
  p.detector_rot_deg = urand(-30, 30);
  p.table_mm = xt_v3(urand(-15, 15), urand(-15, 15), urand(-15, 15));
  xt_geometry g;
  xt_geom_compute(&p, &mode, &g, NULL);
  return g;
}

/* The kernels' pipeline on the host: footprints, tile lists (duplicate + stable sort = lists in
 * Gaussian order), and the render's summation order. */
static void emulate(const xt_model *m, const xt_geometry *g, std::vector<double> &out, size_t *pairs) {
  const xt_gmm *gm = xt_model_gmm(m);
  const int cols = g->mode.cols, rows = g->mode.rows;
  const int ntx = (cols + XT_GMM_TILE_W - 1) / XT_GMM_TILE_W, nty = (rows + XT_GMM_TILE_H - 1) / XT_GMM_TILE_H;
  gmm_cam cam;
  out.assign((size_t)cols * rows, 0.0);
  *pairs = 0;
  if (!xt_gmm_cam_fill(g, &m->placement, &cam)) return;
  std::vector<gmm_screen> scr(gm->count);
  std::vector<gmm_conic> con(gm->count);
  std::vector<std::vector<uint32_t>> lists((size_t)ntx * nty);
  for (size_t i = 0; i < gm->count; i++) {
    gmm_conic &q = con[i];
    uint32_t n = xt_gmm_footprint(gm->g[i], cam, gm->cutoff, cols, ntx, nty, &scr[i], &q);
    uint32_t written = 0;
    if (n)
      for (int ty = q.ty0; ty <= q.ty1; ty++) {
        int a, b;
        xt_gmm_row_span(q, ty, ntx, &a, &b);
        for (int tx = a; tx <= b; tx++, written++) lists[(size_t)ty * ntx + tx].push_back((uint32_t)i);
      }
    XT_CHECK(written == n);
    *pairs += n;
  }
  for (int ty = 0; ty < nty; ty++)
    for (int tx = 0; tx < ntx; tx++) {
      const std::vector<uint32_t> &L = lists[(size_t)ty * ntx + tx];
      for (int ly = 0; ly < XT_GMM_TILE_H; ly++)
        for (int lx = 0; lx < XT_GMM_TILE_W; lx++) {
          const int col = tx * XT_GMM_TILE_W + lx, row = ty * XT_GMM_TILE_H + ly;
          if (col >= cols || row >= rows) continue;
          /* the warp of this pixel skips the Gaussians whose conic misses its sub-tile */
          const int warp = (ly / XT_GMM_WARP_H) * (XT_GMM_TILE_W / XT_GMM_WARP_W) + lx / XT_GMM_WARP_W;
          double acc = 0;
          for (size_t base = 0; base < L.size(); base += XT_GMM_BATCH) {
            float part = 0.f;
            for (size_t j = base; j < L.size() && j < base + XT_GMM_BATCH; j++) {
              if (!(xt_gmm_warp_mask(con[L[j]], tx * XT_GMM_TILE_W, ty * XT_GMM_TILE_H) >> warp & 1u)) continue;
              gmm_tile_g r = xt_gmm_tile_record(scr[L[j]], tx * XT_GMM_TILE_W, ty * XT_GMM_TILE_H);
              part += xt_gmm_term(r.g0, r.g1, r.g2, r.g3, (float)lx, (float)ly);
            }
            acc += part;
          }
          const xt_vec3 px = xt_geom_pixel_pos(g, col, row);
          out[(size_t)row * cols + col] = acc * xt_v3_norm(xt_v3_sub(px, g->source));
        }
    }
}

static int compare(const char *what, const xt_model *m, const xt_geometry *g, const std::vector<double> &emu) {
  const size_t np = (size_t)g->mode.cols * g->mode.rows;
  std::vector<double> ref(np);
  const xt_model *ms[1] = {m};
  if (xt_ref_render_f64(ms, 1, g, ref.data(), 0, NULL)) return 1;
  double mx = 0, num = 0, den = 0, worst = 0;
  size_t bad = 0, wi = 0;
  for (size_t i = 0; i < np; i++) mx = fmax(mx, fabs(ref[i]));
  for (size_t i = 0; i < np; i++) {
    const double e = fabs(emu[i] - ref[i]);
    if (!(e <= worst)) {
      worst = e;
      wi = i;
    }
    num += e * e;
    den += ref[i] * ref[i];
    bad += !(e <= 1e-4 * mx);
  }
  const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  const int fail = bad > 0 || !(rel < 1e-5) || mx == 0;
  if (fail || getenv("XT_TEST_VERBOSE"))
    fprintf(stderr, "  %s: max %.6g, rel L2 %.3g, max err %.3g of max at pixel %zu (emu %.9g ref %.9g), %zu bad\n", what,
            mx, rel, mx > 0 ? worst / mx : 0, wi, emu[wi], ref[wi], bad);
  return fail;
}

XT_TEST(frames_match_the_reference) {
  srand(21);
  for (int t = 0; t < 12; t++) {
    xt_model *m = random_mixture(t % 2 ? 400 : 60, 60, 0.3, 12, urand(3, 6));
    XT_REQUIRE(m);
    xt_affine rz = xt_aff_rot(2, urand(-3, 3)), rx = xt_aff_rot(0, urand(-3, 3));
    m->placement = xt_aff_compose(&rx, &rz);
    if (t % 3 == 2) m->placement.m[0][0] *= 1.2; /* affine */
    for (int a = 0; a < 3; a++) m->placement.t[a] = urand(-20, 20);
    const double sod = urand(600, 900);
    xt_geometry g = random_geometry(40 + rand() % 60, 30 + rand() % 60, urand(0.8, 3), sod, sod + urand(250, 500));
    std::vector<double> emu;
    size_t pairs;
    emulate(m, &g, emu, &pairs);
    char what[64];
    snprintf(what, sizeof what, "trial %d", t);
    XT_CHECK_MSG(compare(what, m, &g, emu) == 0, "%s", what);
    xt_model_free(m);
  }
}

XT_TEST(detector_through_the_mixture) {
  srand(22);
  for (int t = 0; t < 6; t++) {
    xt_model *m = random_mixture(300, 60, 1, 15, urand(3, 6));
    XT_REQUIRE(m);
    xt_geometry g = random_geometry(57, 49, urand(1.5, 3), 800, 800 + urand(5, 40));
    std::vector<double> emu;
    size_t pairs;
    emulate(m, &g, emu, &pairs);
    char what[64];
    snprintf(what, sizeof what, "detector plane trial %d", t);
    XT_CHECK_MSG(compare(what, m, &g, emu) == 0, "%s", what);
    xt_model_free(m);
  }
}

/* Gaussians whose cut-off ellipsoid reaches the source's plane: body-sized ones, and ones beside
 * the tube; they cover the whole detector and take the closest-point form per pixel. */
XT_TEST(gaussians_reaching_the_source_plane) {
  srand(24);
  for (int t = 0; t < 6; t++) {
    xt_model *m = random_mixture(40, 30, 30, 250, urand(3, 6));
    XT_REQUIRE(m);
    if (t % 2) /* a few small ones right beside the source (800 mm from the isocentre, at +y) */
      for (int i = 0; i < 5; i++) {
        xt_model_gmm(m)->g[i].centre[1] = (float)urand(700, 790);
        for (int a = 0; a < 3; a++) xt_model_gmm(m)->g[i].scale[a] = (float)urand(2, 20);
      }
    if (t % 3 == 2) /* and some centred behind it, reaching forward past it */
      for (int i = 5; i < 9; i++) {
        xt_model_gmm(m)->g[i].centre[1] = (float)urand(810, 880);
        for (int a = 0; a < 3; a++) xt_model_gmm(m)->g[i].scale[a] = (float)urand(20, 60);
      }
    XT_REQUIRE(xt_gmm_finish(xt_model_gmm(m), "t", NULL) == 0);
    xt_geometry g = random_geometry(64, 48, urand(2, 5), 800, 1200);
    g.pose.table_mm = xt_v3(0, 0, 0); /* keep the source where the Gaussians above expect it */
    xt_geom_compute(&g.pose, &g.mode, &g, NULL);
    std::vector<double> emu;
    size_t pairs;
    emulate(m, &g, emu, &pairs);
    char what[64];
    snprintf(what, sizeof what, "source-plane trial %d", t);
    XT_CHECK_MSG(compare(what, m, &g, emu) == 0, "%s", what);
    xt_model_free(m);
  }
}

/* Brute force over every pixel centre of the detector, per Gaussian: the reference's own
 * double-precision cut-off test on the whole ray segment. */
XT_TEST(tiles_cover_the_cutoff_exactly_and_tightly) {
  srand(23);
  size_t needed = 0, given = 0, missed = 0;
  for (int t = 0; t < 8; t++) {
    xt_model *m = random_mixture(150, 50, 0.3, 10, urand(3, 6));
    XT_REQUIRE(m);
    xt_geometry g = random_geometry(90, 70, urand(0.5, 2), 800, 1200);
    const int cols = g.mode.cols, rows = g.mode.rows;
    const int ntx = (cols + 15) / 16, nty = (rows + 15) / 16;
    gmm_cam cam;
    XT_REQUIRE(xt_gmm_cam_fill(&g, &m->placement, &cam));
    const xt_gmm *gm = xt_model_gmm(m);
    const double k2 = gm->cutoff * gm->cutoff;
    for (size_t i = 0; i < gm->count; i++) {
      gmm_screen s;
      gmm_conic q;
      std::vector<char> in((size_t)ntx * nty, 0), need((size_t)ntx * nty, 0);
      uint32_t n = xt_gmm_footprint(gm->g[i], cam, gm->cutoff, cols, ntx, nty, &s, &q);
      if (n)
        for (int ty = q.ty0; ty <= q.ty1; ty++) {
          int a, b;
          xt_gmm_row_span(q, ty, ntx, &a, &b);
          for (int tx = a; tx <= b; tx++) in[(size_t)ty * ntx + tx] = 1;
        }
      double P[6];
      xt_gmm_precision(&gm->g[i], P);
      for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
          const xt_vec3 px = xt_geom_pixel_pos(&g, c, r), d = xt_v3_sub(px, g.source);
          const double len = xt_v3_norm(d), w[3] = {d.x / len, d.y / len, d.z / len};
          /* the model sits at identity placement, moved by the table: world = model + table */
          const double r0[3] = {g.source.x - gm->g[i].centre[0] - g.pose.table_mm.x,
                                g.source.y - gm->g[i].centre[1] - g.pose.table_mm.y,
                                g.source.z - gm->g[i].centre[2] - g.pose.table_mm.z};
          /* inside the cut-off by a margin: the segment's integral is non-zero for the reference */
          if (xt_gmm_segment(P, 1.0, r0, w, len, k2 * (1 - 1e-5)) > 0) need[(size_t)(r / 16) * ntx + c / 16] = 1;
        }
      for (size_t k = 0; k < in.size(); k++) {
        if (need[k] && !in[k] && ++missed <= 5) XT_CHECK_MSG(0, "Gaussian %zu: tile %zu is needed but not listed", i, k);
        needed += need[k];
        given += in[k];
      }
    }
    xt_model_free(m);
  }
  printf("  AccuTile: %zu tiles listed for %zu tiles that hold a pixel within the cut-off (%.3f)\n", given, needed,
         needed ? (double)given / needed : 0);
  XT_CHECK(missed == 0 && needed > 100 && given <= needed + needed / 10);
}

XT_TEST_MAIN(XT_ENTRY(frames_match_the_reference) XT_ENTRY(detector_through_the_mixture)
                 XT_ENTRY(gaussians_reaching_the_source_plane)
                 XT_ENTRY(tiles_cover_the_cutoff_exactly_and_tightly))
