/* Motion: phases and the patient-frame maps of xt_motion.h. */
#include <math.h>
#include <string.h>

#include "xt_motion.h"

#define XT_PI 3.14159265358979323846

void xt_motion_defaults(xt_motion *m) {
  memset(m, 0, sizeof *m);
  m->cardiac.bpm = 70.0;
  m->cardiac.amplitude = 0.1;
  m->resp.period_s = 4.0;
  m->resp.amplitude_mm = 10.0;
  m->resp.axis[2] = -1.0;
}

static int in_range(double v, double lo, double hi) { return isfinite(v) && v >= lo && v <= hi; }

int xt_motion_check(const xt_motion *m, xt_msg *msg) {
  if (!in_range(m->cardiac.bpm, 30, 240)) return xt_fail(msg, XT_EINVAL, "motion: cardiac.bpm %g: 30..240", m->cardiac.bpm);
  if (!in_range(m->cardiac.amplitude, 0, 0.5))
    return xt_fail(msg, XT_EINVAL, "motion: cardiac.amplitude %g: 0..0.5 (a fraction)", m->cardiac.amplitude);
  for (int a = 0; a < 3; a++)
    if (!in_range(m->cardiac.centre_mm[a], -XT_MOTION_MAX_SHIFT_MM, XT_MOTION_MAX_SHIFT_MM))
      return xt_fail(msg, XT_EINVAL, "motion: cardiac.centre_mm: within +-%g mm", XT_MOTION_MAX_SHIFT_MM);
  if (!in_range(m->resp.period_s, 1, 20)) return xt_fail(msg, XT_EINVAL, "motion: respiratory.period_s %g: 1..20", m->resp.period_s);
  if (!in_range(m->resp.amplitude_mm, 0, 50))
    return xt_fail(msg, XT_EINVAL, "motion: respiratory.amplitude_mm %g: 0..50", m->resp.amplitude_mm);
  double n = 0;
  for (int a = 0; a < 3; a++) {
    if (!isfinite(m->resp.axis[a])) return xt_fail(msg, XT_EINVAL, "motion: respiratory.axis: not finite");
    n += m->resp.axis[a] * m->resp.axis[a];
  }
  if (fabs(sqrt(n) - 1.0) > 1e-6) return xt_fail(msg, XT_EINVAL, "motion: respiratory.axis: not a unit vector");
  return 0;
}

/* Phase of a period at t seconds, in [0, 1), exact for whole periods. */
static double phase(double t_s, double period_s) {
  double p = fmod(t_s / period_s, 1.0);
  if (p < 0) p += 1.0;
  return p >= 1.0 ? 0.0 : p;
}

void xt_motion_eval(const xt_motion *m, uint64_t t_ns, xt_motion_state *st) {
  const int64_t dt = (int64_t)(t_ns - m->t0_ns);
  st->t_s = (double)dt * 1e-9;
  st->cardiac_phase = st->resp_phase = -1.0;
  st->cardiac_scale = 1.0;
  st->resp_mm = 0.0;
  if (m->cardiac.on) {
    st->cardiac_phase = phase(st->t_s, 60.0 / m->cardiac.bpm);
    st->cardiac_scale = 1.0 - m->cardiac.amplitude * 0.5 * (1.0 - cos(2.0 * XT_PI * st->cardiac_phase));
  }
  if (m->resp.on) {
    st->resp_phase = phase(st->t_s, m->resp.period_s);
    st->resp_mm = m->resp.amplitude_mm * 0.5 * (1.0 - cos(2.0 * XT_PI * st->resp_phase));
  }
}

xt_affine xt_rigid_affine(const xt_rigid *r) {
  /* x' = Rz Ry Rx (x - c) + c + t */
  xt_affine R = xt_aff_identity();
  for (int a = 0; a < 3; a++) {
    const xt_affine ra = xt_aff_rot(a, r->rot_deg[a] * XT_PI / 180.0);
    R = xt_aff_compose(&ra, &R);
  }
  const xt_vec3 c = xt_v3(r->centre_mm[0], r->centre_mm[1], r->centre_mm[2]);
  const xt_vec3 rc = xt_aff_apply_dir(&R, c);
  R.t[0] = c.x - rc.x + r->trans_mm[0];
  R.t[1] = c.y - rc.y + r->trans_mm[1];
  R.t[2] = c.z - rc.z + r->trans_mm[2];
  return R;
}

int xt_rigid_check(const xt_rigid *r, xt_msg *msg) {
  for (int a = 0; a < 3; a++) {
    if (!in_range(r->rot_deg[a], -180, 180)) return xt_fail(msg, XT_EINVAL, "transform: rotation_deg[%d] %g: -180..180", a, r->rot_deg[a]);
    if (!in_range(r->trans_mm[a], -XT_MOTION_MAX_SHIFT_MM, XT_MOTION_MAX_SHIFT_MM))
      return xt_fail(msg, XT_EINVAL, "transform: translation_mm[%d] %g: within +-%g mm", a, r->trans_mm[a],
                     XT_MOTION_MAX_SHIFT_MM);
    if (!in_range(r->centre_mm[a], -XT_MOTION_MAX_SHIFT_MM, XT_MOTION_MAX_SHIFT_MM))
      return xt_fail(msg, XT_EINVAL, "transform: centre_mm[%d] %g: within +-%g mm", a, r->centre_mm[a],
                     XT_MOTION_MAX_SHIFT_MM);
  }
  return 0;
}

xt_affine xt_motion_transform(const xt_motion *m, const xt_motion_state *st, const xt_rigid *user, int cardiac,
                              int resp) {
  xt_affine T = xt_aff_identity();
  if (cardiac && m->cardiac.on) { /* x' = c + s (x - c) */
    const double s = st->cardiac_scale;
    for (int a = 0; a < 3; a++) {
      T.m[a][a] = s;
      T.t[a] = (1.0 - s) * m->cardiac.centre_mm[a];
    }
  }
  if (resp && m->resp.on)
    for (int a = 0; a < 3; a++) T.t[a] += st->resp_mm * m->resp.axis[a];
  if (user) {
    const xt_affine U = xt_rigid_affine(user);
    T = xt_aff_compose(&U, &T);
  }
  return T;
}
