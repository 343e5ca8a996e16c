/* The built-in patient (issue 26, point 4): an anatomical thorax as a label volume, generated at
 * start, and a guidewire in its aorta. Shapes are painted in order into 1.25 mm voxels (a later
 * shape wins), each over its own bounding box only; every shape is a closed form (ellipsoids,
 * elliptic cylinders, capsules along polylines, rib bands on the body's ellipse), so the volume is
 * the same on every machine. Dimensions are adult averages rounded to the millimetre [U]: they are
 * meant to look like a chest on fluoroscopy, not to be any patient. Model frame = patient LPS, the
 * isocentre at the heart. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xt_basis.h"
#include "xt_instr.h"
#include "xt_phantom.h"

/* Blood in five labels, one per region contrast may fill on its own (issue 26, point 2): the heart's
 * chambers, the aorta and its branches, the pulmonary arteries, the venae cavae, the coronaries. */
enum {
  T_AIR = XT_THORAX_AIR,
  T_SOFT = XT_THORAX_SOFT,
  T_LUNG = XT_THORAX_LUNG,
  T_SPONGY = XT_THORAX_SPONGY_BONE,
  T_BONE = XT_THORAX_BONE,
  T_HEART = XT_THORAX_HEART,
  T_AORTA = XT_THORAX_AORTA,
  T_PULMONARY = XT_THORAX_PULMONARY,
  T_VEINS = XT_THORAX_VEINS,
  T_CORONARY = XT_THORAX_CORONARY,
  T_NLABELS = XT_THORAX_LABELS
};
static const char *const t_names[T_NLABELS] = {"air_as_tissue", "soft_tissue", "lung",  "trabecular_bone", "bone",
                                               "blood", "blood",       "blood", "blood",           "blood"};

typedef struct painter {
  xt_volume *v;
  uint8_t *d;
  double lo[3], sp; /* the centre of voxel 0 and the voxel size */
} painter;

/* The voxel index range [i0, i1] whose centres lie in [a, b] along axis k. */
static void range(const painter *P, int k, double a, double b, int *i0, int *i1) {
  *i0 = (int)ceil((a - P->lo[k]) / P->sp);
  *i1 = (int)floor((b - P->lo[k]) / P->sp);
  if (*i0 < 0) *i0 = 0;
  if (*i1 > P->v->dim[k] - 1) *i1 = P->v->dim[k] - 1;
}

typedef int (*inside_fn)(const double x[3], const void *arg);

/* Paints `label` wherever fn says, within the box [a, b]. */
static void paint(painter *P, const double a[3], const double b[3], inside_fn fn, const void *arg, int label) {
  int r[3][2];
  for (int k = 0; k < 3; k++) range(P, k, a[k], b[k], &r[k][0], &r[k][1]);
  const int nx = P->v->dim[0], ny = P->v->dim[1];
  for (int kz = r[2][0]; kz <= r[2][1]; kz++)
    for (int jy = r[1][0]; jy <= r[1][1]; jy++)
      for (int ix = r[0][0]; ix <= r[0][1]; ix++) {
        const double x[3] = {P->lo[0] + ix * P->sp, P->lo[1] + jy * P->sp, P->lo[2] + kz * P->sp};
        if (fn(x, arg)) P->d[ix + (size_t)nx * (jy + (size_t)ny * kz)] = (uint8_t)label;
      }
}

/* --- shapes ---------------------------------------------------------------------------------- */

typedef struct ell {
  double c[3], s[3], cz, sz; /* centre, semi-axes, rotation about z (cos, sin) */
} ell;

static int in_ell(const double x[3], const void *arg) {
  const ell *e = arg;
  const double dx = x[0] - e->c[0], dy = x[1] - e->c[1], dz = x[2] - e->c[2];
  const double u = e->cz * dx + e->sz * dy, v = -e->sz * dx + e->cz * dy;
  return (u / e->s[0]) * (u / e->s[0]) + (v / e->s[1]) * (v / e->s[1]) + (dz / e->s[2]) * (dz / e->s[2]) <= 1.0;
}

static void paint_ell(painter *P, double cx, double cy, double cz, double a, double b, double c, double rot_deg,
                      int label) {
  const double t = rot_deg * XT_PI / 180.0;
  const ell e = {{cx, cy, cz}, {a, b, c}, cos(t), sin(t)};
  const double m = fmax(a, b);
  const double lo[3] = {cx - m, cy - m, cz - c}, hi[3] = {cx + m, cy + m, cz + c};
  paint(P, lo, hi, in_ell, &e, label);
}

/* An elliptic cylinder along z: (x - cx)^2 / a^2 + (y - cy)^2 / b^2 <= 1, z in [z0, z1]. */
typedef struct ecyl {
  double cx, cy, a, b;
} ecyl;

static int in_ecyl(const double x[3], const void *arg) {
  const ecyl *e = arg;
  const double u = (x[0] - e->cx) / e->a, v = (x[1] - e->cy) / e->b;
  return u * u + v * v <= 1.0;
}

static void paint_ecyl(painter *P, double cx, double cy, double a, double b, double z0, double z1, int label) {
  const ecyl e = {cx, cy, a, b};
  const double lo[3] = {cx - a, cy - b, z0}, hi[3] = {cx + a, cy + b, z1};
  paint(P, lo, hi, in_ecyl, &e, label);
}

typedef struct capsule {
  double a[3], b[3], r;
} capsule;

static int in_capsule(const double x[3], const void *arg) {
  const capsule *c = arg;
  double ab[3], ax[3], t = 0, n = 0;
  for (int k = 0; k < 3; k++) {
    ab[k] = c->b[k] - c->a[k];
    ax[k] = x[k] - c->a[k];
    t += ab[k] * ax[k];
    n += ab[k] * ab[k];
  }
  t = n > 0 ? fmin(1.0, fmax(0.0, t / n)) : 0.0;
  double d2 = 0;
  for (int k = 0; k < 3; k++) {
    const double e = ax[k] - t * ab[k];
    d2 += e * e;
  }
  return d2 <= c->r * c->r;
}

static void paint_capsule(painter *P, const double *a, const double *b, double r, int label) {
  capsule c;
  double lo[3], hi[3];
  for (int k = 0; k < 3; k++) {
    c.a[k] = a[k];
    c.b[k] = b[k];
    lo[k] = fmin(a[k], b[k]) - r;
    hi[k] = fmax(a[k], b[k]) + r;
  }
  c.r = r;
  paint(P, lo, hi, in_capsule, &c, label);
}

/* A tube along the polyline pts (n points), radius r. */
static void paint_tube(painter *P, const double *pts, int n, double r, int label) {
  for (int i = 0; i + 1 < n; i++) paint_capsule(P, pts + 3 * i, pts + 3 * i + 3, r, label);
}

/* --- the aorta: one centreline shared by the vessel and the wire ----------------------------- */

/* The aorta's centreline from the ascending aorta's root (s = 0) over the arch to the descending
 * aorta's lowest point, at arc-length steps of `step` mm: n points into pts (at most cap). The
 * arch is a half circle in the vertical plane through the top of the ascending and of the
 * descending aorta. */
#define AO_ROOT_Z (-5.0)
static int aorta_line(double step, double *pts, int cap) {
  const double A0[3] = {8, -28, AO_ROOT_Z}, A1[3] = {8, -20, 55}, D0[3] = {24, 42, 55}, D1[3] = {20, 48, -200};
  const double C[3] = {(A1[0] + D0[0]) / 2, (A1[1] + D0[1]) / 2, 55};
  const double R = 0.5 * hypot(D0[0] - A1[0], D0[1] - A1[1]);
  int n = 0;
  const double la = sqrt((A1[0] - A0[0]) * (A1[0] - A0[0]) + (A1[1] - A0[1]) * (A1[1] - A0[1]) +
                         (A1[2] - A0[2]) * (A1[2] - A0[2]));
  for (double s = 0; s < la && n < cap; s += step, n++)
    for (int k = 0; k < 3; k++) pts[3 * n + k] = A0[k] + (A1[k] - A0[k]) * s / la;
  const double larc = XT_PI * R;
  for (double s = 0; s < larc && n < cap; s += step, n++) {
    const double th = s / R;
    for (int k = 0; k < 3; k++) pts[3 * n + k] = C[k] + cos(th) * (A1[k] - C[k]) + (k == 2 ? sin(th) * R : 0.0);
  }
  const double ld = sqrt((D1[0] - D0[0]) * (D1[0] - D0[0]) + (D1[1] - D0[1]) * (D1[1] - D0[1]) +
                         (D1[2] - D0[2]) * (D1[2] - D0[2]));
  for (double s = 0; s <= ld && n < cap; s += step, n++)
    for (int k = 0; k < 3; k++) pts[3 * n + k] = D0[k] + (D1[k] - D0[k]) * s / ld;
  return n;
}

/* --- ribs and vertebrae ---------------------------------------------------------------------- */

#define BODY_CY 10.0
#define BODY_A 165.0
#define BODY_B 118.0

/* A rib's centreline: from beside the spine round the body's ellipse (at 0.885 of it) to the
 * costal cartilage, lower at the front by `drop` mm; n points into pts. */
static int rib_line(double z, double drop, int side, double *pts, int n) {
  for (int i = 0; i < n; i++) {
    const double phi = 0.07 * XT_PI + (0.88 - 0.07) * XT_PI * i / (n - 1); /* 0 at the back, pi at the front */
    /* the posterior part first curves down as it runs out, the anterior part slopes down inwards */
    const double zc = z - drop * 0.5 * (1.0 - cos(phi)) - 12.0 * sin(phi);
    pts[3 * i] = side * 0.885 * BODY_A * sin(phi);
    pts[3 * i + 1] = BODY_CY + 0.885 * BODY_B * cos(phi);
    pts[3 * i + 2] = zc;
  }
  return n;
}

typedef struct vert {
  double z0, z1; /* the body's height range */
} vert;

/* A vertebra: its body (an elliptic cylinder, trabecular inside a cortical rim) and its arch (a
 * ring round the canal, with the spinous process behind). */
static int in_vert_body(const double x[3], const void *arg) {
  const vert *w = arg;
  const double u = x[0] / 21.0, v = (x[1] - 72.0) / 17.0;
  return u * u + v * v <= 1.0 && x[2] >= w->z0 && x[2] <= w->z1;
}

static int in_vert_rim(const double x[3], const void *arg) {
  const vert *w = arg;
  const double u = x[0] / 21.0, v = (x[1] - 72.0) / 17.0, q = u * u + v * v;
  return q <= 1.0 && (q >= 0.75 || x[2] < w->z0 + 1.5 || x[2] > w->z1 - 1.5) && x[2] >= w->z0 && x[2] <= w->z1;
}

static int in_vert_arch(const double x[3], const void *arg) {
  const vert *w = arg;
  if (x[2] < w->z0 + 2 || x[2] > w->z1 - 2) return 0;
  const double u = x[0] / 16.0, v = (x[1] - 100.0) / 12.0, q = u * u + v * v;
  if (q <= 1.9 && q >= 1.0 && x[1] > 88.0) return 1;             /* the ring round the canal */
  if (fabs(x[0]) < 3.5 && x[1] > 110.0 && x[1] < 130.0) return 1; /* spinous process */
  /* transverse processes: 7 mm thick rods out to where the ribs meet them */
  const double zm = 0.5 * (w->z0 + w->z1), ax = fabs(x[0]);
  return ax > 14.0 && ax < 32.0 && hypot(x[1] - (92.0 + 0.3 * (ax - 14.0)), x[2] - zm) < 3.5;
}

/* ---------------------------------------------------------------------------------------------- */

const char *xt_phantom_thorax_region(int label) {
  static const char *const names[T_NLABELS] = {[T_HEART] = "heart", [T_AORTA] = "aorta", [T_PULMONARY] = "pulmonary",
                                               [T_VEINS] = "veins", [T_CORONARY] = "coronary"};
  return label >= 0 && label < T_NLABELS ? names[label] : NULL;
}

int xt_phantom_thorax_model(double voxel_mm, xt_model **out, xt_msg *msg) {
  *out = NULL;
  if (!(voxel_mm >= 0.5 && voxel_mm <= 10.0)) return xt_fail(msg, XT_ERANGE, "thorax: voxel %g mm outside [0.5, 10]", voxel_mm);
  const double ext[3] = {360.0, 260.0, 360.0}, ctr[3] = {0.0, BODY_CY, 0.0};
  int dim[3];
  for (int k = 0; k < 3; k++) dim[k] = (int)ceil(ext[k] / voxel_mm);
  const double sp[3] = {voxel_mm, voxel_mm, voxel_mm};
  xt_volume *v = NULL;
  int rc = xt_volume_create(dim[0], dim[1], dim[2], sp, XT_VOXEL_U8, &v, msg);
  if (rc) return rc;
  /* the grid is centred on the model origin; the body's centre is at y = BODY_CY */
  for (int k = 0; k < 3; k++) v->index_to_model.t[k] += ctr[k];
  v->materials = calloc(1, sizeof *v->materials);
  if (!v->materials) {
    xt_volume_free(v);
    return xt_fail(msg, XT_ENOMEM, "thorax: out of memory");
  }
  xt_material_table *t = v->materials;
  t->count = T_NLABELS;
  t->energy_kev = XT_DEFAULT_ENERGY_KEV;
  snprintf(t->source, sizeof t->source, "xraylib 4.0 at %.1f keV; lung = soft tissue at 0.26 g/cm^3, trabecular bone = "
           "cortical bone at 1.18 g/cm^3, air = soft tissue at 0.0012 [U]", XT_DEFAULT_ENERGY_KEV);
  for (int l = 0; l < T_NLABELS && !rc; l++) {
    xt_basis_part parts[2];
    int np = 0;
    if ((rc = xt_material_parts_named(t_names[l], parts, &np, msg))) break;
    double mu = 0, rho = 0;
    for (int k = 0; k < np && !rc; k++) {
      double mr = 0;
      rc = xt_basis_mass_atten(parts[k].basis, XT_DEFAULT_ENERGY_KEV, &mr, msg);
      mu += mr * parts[k].density;
      rho += parts[k].density;
    }
    t->mu[l] = (float)(mu / 10.0);
    t->density[l] = rho;
    snprintf(t->name[l], XT_MATERIAL_NAME_MAX, "%s", t_names[l]);
    t->contrast[l] = xt_phantom_thorax_region(l) != NULL;
  }
  if (rc) {
    xt_volume_free(v);
    return rc;
  }
  v->energy_kev = XT_DEFAULT_ENERGY_KEV;
  painter P = {v, v->data, {0, 0, 0}, voxel_mm};
  for (int k = 0; k < 3; k++) P.lo[k] = v->index_to_model.t[k];

  /* body, neck and shoulders' soft tissue */
  paint_ecyl(&P, 0, BODY_CY, BODY_A, BODY_B, -180, 140, T_SOFT);
  paint_ell(&P, 0, BODY_CY, 140, BODY_A, BODY_B * 0.9, 40, 0, T_SOFT);
  paint_ecyl(&P, 0, 20, 58, 52, 140, 180, T_SOFT);
  /* lungs, the mediastinum between them, trachea and main bronchi */
  paint_ell(&P, -78, 18, 22, 64, 82, 118, 0, T_LUNG);
  paint_ell(&P, 80, 18, 16, 60, 82, 112, 0, T_LUNG);
  paint_ecyl(&P, 0, 0, 26, 60, -60, 130, T_SOFT);
  const double tr0[3] = {0, 5, 178}, tr1[3] = {0, 8, 62}, brl[3] = {-45, 18, 35}, brr[3] = {45, 20, 30};
  paint_capsule(&P, tr0, tr1, 9, T_AIR);
  paint_capsule(&P, tr1, brl, 6.5, T_AIR);
  paint_capsule(&P, tr1, brr, 6, T_AIR);
  /* the heart (muscle) and its chambers (blood: they take contrast) */
  paint_ell(&P, 22, -28, -38, 68, 56, 62, -30, T_SOFT);
  paint_ell(&P, 42, -32, -48, 30, 22, 36, -35, T_HEART);
  paint_ell(&P, 5, -45, -30, 28, 18, 32, -10, T_HEART);
  paint_ell(&P, -12, -10, -15, 26, 22, 25, 0, T_HEART);
  /* great vessels: venae cavae; the pulmonary trunk in front of and left of the ascending aorta,
   * its right branch passing behind it; the aorta last, so that nothing cuts into it */
  const double sv0[3] = {-28, -12, 150}, sv1[3] = {-26, -15, 0}, ivc0[3] = {-20, 10, -60}, ivc1[3] = {-18, 20, -200};
  paint_capsule(&P, sv0, sv1, 10, T_VEINS);
  paint_capsule(&P, ivc0, ivc1, 12, T_VEINS);
  const double pa0[3] = {24, -50, -8}, pa1[3] = {22, -38, 30}, pal[3] = {60, 5, 30}, pr0[3] = {8, 10, 30},
               par[3] = {-55, 10, 26};
  paint_capsule(&P, pa0, pa1, 11, T_PULMONARY);
  paint_capsule(&P, pa1, pal, 8, T_PULMONARY);
  paint_capsule(&P, pa1, pr0, 8, T_PULMONARY);
  paint_capsule(&P, pr0, par, 8, T_PULMONARY);
  static double ao[3 * 1200];
  const int nao = aorta_line(2.0, ao, 1200);
  paint_tube(&P, ao, nao, 13.0, T_AORTA);
  /* arch branches: brachiocephalic, left common carotid, left subclavian */
  const double arch_top[3][3] = {{6, -8, 78}, {14, 8, 85}, {20, 24, 80}}, up[3][3] = {{-20, -15, 180}, {20, 0, 180},
                                                                                       {70, 20, 150}};
  const double rb[3] = {5.5, 4.0, 5.0};
  for (int i = 0; i < 3; i++) paint_capsule(&P, arch_top[i], up[i], rb[i], T_AORTA);
  /* coronary arteries over the heart's surface */
  const double lad[4][3] = {{14, -40, -2}, {30, -75, -30}, {55, -78, -70}, {78, -60, -95}};
  const double rca[4][3] = {{0, -42, -4}, {-30, -55, -30}, {-42, -30, -70}, {-20, 0, -95}};
  const double cx[3][3] = {{16, -38, -3}, {60, -20, -20}, {72, 10, -60}};
  paint_tube(&P, &lad[0][0], 4, 2.0, T_CORONARY);
  paint_tube(&P, &rca[0][0], 4, 1.8, T_CORONARY);
  paint_tube(&P, &cx[0][0], 3, 1.6, T_CORONARY);
  /* gas in the stomach, under the left dome of the diaphragm */
  paint_ell(&P, 70, -5, -135, 48, 38, 26, 20, T_AIR);
  /* the spine: T1..L1, 22 mm bodies and 6 mm discs, from the neck down */
  for (int i = 0; i < 13; i++) {
    const vert w = {165.0 - 28.0 * (i + 1), 165.0 - 28.0 * (i + 1) + 22.0};
    const double lo[3] = {-40, 50, w.z0}, hi[3] = {40, 135, w.z1};
    paint(&P, lo, hi, in_vert_body, &w, T_SPONGY);
    paint(&P, lo, hi, in_vert_rim, &w, T_BONE);
    paint(&P, lo, hi, in_vert_arch, &w, T_BONE);
  }
  /* ribs: eleven pairs of tubes, a cortical shell round a spongy core, each lower at the front */
  for (int i = 0; i < 11; i++) {
    double rl[3 * 40];
    for (int side = -1; side <= 1; side += 2) {
      rib_line(150.0 - 26.0 * i, 55.0 + 3.0 * i, side, rl, 40);
      paint_tube(&P, rl, 40, 5.0, T_BONE);
      paint_tube(&P, rl, 40, 3.3, T_SPONGY);
    }
  }
  /* sternum, clavicles, scapulae */
  paint_ecyl(&P, 0, -104, 15, 6, 20, 135, T_SPONGY);
  const double cl0[3] = {-20, -100, 140}, cl1[3] = {-140, -45, 152}, cr0[3] = {20, -100, 140}, cr1[3] = {140, -45, 152};
  paint_capsule(&P, cl0, cl1, 8, T_BONE);
  paint_capsule(&P, cr0, cr1, 8, T_BONE);
  paint_ell(&P, -112, 92, 70, 52, 7, 78, 25, T_BONE);
  paint_ell(&P, 112, 92, 70, 52, 7, 78, -25, T_BONE);

  rc = xt_model_from_volume(v, "thorax", out, msg);
  if (rc) xt_volume_free(v);
  return rc;
}

int xt_phantom_thorax_wire(double *pts, int cap) {
  /* the wire comes up the descending aorta from the groin, over the arch, its tip in the ascending
   * aorta 25 mm above the valve: the aorta's centreline walked backwards, 1 mm steps */
  static double ao[3 * 2000];
  const int n = aorta_line(1.0, ao, 2000);
  const int tip = (int)(25.0 / 1.0);
  int m = 0;
  for (int i = tip; i < n && m < cap && ao[3 * i + 2] > -175.0; i++, m++) /* inside the volume */
    for (int k = 0; k < 3; k++) pts[3 * m + k] = ao[3 * i + k] + (k == 0 ? 3.0 : 0.0); /* along the outer wall */
  return m;
}

int xt_phantom_thorax_wire_model(int max_points, xt_model **out, xt_msg *msg) {
  *out = NULL;
  /* a 0.035-inch (0.89 mm) stainless-steel wire, as aortic work uses, with the guidewire preset's
   * 30 mm platinum coil tip (xt_instr_guidewire) at that radius */
  xt_instr_device dev;
  int pt = 0, steel = 0;
  int rc = xt_instr_device_init(&dev, "blood", max_points, msg);
  if (!rc) rc = xt_instr_material(&dev, "platinum", &pt, msg);
  if (!rc) rc = xt_instr_material(&dev, "stainless_steel", &steel, msg);
  if (rc) return rc;
  const double r = 0.5 * 0.035 * 25.4;
  dev.nsections = 2; /* its table holds only what it is made of: each material is a channel */
  dev.sec[0] = (xt_instr_section){30.0, r * sqrt(0.6), 0.0, pt, 0};
  dev.sec[1] = (xt_instr_section){0.0, r, 0.0, steel, 0};
  double *pts = malloc(sizeof(double) * 3 * (size_t)max_points);
  if (!pts) return xt_fail(msg, XT_ENOMEM, "thorax: out of memory");
  const int n = xt_phantom_thorax_wire(pts, max_points);
  rc = xt_model_from_instr(&dev, pts, n, "guidewire", out, msg);
  free(pts);
  return rc;
}
