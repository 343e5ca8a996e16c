/* Instruments (issue 26) on the CPU reference, against closed forms: a straight tube's chords, a
 * catheter's wall and lumen, a bent tube (whose mitred joint is checked ray by ray against the
 * leg each ray lies beside, and by the volume it encloses), tangent, grazing and axial rays, a
 * wire far thinner than a voxel or a pixel; the pixel-area integral of a wire thinner than a
 * pixel against its projected mass; a scene with instruments as the sum of its parts (line
 * integrals and channels); shapes set on a projector's own copy; bad shapes refused; the CUDA
 * splat's candidate test (xt_tube_near) conservative; its factored closed form (xt_tube_fac_chords)
 * against a long-double oracle, as xt_tube_chords; the compact splat's pre-test (xt_tube_fac_maybe)
 * refusing no ray with a chord; the splat's runs picking every segment a ray meets. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_channels.h"
#include "xt_instr.h"
#include "xt_phantom.h"
#include "xt_proj.h"
#include "xt_test.h"

/* A device of one section (wall, radii) in air; *mu gets the wall's mu less air's. */
static void one_section(xt_instr_device *dev, const char *wall, double r_out, double r_in, const char *lumen,
                        double *mu_wall, double *mu_lumen) {
  int w = 0, l = 0;
  XT_REQUIRE(xt_instr_device_init(dev, "air", 4096, NULL) == 0);
  XT_REQUIRE(xt_instr_material(dev, wall, &w, NULL) == 0);
  if (lumen) XT_REQUIRE(xt_instr_material(dev, lumen, &l, NULL) == 0);
  dev->nsections = 1;
  dev->sec[0] = (xt_instr_section){0.0, r_out, r_in, w, l};
  *mu_wall = (double)dev->mt.mu[w] - (double)dev->mt.mu[dev->medium];
  if (mu_lumen) *mu_lumen = (double)dev->mt.mu[l] - (double)dev->mt.mu[dev->medium];
}

static double seg(const xt_model *m, xt_vec3 a, xt_vec3 b) {
  const xt_model *ms[1] = {m};
  return xt_ref_segment(ms, 1, a, b);
}

XT_TEST(straight_segment_closed_form) {
  xt_instr_device dev;
  double mu;
  one_section(&dev, "nitinol", 0.5, 0.0, NULL, &mu, NULL);
  const double pts[] = {-10, 0, 0, 10, 0, 0};
  xt_model *m = NULL;
  XT_REQUIRE(xt_model_from_instr(&dev, pts, 2, "wire", &m, NULL) == 0);
  /* across the axis at offset h: 2 sqrt(r^2 - h^2) */
  for (int i = 0; i <= 20; i++) {
    const double h = 0.5 * i / 20.0 * 0.999, x = -9.0 + 0.8 * i;
    const double want = mu * 2.0 * sqrt(0.25 - h * h);
    XT_CHECK_NEAR(seg(m, xt_v3(x, h, -30), xt_v3(x, h, 40)), want, 1e-14 * (1 + want));
  }
  /* oblique through the axis at angle t to it: 2 r / sin t */
  for (int i = 1; i <= 8; i++) {
    const double t = i * 0.17, dx = cos(t), dz = sin(t);
    const double want = mu * 2.0 * 0.5 / sin(t);
    XT_CHECK_NEAR(seg(m, xt_v3(2 - 40 * dx, 0, -40 * dz), xt_v3(2 + 40 * dx, 0, 40 * dz)), want, 1e-13 * want);
  }
  /* a segment that ends inside the tube counts only its own part */
  XT_CHECK_NEAR(seg(m, xt_v3(1, 0, -30), xt_v3(1, 0, 0.2)), mu * 0.7, 1e-14);
  /* past the ends: nothing */
  XT_CHECK(seg(m, xt_v3(10.01, 0, -30), xt_v3(10.01, 0, 30)) == 0.0);
  XT_CHECK(seg(m, xt_v3(-10.01, 0, -30), xt_v3(-10.01, 0, 30)) == 0.0);
  xt_model_free(m);
}

XT_TEST(catheter_wall_and_lumen) {
  xt_instr_device dev;
  double mw, ml;
  one_section(&dev, "catheter_polymer_w", 0.835, 0.55, "iodine_contrast", &mw, &ml);
  const double pts[] = {0, -20, 0, 0, 20, 0};
  xt_model *m = NULL;
  XT_REQUIRE(xt_model_from_instr(&dev, pts, 2, "cath", &m, NULL) == 0);
  for (int i = 0; i < 30; i++) {
    const double h = 0.86 * i / 29.0;
    const double co = h < 0.835 ? 2 * sqrt(0.835 * 0.835 - h * h) : 0, ci = h < 0.55 ? 2 * sqrt(0.55 * 0.55 - h * h) : 0;
    const double want = mw * (co - ci) + ml * ci;
    XT_CHECK_NEAR(seg(m, xt_v3(h, 3, -50), xt_v3(h, 3, 50)), want, 1e-14 * (1 + fabs(want)));
  }
  xt_model_free(m);
}

/* The distance from (x, y) to the line through p along unit d, in the plane z = 0. */
static double dist_line(double x, double y, const double p[2], const double d[2]) {
  const double qx = x - p[0], qy = y - p[1], t = qx * d[0] + qy * d[1];
  return hypot(qx - t * d[0], qy - t * d[1]);
}

XT_TEST(bend_closed_form_and_volume) {
  /* two legs in the plane z = 0 meeting at the origin with a 50-degree turn: rays along z see, on
   * each side of the mitre plane, the chord of that leg's cylinder */
  xt_instr_device dev;
  double mu;
  const double r = 0.6, L = 8.0, turn = 50.0 * XT_PI / 180.0;
  one_section(&dev, "stainless_steel", r, 0.0, NULL, &mu, NULL);
  const double d1[2] = {cos(turn), sin(turn)}, d0[2] = {1, 0};
  const double pts[] = {-L, 0, 0, 0, 0, 0, L * d1[0], L * d1[1], 0};
  xt_model *m = NULL;
  XT_REQUIRE(xt_model_from_instr(&dev, pts, 3, "bent", &m, NULL) == 0);
  const double nm[2] = {d0[0] + d1[0], d0[1] + d1[1]}; /* the mitre normal (unnormalised) */
  const double o[2] = {0, 0};
  double vol = 0, maxerr = 0;
  const double step = 0.02;
  int hits = 0;
  for (double y = -1.5; y <= 2.5; y += step)
    for (double x = -3.0; x <= 3.0; x += step) {
      const int second = x * nm[0] + y * nm[1] > 0;
      const double dd = dist_line(x, y, o, second ? d1 : d0);
      /* within the legs' lengths (the legs' far ends are straight cuts well outside this window) */
      const double want = dd < r ? mu * 2 * sqrt(r * r - dd * dd) : 0.0;
      const double got = seg(m, xt_v3(x, y, -20), xt_v3(x, y, 20));
      /* squares: the chord's slope is unbounded at the edge, its square's is not */
      if (fabs(got * got - want * want) > maxerr) maxerr = fabs(got * got - want * want);
      hits += got > 0;
    }
  XT_CHECK_MSG(maxerr <= 1e-13 * (mu * 2 * r) * (mu * 2 * r), "max err of squares %.3g", maxerr);
  XT_CHECK(hits > 1000);
  /* no gap, no overlap: the volume over a fine grid of z rays is pi r^2 (L + L) */
  const double fine = 0.02;
  for (double y = -1.0; y <= L * d1[1] + 1.0; y += fine)
    for (double x = -L - 0.1; x <= L * d1[0] + 1.0; x += fine) vol += seg(m, xt_v3(x, y, -5), xt_v3(x, y, 5));
  vol *= fine * fine / mu;
  const double want = XT_PI * r * r * 2 * L;
  XT_CHECK_MSG(fabs(vol - want) <= 2e-3 * want, "volume %.6f, want %.6f", vol, want);
  xt_model_free(m);
}

XT_TEST(tangent_grazing_and_axial_rays) {
  xt_instr_device dev;
  double mu;
  const double r = 0.25;
  one_section(&dev, "platinum", r, 0.0, NULL, &mu, NULL);
  const double pts[] = {0, 0, -5, 0, 0, 5};
  xt_model *m = NULL;
  XT_REQUIRE(xt_model_from_instr(&dev, pts, 2, "tube", &m, NULL) == 0);
  /* tangent (offset r): a chord of length 0; just inside: 2 sqrt(2 r e) to first order */
  XT_CHECK(seg(m, xt_v3(r, -10, 1), xt_v3(r, 10, 1)) == 0.0);
  XT_CHECK(seg(m, xt_v3(r * (1 + 1e-9), -10, 1), xt_v3(r * (1 + 1e-9), 10, 1)) == 0.0);
  for (int k = 4; k <= 12; k += 2) {
    const double e = r * pow(10.0, -k), h = r - e;
    const double want = mu * 2 * sqrt((r - h) * (r + h)), got = seg(m, xt_v3(h, -10, 1), xt_v3(h, 10, 1));
    XT_CHECK_NEAR(got * got, want * want, 1e-14 * (mu * 2 * r) * (mu * 2 * r));
  }
  /* grazing: parallel to the axis just inside and just outside the surface */
  XT_CHECK_NEAR(seg(m, xt_v3(r - 1e-9, 0, -20), xt_v3(r - 1e-9, 0, 20)), mu * 10.0, 1e-12);
  XT_CHECK(seg(m, xt_v3(r + 1e-9, 0, -20), xt_v3(r + 1e-9, 0, 20)) == 0.0);
  /* along the axis, from outside and from inside */
  XT_CHECK_NEAR(seg(m, xt_v3(0, 0, -20), xt_v3(0, 0, 20)), mu * 10.0, 1e-12);
  XT_CHECK_NEAR(seg(m, xt_v3(0.1, 0, 2), xt_v3(0.1, 0, 20)), mu * 3.0, 1e-12);
  /* nearly along the axis: a tilt of 1e-7 rad keeps the whole length */
  XT_CHECK_NEAR(seg(m, xt_v3(0, -2e-6, -20), xt_v3(0, 2e-6, 20)), mu * 10.0 * sqrt(1 + 1e-14), 1e-11);
  xt_model_free(m);
}

XT_TEST(thinner_than_a_voxel_and_a_pixel_per_ray) {
  xt_instr_device dev;
  double mu;
  const double r = 0.005; /* 10 um: a hundredth of a voxel, a sixtieth of a pixel */
  one_section(&dev, "platinum", r, 0.0, NULL, &mu, NULL);
  const double pts[] = {-3, 1, 2, 3, 1, 2};
  xt_model *m = NULL;
  XT_REQUIRE(xt_model_from_instr(&dev, pts, 2, "fine", &m, NULL) == 0);
  for (int i = 0; i < 11; i++) {
    const double h = r * i / 10.5;
    const double want = mu * 2 * sqrt(r * r - h * h);
    XT_CHECK_NEAR(seg(m, xt_v3(0.3, 1 + h, -100), xt_v3(0.3, 1 + h, 100)), want, 1e-12 * want);
  }
  xt_model_free(m);
}

/* fd20-1024's pitch, the wire at the isocentre: the sum down a column of a wire along the rows is
 * its projected mass mu pi r^2 M / pitch (M = SID / SOD), whatever its sub-pixel position, when the
 * pixels are area integrals; centre rays alias. */
static xt_geometry fd20_geom(int n) {
  const xt_detector_mode mode = xt_mode_custom("t", n, n, 0.28875, 0.28875, 810, 1195);
  xt_pose p = xt_pose_default(&mode);
  xt_geometry g;
  xt_geom_compute(&p, &mode, &g, NULL);
  return g;
}

static void column_sums(double r, double *worst_area, double *worst_centre) {
  xt_instr_device dev;
  double mu;
  one_section(&dev, "nitinol", r, 0.0, NULL, &mu, NULL);
  const int n = 24;
  xt_geometry g = fd20_geom(n);
  const double M = g.mode.sid_mm / g.mode.sod_mm, pitch = g.mode.pitch_v_mm;
  const double want = mu * XT_PI * r * r * M / pitch;
  double *f = malloc(sizeof(double) * n * n);
  XT_REQUIRE(f);
  *worst_area = *worst_centre = 0;
  for (int k = 0; k < 8; k++) {
    const double shift = (k / 8.0 + 0.03) * pitch / M; /* sub-pixel steps at the isocentre */
    double pts[6];
    for (int a = 0; a < 3; a++) {
      const double u = xt_v3_get(g.u, a), v = xt_v3_get(g.v, a);
      pts[a] = -20 * u + shift * v;
      pts[3 + a] = 20 * u + shift * v;
    }
    xt_model *m = NULL;
    XT_REQUIRE(xt_model_from_instr(&dev, pts, 2, "w", &m, NULL) == 0);
    const xt_model *ms[1] = {m};
    XT_REQUIRE(xt_ref_render_f64(ms, 1, &g, f, 1, NULL) == 0);
    double area = 0, centre = 0;
    const int c = n / 2;
    for (int row = 0; row < n; row++) {
      area += f[row * n + c];
      const xt_vec3 px = xt_geom_pixel_pos(&g, c, row);
      centre += xt_ref_segment(ms, 1, g.source, px);
    }
    if (fabs(area - want) / want > *worst_area) *worst_area = fabs(area - want) / want;
    if (fabs(centre - want) / want > *worst_centre) *worst_centre = fabs(centre - want) / want;
    xt_model_free(m);
  }
  free(f);
}

XT_TEST(thinner_than_a_pixel_area_integral) {
  double area, centre;
  column_sums(0.178, &area, &centre); /* a 0.014-inch wire: 0.53 mm at the detector, 1.8 pixels */
  fprintf(stderr, "  (0.36 mm wire: area %.4f, centre rays %.4f)\n", area, centre);
  XT_CHECK_MSG(area <= 0.005, "0.36 mm wire: area integral off its projected mass by %.4f", area);
  XT_CHECK_MSG(centre >= 0.2, "0.36 mm wire: centre rays alias by only %.4f", centre);
  column_sums(0.05, &area, &centre); /* 0.1 mm: half a pixel at the detector */
  XT_CHECK_MSG(area <= 0.015, "0.1 mm wire: area integral off its projected mass by %.4f", area);
  XT_CHECK_MSG(centre >= 0.2, "0.1 mm wire: centre rays alias by only %.4f", centre);
  fprintf(stderr, "  (0.1 mm wire: area %.4f, centre rays %.4f)\n", area, centre);
}

/* A guidewire and a catheter along arcs. */
static void arc(double *pts, int n, double x0, double y0, double z0, double R, double t0, double t1) {
  for (int i = 0; i < n; i++) {
    const double t = t0 + (t1 - t0) * i / (n - 1);
    pts[3 * i] = x0 + R * cos(t);
    pts[3 * i + 1] = y0 + 0.3 * R * sin(2 * t);
    pts[3 * i + 2] = z0 + R * sin(t);
  }
}

static xt_geometry small_geom(double primary, double secondary) {
  const xt_detector_mode mode = xt_mode_custom("t", 40, 36, 3.0, 3.0, 800, 1200);
  xt_pose p = xt_pose_default(&mode);
  p.primary_deg = primary;
  p.secondary_deg = secondary;
  xt_geometry g;
  xt_geom_compute(&p, &mode, &g, NULL);
  return g;
}

XT_TEST(scene_is_the_sum_of_its_parts) {
  xt_instr_device gw, ct;
  XT_REQUIRE(xt_instr_guidewire(&gw, "blood", 512, NULL) == 0);
  XT_REQUIRE(xt_instr_catheter(&ct, "blood", 512, NULL) == 0);
  static double p1[3 * 400], p2[3 * 300];
  arc(p1, 400, 0, 0, 0, 40, 0.2, 2.8);
  arc(p2, 300, 5, 2, -3, 38, 0.6, 2.5);
  xt_model *w = NULL, *c = NULL, *h = NULL;
  XT_REQUIRE(xt_model_from_instr(&gw, p1, 400, "wire", &w, NULL) == 0);
  XT_REQUIRE(xt_model_from_instr(&ct, p2, 300, "cath", &c, NULL) == 0);
  c->placement.t[1] = 4;
  const double slab[3] = {160, 120, 140}; /* water: the instruments' channels leave room for one more */
  XT_REQUIRE(xt_phantom_slab_model("water", 1.0, slab, 4.0, &h, NULL) == 0);
  xt_geometry g = small_geom(30, -15);
  const int np = g.mode.cols * g.mode.rows;
  double *a = malloc(sizeof(double) * np), *b = malloc(sizeof(double) * np), *cc = malloc(sizeof(double) * np),
         *all = malloc(sizeof(double) * np);
  XT_REQUIRE(a && b && cc && all);
  const xt_model *mh[1] = {h}, *mw[1] = {w}, *mc[1] = {c}, *mall[3] = {h, w, c};
  XT_REQUIRE(xt_ref_render_f64(mh, 1, &g, a, 0, NULL) == 0);
  XT_REQUIRE(xt_ref_render_f64(mw, 1, &g, b, 0, NULL) == 0);
  XT_REQUIRE(xt_ref_render_f64(mc, 1, &g, cc, 0, NULL) == 0);
  XT_REQUIRE(xt_ref_render_f64(mall, 3, &g, all, 0, NULL) == 0);
  int nw = 0, nc = 0;
  for (int i = 0; i < np; i++) {
    XT_CHECK_NEAR(all[i], a[i] + b[i] + cc[i], 1e-13 * (1 + a[i]));
    nw += b[i] != 0;
    nc += cc[i] != 0;
  }
  XT_CHECK(nw > 20 && nc > 20);
  /* channels: the same sum, and at the tables' energy they give the line integral back */
  xt_chanset cs = {0};
  XT_REQUIRE(xt_chanset_add_model(&cs, h, NULL) == 0 && xt_chanset_add_model(&cs, w, NULL) == 0 &&
             xt_chanset_add_model(&cs, c, NULL) == 0);
  double mr[XT_MAX_CHANNELS];
  XT_REQUIRE(xt_chanset_mass_atten(&cs, XT_DEFAULT_ENERGY_KEV, mr, NULL) == 0);
  double *ch = malloc(sizeof(double) * np * cs.n), *chw = malloc(sizeof(double) * np * cs.n);
  XT_REQUIRE(ch && chw);
  XT_REQUIRE(xt_ref_render_channels_f64(mall, 3, &cs, &g, ch, 0, NULL) == 0);
  XT_REQUIRE(xt_ref_render_channels_f64(mw, 1, &cs, &g, chw, 0, NULL) == 0);
  double maxrel = 0;
  for (int i = 0; i < np; i++) {
    double mono = 0, monow = 0;
    for (int k = 0; k < cs.n; k++) {
      mono += mr[k] * ch[(size_t)k * np + i];
      monow += mr[k] * chw[(size_t)k * np + i];
    }
    const double e = fabs(mono - all[i]) / (1 + all[i]);
    if (e > maxrel) maxrel = e;
    XT_CHECK_NEAR(monow, b[i], 1e-5 * (1 + fabs(b[i])));
  }
  XT_CHECK_MSG(maxrel <= 1e-5, "channels vs line integral: %.3g", maxrel);
  free(ch);
  free(chw);
  free(a);
  free(b);
  free(cc);
  free(all);
  xt_model_free(w);
  xt_model_free(c);
  xt_model_free(h);
}

XT_TEST(set_shape_changes_the_projectors_copy_only) {
  xt_instr_device gw;
  XT_REQUIRE(xt_instr_guidewire(&gw, "blood", 512, NULL) == 0);
  static double p1[3 * 300], p2[3 * 500];
  arc(p1, 300, 0, 0, 0, 40, 0.2, 2.8);
  arc(p2, 500, 3, -2, 1, 30, -0.4, 2.9);
  xt_model *w = NULL, *w2 = NULL;
  XT_REQUIRE(xt_model_from_instr(&gw, p1, 300, "wire", &w, NULL) == 0);
  XT_REQUIRE(xt_model_from_instr(&gw, p2, 500, "wire", &w2, NULL) == 0);
  xt_geometry g = small_geom(-20, 10);
  const int np = g.mode.cols * g.mode.rows;
  float *f1 = malloc(sizeof(float) * np), *f2 = malloc(sizeof(float) * np), *ref = malloc(sizeof(float) * np);
  XT_REQUIRE(f1 && f2 && ref);
  xt_proj_options po = {XT_BACKEND_CPU, 2, 0};
  xt_proj *p = NULL, *q = NULL;
  XT_REQUIRE(xt_proj_create(&po, &p, NULL) == 0 && xt_proj_add_model(p, w, NULL) == 0);
  XT_REQUIRE(xt_proj_create(&po, &q, NULL) == 0 && xt_proj_add_model(q, w2, NULL) == 0);
  XT_REQUIRE(xt_proj_render(p, &g, f1, NULL) == 0);
  XT_REQUIRE(xt_proj_set_shape(p, w, p2, 500, NULL) == 0);
  XT_REQUIRE(xt_proj_render(p, &g, f2, NULL) == 0);
  XT_REQUIRE(xt_proj_render(q, &g, ref, NULL) == 0);
  XT_CHECK(memcmp(f2, ref, sizeof(float) * np) == 0);
  XT_CHECK(memcmp(f1, f2, sizeof(float) * np) != 0);
  XT_CHECK(xt_model_instr(w)->npoints == 300); /* the model as added keeps its shape */
  /* a bad shape is refused with one line, and the last good one stays */
  xt_msg msg;
  p2[3 * 200] = NAN;
  XT_CHECK(xt_proj_set_shape(p, w, p2, 500, &msg) == XT_EINVAL);
  XT_CHECK(strstr(msg.text, "point 200") && !strchr(msg.text, '\n'));
  XT_REQUIRE(xt_proj_render(p, &g, f1, NULL) == 0);
  XT_CHECK(memcmp(f1, ref, sizeof(float) * np) == 0);
  XT_CHECK(xt_proj_set_shape(p, w2, p1, 300, &msg) == XT_ENOTFOUND);
  xt_proj_destroy(p);
  xt_proj_destroy(q);
  free(f1);
  free(f2);
  free(ref);
  xt_model_free(w);
  xt_model_free(w2);
}

XT_TEST(bad_shapes_are_refused) {
  xt_instr_device dev;
  double mu;
  one_section(&dev, "nitinol", 0.2, 0.0, NULL, &mu, NULL);
  dev.max_points = 4;
  xt_model *m = NULL;
  xt_msg msg;
  const double one[] = {0, 0, 0};
  XT_CHECK(xt_model_from_instr(&dev, one, 1, "w", &m, &msg) == XT_EINVAL && !m);
  const double same[] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  XT_CHECK(xt_model_from_instr(&dev, same, 3, "w", &m, &msg) == XT_EINVAL && strstr(msg.text, "coincide"));
  const double five[] = {0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0, 0};
  XT_CHECK(xt_model_from_instr(&dev, five, 5, "w", &m, &msg) == XT_ETOOLARGE && strstr(msg.text, "max_points"));
  const double sharp[] = {0, 0, 0, 5, 0, 0, 5, 5, 0};
  XT_CHECK(xt_model_from_instr(&dev, sharp, 3, "w", &m, &msg) == XT_EINVAL && strstr(msg.text, "turns by 90.0"));
  const double shortseg[] = {0, 0, 0, 5, 0, 0, 5.05, 0.05, 0, 5.06, 0.09, 0};
  XT_CHECK(xt_model_from_instr(&dev, shortseg, 4, "w", &m, &msg) == XT_EINVAL && strstr(msg.text, "mitres"));
  /* duplicate points are skipped, not refused */
  const double dup[] = {0, 0, 0, 0, 0, 0, 5, 0, 0};
  XT_CHECK(xt_model_from_instr(&dev, dup, 3, "w", &m, &msg) == 0 && m);
  xt_model_free(m);
  xt_instr_device bad = dev;
  bad.sec[0].r_in = 0.3;
  XT_CHECK(xt_model_from_instr(&bad, dup, 3, "w", &m, &msg) == XT_EINVAL && strstr(msg.text, "section 0"));
  XT_CHECK(xt_instr_material(&bad, "unobtainium", &(int){0}, &msg) == XT_ENOTFOUND);
}

XT_TEST(sections_follow_the_arc_length) {
  /* the guidewire's 30 mm platinum tip on a 100 mm straight line: rays across at 10 and 50 mm */
  xt_instr_device gw;
  XT_REQUIRE(xt_instr_guidewire(&gw, "air", 64, NULL) == 0);
  const double pts[] = {0, 0, 0, 25, 0, 0, 100, 0, 0};
  xt_model *m = NULL;
  XT_REQUIRE(xt_model_from_instr(&gw, pts, 3, "gw", &m, NULL) == 0);
  XT_CHECK(xt_model_instr(m)->geom.nseg == 3); /* split where the coil ends, at 30 mm */
  const double air = gw.mt.mu[gw.medium];
  const double coil = (gw.mt.mu[gw.sec[0].wall] - air) * 2 * gw.sec[0].r_out;
  const double core = (gw.mt.mu[gw.sec[1].wall] - air) * 2 * gw.sec[1].r_out;
  XT_CHECK_NEAR(seg(m, xt_v3(10, 0, -9), xt_v3(10, 0, 9)), coil, 1e-13);
  XT_CHECK_NEAR(seg(m, xt_v3(29.99, 0, -9), xt_v3(29.99, 0, 9)), coil, 1e-13);
  XT_CHECK_NEAR(seg(m, xt_v3(30.01, 0, -9), xt_v3(30.01, 0, 9)), core, 1e-13);
  XT_CHECK_NEAR(seg(m, xt_v3(50, 0, -9), xt_v3(50, 0, 9)), core, 1e-13);
  /* along the axis: 30 mm of coil, 70 of core */
  XT_CHECK_NEAR(seg(m, xt_v3(-5, 0, 0), xt_v3(105, 0, 0)),
                30 * (gw.mt.mu[gw.sec[0].wall] - air) + 70 * (gw.mt.mu[gw.sec[1].wall] - air), 1e-11);
  xt_model_free(m);
}

/* The thorax's label at model point (x, y, z) (nearest voxel centre). */
static int label_at(const xt_volume *v, double x, double y, double z) {
  const double p[3] = {x, y, z};
  int ijk[3];
  for (int a = 0; a < 3; a++) {
    ijk[a] = (int)lround((p[a] - v->index_to_model.t[a]) / v->spacing[a]);
    if (ijk[a] < 0 || ijk[a] >= v->dim[a]) return -1;
  }
  return ((const uint8_t *)v->data)[ijk[0] + (size_t)v->dim[0] * (ijk[1] + (size_t)v->dim[1] * ijk[2])];
}

XT_TEST(thorax_wire_lies_in_its_aorta) {
  xt_model *t = NULL, *w = NULL;
  XT_REQUIRE(xt_phantom_thorax_model(2.0, &t, NULL) == 0);
  XT_REQUIRE(xt_phantom_thorax_wire_model(4096, &w, NULL) == 0);
  const xt_volume *v = xt_model_volume(t);
  XT_REQUIRE(v && v->materials && v->materials->count == XT_THORAX_LABELS);
  const xt_material_table *mt = v->materials;
  XT_CHECK(mt->mu[XT_THORAX_LUNG] < mt->mu[XT_THORAX_SOFT] && mt->mu[XT_THORAX_SOFT] < mt->mu[XT_THORAX_SPONGY_BONE] &&
           mt->mu[XT_THORAX_SPONGY_BONE] < mt->mu[XT_THORAX_BONE]);
  for (int l = XT_THORAX_HEART; l <= XT_THORAX_CORONARY; l++) XT_CHECK(!strcmp(mt->name[l], "blood"));
  /* every point of the wire is inside the aorta, its tip in the ascending part, below the arch */
  const xt_instr *I = xt_model_instr(w);
  XT_REQUIRE(I && I->npoints > 300);
  int outside = 0;
  for (int i = 0; i < I->npoints; i++)
    outside += label_at(v, I->points[3 * i], I->points[3 * i + 1], I->points[3 * i + 2]) != XT_THORAX_AORTA;
  XT_CHECK_MSG(outside == 0, "%d of %d wire points outside the aorta", outside, I->npoints);
  XT_CHECK(I->points[2] > 0 && I->points[2] < 55 && I->points[1] < 0); /* ascending: anterior, below the arch */
  /* anatomy where it was put */
  XT_CHECK(label_at(v, 0, 72, 8) == XT_THORAX_SPONGY_BONE); /* a vertebral body */
  XT_CHECK(label_at(v, -78, 18, 22) == XT_THORAX_LUNG);
  XT_CHECK(label_at(v, 0, 6, 120) == XT_THORAX_AIR); /* the trachea */
  XT_CHECK(label_at(v, 42, -32, -48) == XT_THORAX_HEART);
  XT_CHECK(label_at(v, 170, 10, 0) == XT_THORAX_AIR); /* beside the body */
  /* the thorax, its wire and a catheter fit the material channels together */
  xt_instr_device ct;
  xt_model *c = NULL;
  XT_REQUIRE(xt_instr_catheter(&ct, "blood", 64, NULL) == 0);
  XT_REQUIRE(xt_model_from_instr(&ct, I->points, 64, "cath", &c, NULL) == 0);
  xt_chanset cs = {0};
  xt_msg msg;
  XT_CHECK_MSG(xt_chanset_add_model(&cs, t, &msg) == 0 && xt_chanset_add_model(&cs, w, &msg) == 0 &&
                   xt_chanset_add_model(&cs, c, &msg) == 0,
               "%s", msg.text);
  XT_CHECK(cs.n <= XT_MAX_CHANNELS);
  xt_model_free(c);
  xt_model_free(t);
  xt_model_free(w);
}

static double urand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) * (1.0 / 9007199254740992.0);
}

XT_TEST(near_is_conservative) {
  /* xt_tube_near, the CUDA splat's candidate test: a ray whose end lies within e of the end of a
   * ray that meets a segment (chord > 0, both from one source) is near it - at every depth the two
   * are at most e apart. Segments of a sharply bent catheter (mitres far from square); sources
   * 500-900 mm away; e from 1 um to 0.5 mm; ends moved by up to e, half the trials by e exactly.
   * And it refuses: rays farther than r_out + e from the axis are not near. The same of its
   * factored form, xt_tube_fac_near, which the splat calls. */
  xt_instr_device dev;
  double mu, mul;
  one_section(&dev, "catheter_polymer_w", 0.8, 0.5, "iodine_contrast", &mu, &mul);
  double pts[3 * 9];
  for (int i = 0; i < 9; i++) { /* a zigzag: turns of about 55 degrees (60 at most) */
    pts[3 * i] = 3.0 * i;
    pts[3 * i + 1] = (i & 1) ? 1.6 : 0.0;
    pts[3 * i + 2] = 0.4 * i;
  }
  xt_model *m = NULL;
  XT_REQUIRE(xt_model_from_instr(&dev, pts, 9, "zigzag", &m, NULL) == 0);
  const xt_instr_geom *G = &xt_model_instr(m)->geom;
  uint64_t rs = 12345;
  int met = 0, missed = 0, refused = 0, far = 0, wrong_refusal = 0, missedf = 0, refusedf = 0, wrong_refusalf = 0;
  for (int trial = 0; trial < 200000; trial++) {
    const xt_tube_seg *t = &G->seg[(int)(urand(&rs) * G->nseg)];
    /* a point near the segment: along the axis (beyond its ends too), across it up to 1.5 r_out */
    double a[3], b[3], pt[3];
    const double along = (urand(&rs) * 1.6 - 0.3) * t->len;
    for (int k = 0; k < 3; k++) a[k] = urand(&rs) - 0.5;
    const double ad = xt_tube_dot(a, t->d);
    for (int k = 0; k < 3; k++) a[k] -= ad * t->d[k];
    const double an = sqrt(xt_tube_dot(a, a)), rad = urand(&rs) * 1.5 * t->r_out;
    for (int k = 0; k < 3; k++) pt[k] = t->p0[k] + along * t->d[k] + a[k] / an * rad;
    /* the source, and the first ray's end beyond the point */
    for (int k = 0; k < 3; k++) b[k] = urand(&rs) - 0.5;
    const double bn = sqrt(xt_tube_dot(b, b)), dist = 500.0 + 400.0 * urand(&rs), ext = 1.05 + 0.6 * urand(&rs);
    double o[3], p1[3], p2[3], dl[3];
    for (int k = 0; k < 3; k++) {
      o[k] = pt[k] + b[k] / bn * dist;
      p1[k] = o[k] + (pt[k] - o[k]) * ext;
      dl[k] = urand(&rs) - 0.5;
    }
    const double e = pow(10.0, -3.0 + 2.7 * urand(&rs)), dn = sqrt(xt_tube_dot(dl, dl));
    const double move = trial & 1 ? e : e * urand(&rs);
    for (int k = 0; k < 3; k++) p2[k] = p1[k] + dl[k] / dn * move;
    double w1[3], w2[3], l1 = 0, l2 = 0;
    for (int k = 0; k < 3; k++) l1 += (p1[k] - o[k]) * (p1[k] - o[k]), l2 += (p2[k] - o[k]) * (p2[k] - o[k]);
    l1 = sqrt(l1);
    l2 = sqrt(l2);
    for (int k = 0; k < 3; k++) w1[k] = (p1[k] - o[k]) / l1, w2[k] = (p2[k] - o[k]) / l2;
    double co, ci;
    xt_tube_chords(t, o, w1, l1, &co, &ci);
    const int near = xt_tube_near(t, o, w2, l2, e);
    /* the factored form the splat uses: the ray o + s D, s in [0, 1], D = p2 - o */
    xt_tube_pre P;
    xt_tube_fam F;
    memset(&F, 0, sizeof F);
    const double D2[3] = {p2[0] - o[0], p2[1] - o[1], p2[2] - o[2]};
    xt_tube_prep(t, o, &P);
    xt_tube_lin_of(&P, t, D2, &F.l0);
    const int nearf = xt_tube_fac_near(&P, &F, 0.0, 0.0, e);
    if (co > 0.0) {
      met++;
      if (!near) missed++;
      if (!nearf) missedf++;
    }
    refused += !near;
    refusedf += !nearf;
    /* the second ray's closest approach to the axis line, farther than r_out + e: never near */
    double q[3], cr[3];
    for (int k = 0; k < 3; k++) q[k] = o[k] - t->p0[k];
    cr[0] = w2[1] * t->d[2] - w2[2] * t->d[1];
    cr[1] = w2[2] * t->d[0] - w2[0] * t->d[2];
    cr[2] = w2[0] * t->d[1] - w2[1] * t->d[0];
    const double cn = sqrt(xt_tube_dot(cr, cr));
    if (cn > 1e-3 && fabs(xt_tube_dot(q, cr)) / cn > 1.001 * (t->r_out + e) + 1e-9) {
      far++;
      wrong_refusal += near;
      wrong_refusalf += nearf;
    }
  }
  XT_CHECK_MSG(missed == 0, "%d of %d rays that meet a segment had a neighbour within e refused", missed, met);
  XT_CHECK_MSG(wrong_refusal == 0, "%d of %d rays farther than r_out + e from the axis found near", wrong_refusal,
               far);
  XT_CHECK_MSG(missedf == 0, "factored: %d of %d rays that meet a segment had a neighbour within e refused", missedf,
               met);
  XT_CHECK_MSG(wrong_refusalf == 0, "factored: %d of %d rays farther than r_out + e from the axis found near",
               wrong_refusalf, far);
  XT_CHECK(met > 20000 && refused > 20000 && far > 10000 && refusedf > 20000);
  xt_model_free(m);
}

/* ---- The factored closed form (xt_tube_prep / _lin_of / _fac_chords) against xt_tube_chords ----
 *
 * The oracle is the closed form evaluated in long double (64-bit mantissa) from the same inputs,
 * fac_oracle; both double evaluations, xt_tube_chords and the factored one, must lie within the bar
 * below of it. The bar: each double form carries the rounding of the source's position (~1 m from
 * the segment) in the ray's position at the segment, delta = 16 ulps of the coordinates' scale (the
 * sum of |o| and |p0| over the axes and the segment's size: ~1e-11 mm for a source 1 m away and
 * segments within 0.1 m of the origin). A chord end that a displacement by delta moves by D moves
 * the chord by D: a cylinder end by the half-chord's change with r^2 - e^2 moved by 2 r delta plus
 * delta / |w_perp| along the ray (near tangency the half-chord is a square root: sqrt(4 r delta) ~
 * 3e-6 mm at exact tangency to a 0.18 mm wire, which no double evaluation can resolve), a mitre end
 * by delta / |w.n|. The bar sums the displacements of the ends that bound the chord (or could,
 * within their displacement), plus 1e-9 r_out (~1e4 times the rounding of a well-conditioned chord)
 * and 1e-12 of the chord. Away from tangency and from rays running in a mitre plane this is 1e-9
 * r_out + 1e-12 c, far below what a wrong term makes. */
typedef struct fac_end {
  long double s, dev; /* a candidate end of the chord and how far rounding-sized displacements move it */
} fac_end;

static double fac_oracle(const xt_tube_seg *t, double r, const double od[3], const double wd[3], double len,
                         double delta, double *bar) {
  long double o[3], w[3], d[3], n0[3], n1[3], q[3];
  for (int k = 0; k < 3; k++) {
    o[k] = od[k], w[k] = wd[k], d[k] = t->d[k], n0[k] = t->n0[k], n1[k] = t->n1[k];
    q[k] = o[k] - (long double)t->p0[k];
  }
  long double lo = 0.0L, hi = len;
  fac_end e[4];
  int ne = 0;
  const long double a0 = q[0] * n0[0] + q[1] * n0[1] + q[2] * n0[2], b0 = w[0] * n0[0] + w[1] * n0[1] + w[2] * n0[2];
  const long double p1[3] = {t->p0[0] + t->len * d[0], t->p0[1] + t->len * d[1], t->p0[2] + t->len * d[2]};
  const long double a1 = (o[0] - p1[0]) * n1[0] + (o[1] - p1[1]) * n1[1] + (o[2] - p1[2]) * n1[2];
  const long double b1 = w[0] * n1[0] + w[1] * n1[1] + w[2] * n1[2];
  int empty = 0;
  if (b0 != 0.0L) {
    const long double s = -a0 / b0;
    if (b0 > 0 && s > lo) lo = s;
    if (b0 < 0 && s < hi) hi = s;
    e[ne++] = (fac_end){s, delta / fabsl(b0)};
  } else if (a0 < 0)
    empty = 1;
  if (b1 != 0.0L) {
    const long double s = -a1 / b1;
    if (b1 > 0 && s < hi) hi = s;
    if (b1 < 0 && s > lo) lo = s;
    e[ne++] = (fac_end){s, delta / fabsl(b1)};
  } else if (a1 > 0)
    empty = 1;
  const long double qd = q[0] * d[0] + q[1] * d[1] + q[2] * d[2], wdd = w[0] * d[0] + w[1] * d[1] + w[2] * d[2];
  long double qp[3], wp[3];
  for (int k = 0; k < 3; k++) qp[k] = q[k] - qd * d[k], wp[k] = w[k] - wdd * d[k];
  const long double A = wp[0] * wp[0] + wp[1] * wp[1] + wp[2] * wp[2];
  long double c = 0.0L;
  if (A > 0.0L) {
    const long double sm = -(qp[0] * wp[0] + qp[1] * wp[1] + qp[2] * wp[2]) / A, ww = sqrtl(A);
    long double ee = 0.0L;
    for (int k = 0; k < 3; k++) ee += (qp[k] + sm * wp[k]) * (qp[k] + sm * wp[k]);
    const long double h2 = (long double)r * r - ee, dh = 2.0L * r * delta + (long double)delta * delta;
    const long double half = h2 > 0 ? sqrtl(h2) / ww : 0.0L;
    const long double hup = sqrtl(fmaxl(h2 + dh, 0.0L)) / ww, hdn = sqrtl(fmaxl(h2 - dh, 0.0L)) / ww;
    const long double dev = (hup - hdn) + delta / ww;
    e[ne++] = (fac_end){sm - half, dev};
    e[ne++] = (fac_end){sm + half, dev};
    if (h2 > 0) {
      const long double s0 = fmaxl(sm - half, lo), s1 = fminl(sm + half, hi);
      c = s1 > s0 ? s1 - s0 : 0.0L;
    }
  } else if (qp[0] * qp[0] + qp[1] * qp[1] + qp[2] * qp[2] <= (long double)r * r)
    c = hi > lo ? hi - lo : 0.0L;
  if (empty) c = 0.0L;
  /* the ends that bound the chord, or could within their own displacement */
  const long double L = fminl(lo, hi), R = fmaxl(lo, hi);
  long double b = 1e-9L * t->r_out + 1e-12L * c;
  for (int i = 0; i < ne; i++)
    if (e[i].s >= L - e[i].dev && e[i].s <= R + e[i].dev) b += e[i].dev;
  *bar = (double)b;
  return (double)c;
}

static void unit3(uint64_t *rs, double v[3]) {
  double n;
  do {
    for (int k = 0; k < 3; k++) v[k] = 2.0 * urand(rs) - 1.0;
    n = xt_tube_dot(v, v);
  } while (n < 1e-4 || n > 1.0);
  n = sqrt(n);
  for (int k = 0; k < 3; k++) v[k] /= n;
}

/* v less its part along the unit n, normalised */
static void across(double v[3], const double n[3]) {
  const double a = xt_tube_dot(v, n);
  for (int k = 0; k < 3; k++) v[k] -= a * n[k];
  const double m = sqrt(xt_tube_dot(v, v));
  for (int k = 0; k < 3; k++) v[k] /= m;
}

XT_TEST(factored_chords_match_the_closed_form) {
  /* 200,000 rays, each through its own random segment (axis, length 0.05-3 mm, mitres tilted up to
   * 60 degrees, r_out 1 um - 1.5 mm log-uniform: most far below fd20's 0.15 mm pixel; half of them
   * catheters) from a source 500-1500 mm away, as the CUDA splat forms them: D = D0 + x U + y V
   * with x, y sub-pixel centres up to 1024 and U, V a pixel's pitch at the source's distance; one
   * segment in eight along a coordinate axis with square mitres, where directions across the axis
   * or in a mitre plane are exact (the degenerate branches). Kinds of ray: generic (aimed within
   * 1.5 r_out of the axis, beyond the ends too), tangent to the outer or the inner radius, grazing
   * (1e-4 ... 1e-12 r off it, either side), along the axis (exactly, or tilted 1e-9 ... 1e-3),
   * parallel to a mitre plane (0.02 - 0.4 len off it, either side), and thin radii. The halves'
   * test, xt_tube_fac_near, on the same rays: as xt_tube_near, and near wherever a chord is. */
  uint64_t rs = 0x26f;
  int n = 0, hits = 0, slow_dirs = 0, fails = 0, fails_ref = 0, kinds_hit[8] = {0};
  double worst = 0.0, worst_reg = 0.0, wbar = 0.0;
  int nwell = 0, wkind = -1, near_diff = 0, near_missed = 0, near_refused = 0;
  int maybe_missed = 0, maybe_refused = 0, maybe_loose = 0, cyl_pass = 0;
  double ratio = 0.0;
  for (int trial = 0; trial < 200000; trial++) {
    const int kind = trial % 8, aligned = (trial / 8) % 8 == 0;
    xt_tube_seg t;
    memset(&t, 0, sizeof t);
    double tilt[3];
    if (aligned) {
      const int ax = (trial / 64) % 3;
      t.d[ax] = (trial / 192) % 2 ? 1.0 : -1.0;
      memcpy(t.n0, t.d, sizeof t.d);
      memcpy(t.n1, t.d, sizeof t.d);
    } else {
      unit3(&rs, t.d);
      for (int m = 0; m < 2; m++) { /* n.d >= cos 60 */
        unit3(&rs, tilt);
        across(tilt, t.d);
        const double a = tan(urand(&rs) * 1.0471975);
        double *nn = m ? t.n1 : t.n0;
        for (int k = 0; k < 3; k++) nn[k] = t.d[k] + a * tilt[k];
        const double l = sqrt(xt_tube_dot(nn, nn));
        for (int k = 0; k < 3; k++) nn[k] /= l;
      }
    }
    for (int k = 0; k < 3; k++) t.p0[k] = 200.0 * (urand(&rs) - 0.5);
    t.len = 0.05 + 2.95 * urand(&rs);
    t.r_out = kind == 7 ? 1e-3 * pow(10.0, urand(&rs)) : 1e-3 * pow(1500.0, urand(&rs));
    t.r_in = trial & 1 ? t.r_out * (0.3 + 0.6 * urand(&rs)) : 0.0;
    /* the point the ray passes (pt) and its direction (dir) */
    double pt[3], dir[3], rad[3];
    unit3(&rs, rad);
    across(rad, t.d);
    double along = (urand(&rs) * 1.6 - 0.3) * t.len, rho = urand(&rs) * 1.5 * t.r_out;
    unit3(&rs, dir);
    if (kind == 3 || kind == 4) { /* tangent or grazing: at radius r, the direction across the radius */
      const double r = (trial / 8) % 3 == 0 && t.r_in > 0 ? t.r_in : t.r_out;
      rho = kind == 3 ? r : r * (1.0 + ((trial / 16) % 2 ? 1 : -1) * pow(10.0, -4.0 - 8.0 * urand(&rs)));
      along = (0.1 + 0.8 * urand(&rs)) * t.len;
      across(dir, rad);
    } else if (kind == 5) { /* along the axis, or nearly */
      rho = t.r_out * ((trial / 8) % 2 ? 0.2 + 0.7 * urand(&rs) : 1.1 + urand(&rs));
      const double a = (trial / 16) % 2 ? 0.0 : pow(10.0, -9.0 + 6.0 * urand(&rs));
      unit3(&rs, tilt);
      across(tilt, t.d);
      for (int k = 0; k < 3; k++) dir[k] = t.d[k] + a * tilt[k];
    } else if (kind == 6) { /* parallel to a mitre plane, off it by sigma */
      const int m = (trial / 8) % 2;
      const double *nn = m ? t.n1 : t.n0, sg = ((trial / 16) % 2 ? 1 : -1) * (0.02 + 0.38 * urand(&rs)) * t.len;
      across(dir, nn);
      double w2[3];
      unit3(&rs, w2);
      across(w2, nn);
      const double r = urand(&rs) * 1.2 * t.r_out;
      for (int k = 0; k < 3; k++) pt[k] = t.p0[k] + (m ? t.len * t.d[k] : 0.0) + sg * nn[k] + r * w2[k];
    }
    if (kind != 6)
      for (int k = 0; k < 3; k++) pt[k] = t.p0[k] + along * t.d[k] + rho * rad[k];
    const double dist = 500.0 + 1000.0 * urand(&rs), ext = 1.05 + 0.5 * urand(&rs);
    double o[3], D[3];
    for (int k = 0; k < 3; k++) {
      o[k] = pt[k] - dist * dir[k];
      D[k] = dist * ext * dir[k];
    }
    if (aligned && (kind == 5 || kind == 6)) /* exact zeros: the source moved so that D stays exact */
      for (int k = 0; k < 3; k++) o[k] = pt[k] - D[k] / ext;
    /* D = D0 + x U + y V, as the splat's sub-rays (x = y = 0 where D's zeros must stay exact) */
    double U[3], V[3], x = 0.0, y = 0.0;
    unit3(&rs, U);
    unit3(&rs, V);
    const double pitch = 1.25e-4 * sqrt(xt_tube_dot(D, D));
    if (!(aligned && (kind == 5 || kind == 6))) {
      x = floor(1024 * urand(&rs)) + (floor(8 * urand(&rs)) + 0.5) / 8 - 0.5;
      y = floor(1024 * urand(&rs)) + (floor(8 * urand(&rs)) + 0.5) / 8 - 0.5;
    }
    double D0[3], Dr[3];
    for (int k = 0; k < 3; k++) {
      U[k] *= pitch;
      V[k] *= pitch;
      D0[k] = D[k] - x * U[k] - y * V[k];
      Dr[k] = D0[k] + x * U[k] + y * V[k];
    }
    /* the world length: the model frame stretched by 0.8 - 1.25 */
    const double dl = sqrt(xt_tube_dot(Dr, Dr)) * (0.8 + 0.45 * urand(&rs));
    const double w[3] = {Dr[0] / dl, Dr[1] / dl, Dr[2] / dl};
    xt_tube_pre p;
    xt_tube_fam f = {.q = {dl * dl, 0, 0, 0, 0, 0}};
    xt_tube_prep(&t, o, &p);
    xt_tube_lin_of(&p, &t, D0, &f.l0);
    xt_tube_lin_of(&p, &t, U, &f.lu);
    xt_tube_lin_of(&p, &t, V, &f.lv);
    const xt_tube_lin l = xt_tube_lin_at(&f.l0, &f.lu, &f.lv, x, y);
    slow_dirs += l.b0 == 0.0 || l.b1 == 0.0 || (l.p1 == 0.0 && l.p2 == 0.0);
    double fo, fi, ro, ri;
    xt_tube_fac_chords(&p, &f, x, y, &fo, &fi);
    xt_tube_chords(&t, o, w, dl, &ro, &ri);
    /* the halves' test on the same ray, with e = 1 um: as xt_tube_near, and near wherever a chord is */
    const int nf = xt_tube_fac_near(&p, &f, x, y, 1e-3), nr = xt_tube_near(&t, o, w, dl, 1e-3);
    near_diff += nf != nr;
    near_missed += (ro > 0.0 || fo > 0.0) && !nf;
    near_refused += !nf;
    /* the compact splat's pre-test, with the slack for the footprint this ray's (x, y) lies in */
    xt_tube_maybe mbc;
    xt_tube_fac_maybe_prep(&p, &f, fabs(x) + 4.0, fabs(y) + 1.0, x + 3.0, y, &mbc); /* a centre 3 pixels off */
    const int mb = xt_tube_fac_maybe(&p, &f, &mbc, x, y);
    maybe_missed += (fo > 0.0 || fi > 0.0) && !mb;
    maybe_refused += !mb;
    maybe_loose += mb && !(fo > 0.0) && !(ro > 0.0); /* passed, no chord */
    cyl_pass += mb || xt_tube_fac_maybe(&p, &f, &(xt_tube_maybe){mbc.kappa, 1e300, 0.0, 1e300, 1e300, 1e300}, x, y);
    double G = t.len + t.r_out;
    for (int k = 0; k < 3; k++) G += fabs(o[k]) + fabs(t.p0[k]);
    const double delta = 16.0 * DBL_EPSILON * G;
    for (int rr = 0; rr < 1 + (t.r_in > 0.0); rr++) {
      double bar;
      const double want = fac_oracle(&t, rr ? t.r_in : t.r_out, o, w, dl, delta, &bar);
      const double got = rr ? fi : fo, ref = rr ? ri : ro;
      if (rr && !(ro > 0.0)) continue; /* the lumen is asked only inside the outer tube */
      n++;
      hits += want > 0.0;
      kinds_hit[kind] += want > 0.0;
      const double dev = fabs(got - want);
      if (!(dev <= bar)) {
        if (fails++ < 5)
          XT_CHECK_MSG(0, "ray %d (kind %d%s, r %s %.3g): factored %.17g, oracle %.17g, bar %.3g", trial, kind,
                       aligned ? ", axis-aligned" : "", rr ? "in" : "out", rr ? t.r_in : t.r_out, got, want, bar);
      }
      if (!(fabs(ref - want) <= bar)) fails_ref++;
      /* well conditioned: the ends' displacements below 1e-10 r_out */
      const int wc = bar - (1e-9 * t.r_out + 1e-12 * want) <= 1e-10 * t.r_out;
      nwell += wc;
      if (wc && dev / t.r_out > worst_reg) worst_reg = dev / t.r_out;
      if (dev / t.r_out > worst) worst = dev / t.r_out, wkind = kind, wbar = bar / t.r_out;
      if (dev / bar > ratio) ratio = dev / bar;
    }
  }
  printf("factored chords: %d chords (%d non-zero), %d exactly degenerate directions; |factored - oracle| / r_out "
         "at most %.3g on the %d well-conditioned ones (%.3g anywhere: kind %d, its bar %.3g r_out); %d outside the bar "
         "(xt_tube_chords: %d); at most %.3g of the bar\n", n, hits, slow_dirs, worst_reg, nwell, worst, wkind, wbar, fails, fails_ref, ratio);
  XT_CHECK_MSG(fails == 0, "%d chords outside the bar", fails);
  XT_CHECK_MSG(fails_ref == 0, "the oracle itself: %d of xt_tube_chords' chords outside the bar", fails_ref);
  XT_CHECK(n >= 200000 && hits > 50000 && slow_dirs > 1000);
  XT_CHECK_MSG(near_diff == 0 && near_missed == 0, "xt_tube_fac_near: %d rays judged unlike xt_tube_near, %d with a "
               "chord refused", near_diff, near_missed);
  XT_CHECK(near_refused > 20000);
  printf("xt_tube_fac_maybe: %d rays refused, %d with a chord (must be 0), %d passed without one; %d passed the "
         "cylinder alone\n", maybe_refused, maybe_missed, maybe_loose, cyl_pass);
  XT_CHECK_MSG(maybe_missed == 0, "xt_tube_fac_maybe: %d rays with a chord refused", maybe_missed);
  XT_CHECK(maybe_refused > 20000);
  for (int k = 0; k < 8; k++) XT_CHECK_MSG(kinds_hit[k] > 1000, "kind %d: %d non-zero chords", k, kinds_hit[k]);
}

/* The CUDA splat's runs (xt_tube.h): every segment in one run, in order, of one material; each run's
 * bounding segment near every ray that meets one of its segments (xt_tube_fac_near, as the splat
 * asks it), and its pick (xt_tube_fac_span, xt_tube_run_pick) keeps every segment whose chord is
 * non-zero, by the factored closed form the splat sums or by xt_tube_chords. Shapes: a guidewire
 * (coil tip, then core) and a catheter (hollow), centrelines of 0.05 - 0.6 mm steps bending
 * smoothly and kinking by up to 50 degrees, with straight stretches; rays from sources 500 - 1500
 * mm away through points near a segment (beyond its ends too), tangent to its tube at a joint's
 * ellipse, or along its axis. The pick's size is reported and bounded: on rays that meet the wire it
 * keeps two or three segments on average, where a run has sixteen. */
XT_TEST(runs_pick_every_segment_a_ray_meets) {
  uint64_t rs = 0x7e1;
  long rays = 0, met = 0, missed = 0, near_missed = 0, picked = 0, axial = 0, met_across = 0, picked_across = 0;
  int runs_total = 0, bad_runs = 0;
  for (int shape = 0; shape < 24; shape++) {
    xt_instr_device dev;
    const int cath = shape % 2, np = 600;
    XT_REQUIRE((cath ? xt_instr_catheter(&dev, "blood", np, NULL) : xt_instr_guidewire(&dev, "air", np, NULL)) == 0);
    double pts[3 * 600], dir[3] = {1, 0, 0}, tilt[3], rmax = 0.0;
    for (int i = 0; i < dev.nsections; i++) rmax = dev.sec[i].r_out > rmax ? dev.sec[i].r_out : rmax;
    const double step = 0.05 + 0.55 * urand(&rs) * urand(&rs);
    /* a joint's mitre takes r tan(bend / 2) of each segment beside it: turns within what the step allows */
    const double turn = 2.0 * atan(0.02 * step / rmax), kink = fmin(0.87, 2.0 * atan(0.4 * step / rmax));
    for (int k = 0; k < 3; k++) pts[k] = 100.0 * (urand(&rs) - 0.5);
    for (int i = 1; i < np; i++) {
      /* turn by a small angle, now and then by a kink, never on a straight stretch */
      const int straight = (i / 50) % 3 == 1;
      double ang = straight ? 0.0 : turn * (0.2 + 0.8 * urand(&rs));
      if (!straight && i % 37 == 0) ang = kink * urand(&rs);
      unit3(&rs, tilt);
      across(tilt, dir);
      for (int k = 0; k < 3; k++) dir[k] = cos(ang) * dir[k] + sin(ang) * tilt[k];
      const double l = sqrt(xt_tube_dot(dir, dir));
      for (int k = 0; k < 3; k++) dir[k] /= l, pts[3 * i + k] = pts[3 * (i - 1) + k] + step * dir[k];
    }
    xt_model *m = NULL;
    xt_msg msg;
    XT_REQUIRE_MSG(xt_model_from_instr(&dev, pts, np, "w", &m, &msg) == 0, "%s", msg.text);
    const xt_instr_geom *g = &xt_model_instr(m)->geom;
    const int cap = xt_tube_runs_cap(g->nseg, dev.nsections);
    xt_tube_run *run = malloc(sizeof *run * (size_t)cap);
    XT_REQUIRE(run);
    const int nr = xt_tube_runs(g->seg, g->nseg, run, cap);
    XT_REQUIRE_MSG(nr > 0, "shape %d: %d segments, cap %d", shape, g->nseg, cap);
    runs_total += nr;
    int next = 0;
    for (int r = 0; r < nr; r++) {
      const xt_tube_run *R = &run[r];
      bad_runs += R->first != next || R->n < 1 || R->n > XT_TUBE_RUN;
      for (int j = 0; j < R->n; j++) {
        const xt_tube_seg *t = &g->seg[R->first + j];
        bad_runs += t->wall != R->v.wall || t->lumen != R->v.lumen || !(R->tlo[j] <= R->thi[j]);
        for (int q = 0; q <= 8; q++) { /* the bins of positions across its extent hold it */
          const double tq = R->tlo[j] + (R->thi[j] - R->tlo[j]) * q / 8.0, b = fmin(fmax(tq * R->ib, 0.0), XT_TUBE_RUN_BINS - 1);
          bad_runs += !(R->bin[(int)b] >> j & 1);
        }
      }
      next = R->first + R->n;
    }
    bad_runs += next != g->nseg;
    for (int trial = 0; trial < 4000; trial++) {
      const int kind = trial % 4, si = (int)(urand(&rs) * g->nseg);
      const xt_tube_seg *t = &g->seg[si];
      double pt[3], rad[3], w[3];
      unit3(&rs, rad);
      across(rad, t->d);
      unit3(&rs, w);
      if (kind == 0) { /* through a point near the segment, beyond its ends too */
        const double along = (urand(&rs) * 1.6 - 0.3) * t->len, rho = urand(&rs) * 1.3 * t->r_out;
        for (int k = 0; k < 3; k++) pt[k] = t->p0[k] + along * t->d[k] + rho * rad[k];
      } else if (kind == 1 || kind == 2) { /* tangent to the tube at a joint's ellipse, or at its middle */
        const double *nn = kind == 1 ? t->n1 : t->n0, at = kind == 1 ? t->len : 0.0;
        double u[3];
        for (int k = 0; k < 3; k++) u[k] = rad[k];
        const double lam = -xt_tube_dot(u, nn) / xt_tube_dot(t->d, nn) * t->r_out;
        for (int k = 0; k < 3; k++) pt[k] = t->p0[k] + at * t->d[k] + t->r_out * u[k] + lam * t->d[k];
        across(w, rad); /* across the radius: tangent to the cylinder */
      } else { /* along the axis, nearly */
        for (int k = 0; k < 3; k++) pt[k] = t->p0[k] + 0.5 * t->len * t->d[k] + 0.5 * t->r_out * rad[k];
        for (int k = 0; k < 3; k++) w[k] = t->d[k] + 1e-6 * urand(&rs) * rad[k];
      }
      const double dist = 500.0 + 1000.0 * urand(&rs);
      double o[3], D[3], U[3], V[3], D0[3];
      for (int k = 0; k < 3; k++) o[k] = pt[k] - dist * w[k], D[k] = 1.2 * dist * w[k];
      unit3(&rs, U);
      unit3(&rs, V);
      const double pitch = 1.25e-4 * sqrt(xt_tube_dot(D, D));
      const double x = floor(1024 * urand(&rs)) + (floor(8 * urand(&rs)) + 0.5) / 8 - 0.5;
      const double y = floor(1024 * urand(&rs)) + (floor(8 * urand(&rs)) + 0.5) / 8 - 0.5;
      for (int k = 0; k < 3; k++) U[k] *= pitch, V[k] *= pitch, D0[k] = D[k] - x * U[k] - y * V[k];
      double Dr[3];
      for (int k = 0; k < 3; k++) Dr[k] = D0[k] + x * U[k] + y * V[k];
      const double dl = sqrt(xt_tube_dot(Dr, Dr)), wu[3] = {Dr[0] / dl, Dr[1] / dl, Dr[2] / dl};
      /* every run the ray's segment is in, and its neighbours' */
      int r = 0;
      while (r + 1 < nr && run[r + 1].first <= si) r++;
      for (int rr = (r > 0 ? r - 1 : 0); rr <= r + 1 && rr < nr; rr++) {
        const xt_tube_run *R = &run[rr];
        xt_tube_pre vp;
        xt_tube_fam vf = {.q = {dl * dl, 0, 0, 0, 0, 0}};
        xt_tube_prep(&R->v, o, &vp);
        xt_tube_lin_of(&vp, &R->v, D0, &vf.l0);
        xt_tube_lin_of(&vp, &R->v, U, &vf.lu);
        xt_tube_lin_of(&vp, &R->v, V, &vf.lv);
        xt_tube_maybe mb;
        xt_tube_fac_maybe_prep(&vp, &vf, fabs(x) + 4.0, fabs(y) + 1.0, x + 3.0, y, &mb);
        double t0 = 0.0, t1 = 0.0;
        const unsigned bits = xt_tube_fac_span(&vp, &vf, &mb, x, y, &t0, &t1) ? xt_tube_run_pick(R->bin, R->ib, R->tlo, R->thi, R->n, t0, t1) : 0u;
        const int nr_near = xt_tube_fac_near(&vp, &vf, x, y, 1e-3);
        int any = 0;
        for (int j = 0; j < R->n; j++) {
          const xt_tube_seg *s = &g->seg[R->first + j];
          xt_tube_pre sp;
          xt_tube_fam sf = vf;
          xt_tube_prep(s, o, &sp);
          xt_tube_lin_of(&sp, s, D0, &sf.l0);
          xt_tube_lin_of(&sp, s, U, &sf.lu);
          xt_tube_lin_of(&sp, s, V, &sf.lv);
          double fo, fi, ro, ri;
          xt_tube_fac_chords(&sp, &sf, x, y, &fo, &fi);
          xt_tube_chords(s, o, wu, dl, &ro, &ri);
          const int hit = fo > 0.0 || fi > 0.0 || ro > 0.0 || ri > 0.0;
          any |= hit;
          if (hit && !(bits >> j & 1) && missed++ < 5)
            XT_CHECK_MSG(0, "shape %d ray %d (kind %d): run %d's segment %d has a chord %.3g / %.3g, not picked", shape,
                         trial, kind, rr, j, fo, ro);
        }
        rays++;
        if (any) {
          met++;
          picked += __builtin_popcount(bits);
          axial += kind == 3;
          if (fabs(xt_tube_dot(wu, t->d)) < 0.5) /* within 30 degrees of across the wire, as a C-arm sees a wire */
            met_across++, picked_across += __builtin_popcount(bits);
          near_missed += !nr_near;
        }
      }
    }
    free(run);
    xt_model_free(m);
  }
  const double mean = met ? (double)picked / met : 0.0, mean_across = met_across ? (double)picked_across / met_across : 0.0;
  printf("runs: %d runs; %ld ray-run pairs, %ld meeting a segment: %ld unpicked segments with a chord (must be 0), "
         "%ld bounding segments not near (must be 0); %.2f segments picked a meeting pair, %.2f of the %ld within 30 "
         "degrees of across the wire\n", runs_total, rays, met, missed, near_missed, mean, mean_across, met_across);
  XT_CHECK_MSG(bad_runs == 0, "%d runs laid out wrong", bad_runs);
  XT_CHECK_MSG(missed == 0 && near_missed == 0, "%ld segments missed, %ld bounding segments not near", missed,
               near_missed);
  XT_CHECK(met > 20000 && axial > 1000);
  XT_CHECK_MSG(mean_across < 4.0, "the pick keeps %.2f segments a ray across the wire", mean_across);
}

XT_TEST_MAIN(XT_ENTRY(thorax_wire_lies_in_its_aorta) XT_ENTRY(straight_segment_closed_form) XT_ENTRY(catheter_wall_and_lumen)
                 XT_ENTRY(bend_closed_form_and_volume) XT_ENTRY(tangent_grazing_and_axial_rays)
                     XT_ENTRY(thinner_than_a_voxel_and_a_pixel_per_ray) XT_ENTRY(thinner_than_a_pixel_area_integral)
                         XT_ENTRY(scene_is_the_sum_of_its_parts) XT_ENTRY(set_shape_changes_the_projectors_copy_only)
                             XT_ENTRY(bad_shapes_are_refused) XT_ENTRY(sections_follow_the_arc_length)
                                 XT_ENTRY(near_is_conservative) XT_ENTRY(factored_chords_match_the_closed_form)
                                     XT_ENTRY(runs_pick_every_segment_a_ray_meets))
