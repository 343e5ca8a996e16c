/* C-arm geometry: anatomical angles to the source, detector frame and projection matrix.
 * The formulas are those of docs/geometry.md section "Derivation"; keep the two in step. */
#include "xt_geom.h"

#include <stddef.h>
#include <string.h>

xt_pose xt_pose_default(const xt_detector_mode *mode) {
  xt_pose p;
  memset(&p, 0, sizeof p);
  p.sod_mm = mode ? mode->sod_mm : XT_DEFAULT_SOD_MM;
  p.sid_mm = mode ? mode->sid_mm : XT_DEFAULT_SID_MM;
  return p;
}

static int check_range(xt_msg *msg, const char *field, double v, double lo, double hi) {
  if (!isfinite(v)) return xt_fail(msg, XT_ERANGE, "pose.%s: not a finite number", field);
  if (v < lo || v > hi) return xt_fail(msg, XT_ERANGE, "pose.%s: %g outside [%g, %g]", field, v, lo, hi);
  return 0;
}

int xt_pose_validate(const xt_pose *p, xt_msg *msg) {
  int rc;
  if ((rc = check_range(msg, "primary_deg", p->primary_deg, -XT_PRIMARY_MAX_DEG, XT_PRIMARY_MAX_DEG)) ||
      (rc = check_range(msg, "secondary_deg", p->secondary_deg, -XT_SECONDARY_MAX_DEG, XT_SECONDARY_MAX_DEG)) ||
      (rc = check_range(msg, "detector_rot_deg", p->detector_rot_deg, -XT_DETROT_MAX_DEG, XT_DETROT_MAX_DEG)) ||
      (rc = check_range(msg, "sod_mm", p->sod_mm, 1.0, XT_DIST_MAX_MM)) ||
      (rc = check_range(msg, "sid_mm", p->sid_mm, 1.0, XT_DIST_MAX_MM)) ||
      (rc = check_range(msg, "table_mm[0]", p->table_mm.x, -XT_TABLE_MAX_MM, XT_TABLE_MAX_MM)) ||
      (rc = check_range(msg, "table_mm[1]", p->table_mm.y, -XT_TABLE_MAX_MM, XT_TABLE_MAX_MM)) ||
      (rc = check_range(msg, "table_mm[2]", p->table_mm.z, -XT_TABLE_MAX_MM, XT_TABLE_MAX_MM)))
    return rc;
  if (!(p->sid_mm > p->sod_mm))
    return xt_fail(msg, XT_ERANGE, "pose.sid_mm: %g must exceed sod_mm %g (the detector lies beyond the isocentre)",
                   p->sid_mm, p->sod_mm);
  return 0;
}

xt_detector_mode xt_mode_custom(const char *name, int cols, int rows, double pitch_u_mm, double pitch_v_mm,
                                double sod_mm, double sid_mm) {
  xt_detector_mode m;
  memset(&m, 0, sizeof m);
  m.name = name;
  m.description = name;
  m.cols = cols;
  m.rows = rows;
  m.pitch_u_mm = pitch_u_mm;
  m.pitch_v_mm = pitch_v_mm;
  m.sod_mm = sod_mm;
  m.sid_mm = sid_mm;
  return m;
}

double xt_mode_native_mean(const xt_detector_mode *m) {
  const double b = m->binning; /* 0 in a mode made by hand before xt_geom_compute completes it */
  return b > 0 && b != 1.0 && b != 2.0 ? b * b : 1.0;
}

/* A mode made by hand reads a whole panel of its own size pixel for pixel. */
static void complete_mode(xt_detector_mode *m) {
  if (m->roi_cols > 0) return;
  m->det_cols = m->roi_cols = m->cols;
  m->det_rows = m->roi_rows = m->rows;
  m->det_pitch_mm = m->pitch_u_mm;
  m->roi_col0 = m->roi_row0 = 0;
  m->binning = 1.0;
  m->dose_ratio = 1.0;
}

static int validate_mode(const xt_detector_mode *m, xt_msg *msg) {
  if (!m) return xt_fail(msg, XT_EINVAL, "detector mode: none given");
  if (m->cols < 1 || m->rows < 1 || m->cols > 16384 || m->rows > 16384)
    return xt_fail(msg, XT_ERANGE, "detector mode %s: %d x %d pixels outside [1, 16384]", m->name ? m->name : "?",
                   m->cols, m->rows);
  if (!(m->pitch_u_mm > 0 && m->pitch_u_mm < 100) || !(m->pitch_v_mm > 0 && m->pitch_v_mm < 100))
    return xt_fail(msg, XT_ERANGE, "detector mode %s: pixel pitch must be in (0, 100) mm", m->name ? m->name : "?");
  return 0;
}

xt_affine xt_geom_patient_to_world(const xt_pose *pose) {
  xt_affine a = xt_aff_identity();
  a.t[0] = pose->table_mm.x;
  a.t[1] = pose->table_mm.y;
  a.t[2] = pose->table_mm.z;
  return a;
}

int xt_geom_compute(const xt_pose *pose_in, const xt_detector_mode *mode_in, xt_geometry *g, xt_msg *msg) {
  int rc;
  if ((rc = xt_pose_validate(pose_in, msg)) || (rc = validate_mode(mode_in, msg))) return rc;
  /* Copies first: callers may pass g's own pose and mode to recompute it. */
  const xt_pose pose_copy = *pose_in;
  xt_detector_mode mode_copy = *mode_in;
  complete_mode(&mode_copy);
  const xt_pose *pose = &pose_copy;
  const xt_detector_mode *mode = &mode_copy;
  memset(g, 0, sizeof *g);
  g->pose = *pose;
  g->mode = *mode;

  double a = pose->primary_deg * (XT_PI / 180.0);
  double b = pose->secondary_deg * (XT_PI / 180.0);
  double gam = pose->detector_rot_deg * (XT_PI / 180.0);
  /* R = Rz(a) Rx(-b); d = R (0,-1,0), u = R (1,0,0), v = R (0,0,-1). */
  xt_vec3 d = xt_v3(sin(a) * cos(b), -cos(a) * cos(b), sin(b));
  xt_vec3 u0 = xt_v3(cos(a), sin(a), 0.0);
  xt_vec3 v0 = xt_v3(sin(a) * sin(b), -cos(a) * sin(b), -cos(b));
  /* In-plane detector rotation: +gamma turns u toward v. */
  xt_vec3 u = xt_v3_add(xt_v3_scale(u0, cos(gam)), xt_v3_scale(v0, sin(gam)));
  xt_vec3 v = xt_v3_add(xt_v3_scale(u0, -sin(gam)), xt_v3_scale(v0, cos(gam)));

  g->d = d;
  g->u = u;
  g->v = v;
  g->source = xt_v3_scale(d, -pose->sod_mm);
  g->det_center = xt_v3_scale(d, pose->sid_mm - pose->sod_mm);
  g->c0 = 0.5 * (mode->cols - 1);
  g->r0 = 0.5 * (mode->rows - 1);
  g->det_origin = xt_v3_sub(g->det_center,
                            xt_v3_add(xt_v3_scale(u, g->c0 * mode->pitch_u_mm), xt_v3_scale(v, g->r0 * mode->pitch_v_mm)));

  /* P rows: col*w = (f_u u + c0 d).(X - S), row*w = (f_v v + r0 d).(X - S), w = d.(X - S). */
  double fu = pose->sid_mm / mode->pitch_u_mm, fv = pose->sid_mm / mode->pitch_v_mm;
  xt_vec3 r1 = xt_v3_add(xt_v3_scale(u, fu), xt_v3_scale(d, g->c0));
  xt_vec3 r2 = xt_v3_add(xt_v3_scale(v, fv), xt_v3_scale(d, g->r0));
  xt_vec3 rows3[3] = {r1, r2, d};
  for (int i = 0; i < 3; i++) {
    g->P[i][0] = rows3[i].x;
    g->P[i][1] = rows3[i].y;
    g->P[i][2] = rows3[i].z;
    g->P[i][3] = -xt_v3_dot(rows3[i], g->source);
  }
  return 0;
}

xt_vec3 xt_geom_pixel_pos(const xt_geometry *g, double col, double row) {
  return xt_v3_add(g->det_origin,
                   xt_v3_add(xt_v3_scale(g->u, col * g->mode.pitch_u_mm), xt_v3_scale(g->v, row * g->mode.pitch_v_mm)));
}

int xt_geom_project(const xt_geometry *g, xt_vec3 p, double *col, double *row) {
  double h[3];
  for (int i = 0; i < 3; i++) h[i] = g->P[i][0] * p.x + g->P[i][1] * p.y + g->P[i][2] * p.z + g->P[i][3];
  if (!(h[2] > 0)) return 0;
  *col = h[0] / h[2];
  *row = h[1] / h[2];
  return 1;
}

void xt_P_to_pixel_edge(const double P[3][4], double out[3][4]) {
  for (int j = 0; j < 4; j++) {
    out[0][j] = P[0][j] + 0.5 * P[2][j];
    out[1][j] = P[1][j] + 0.5 * P[2][j];
    out[2][j] = P[2][j];
  }
}

void xt_P_from_pixel_edge(const double P_edge[3][4], double out[3][4]) {
  for (int j = 0; j < 4; j++) {
    out[0][j] = P_edge[0][j] - 0.5 * P_edge[2][j];
    out[1][j] = P_edge[1][j] - 0.5 * P_edge[2][j];
    out[2][j] = P_edge[2][j];
  }
}
