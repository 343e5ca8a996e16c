/* Motion (issue 26; docs/geometry.md, "Model motion"): what moves a model during a run, as maps
 * of the patient frame that the projector composes onto the model's placement
 * (xt_proj_set_transform): a rigid transform given over the API (a table pan, a patient shift),
 * and two periodic motions evaluated at an exposure's time: the heart's beat (a uniform scaling
 * about a centre, following the ECG phase) and breathing (a translation along an axis, cranio-
 * caudal by default). Plain arithmetic on parameters: no clock of its own, the caller gives the
 * time (the server's device clock, virtual in CI), so a frame's phases are those of its exposure. */
#ifndef XT_MOTION_H
#define XT_MOTION_H

#include <stdint.h>

#include "xt_err.h"
#include "xt_vec.h"

/* A rigid transform as the API states it: rotations (degrees) about the patient axes L, P, S
 * through `centre_mm`, applied x, then y, then z, then the translation. */
typedef struct xt_rigid {
  double rot_deg[3];
  double centre_mm[3];
  double trans_mm[3];
} xt_rigid;

/* Limits a client cannot pass (docs/server.md): translations within +-XT_MOTION_MAX_SHIFT_MM,
 * angles within +-180. */
#define XT_MOTION_MAX_SHIFT_MM 1000.0

/* The heart: scale s(phase) = 1 - amplitude * (1 - cos(2 pi phase)) / 2 about centre_mm, phase 0 at
 * the R wave (end-diastole, largest), the smallest at phase 0.5 (end-systole) [U: a raised cosine
 * stands for the volume curve]. */
typedef struct xt_motion_cardiac {
  int on;
  double bpm;         /* 30..240; default 70 */
  double amplitude;   /* fractional linear contraction at end-systole, 0..0.5; default 0.1 [U] */
  double centre_mm[3];
} xt_motion_cardiac;

/* Breathing: displacement d(phase) = amplitude_mm * (1 - cos(2 pi phase)) / 2 along axis (a unit
 * vector of the patient frame), phase 0 at end-expiration [U: Lujan's cos^2 model with n = 1]. The
 * default axis is caudal, (0, 0, -1) in LPS: the diaphragm and heart move inferiorly on inspiration. */
typedef struct xt_motion_resp {
  int on;
  double period_s;     /* 1..20; default 4 */
  double amplitude_mm; /* 0..50; default 10 [U] */
  double axis[3];
} xt_motion_resp;

typedef struct xt_motion {
  xt_motion_cardiac cardiac;
  xt_motion_resp resp;
  uint64_t t0_ns; /* both phases are 0 here (when the motion was started) */
} xt_motion;

/* The motion at one time: the phases (-1 when that motion is off) and what they give. */
typedef struct xt_motion_state {
  double t_s;           /* seconds since t0 (may be negative: before the start, phases wrap) */
  double cardiac_phase; /* 0..1, or -1 */
  double resp_phase;    /* 0..1, or -1 */
  double cardiac_scale; /* 1 when off */
  double resp_mm;       /* 0 when off */
} xt_motion_state;

/* Defaults (both off): 70 bpm, 10 %; 4 s, 10 mm caudal. */
void xt_motion_defaults(xt_motion *m);
/* Checks the ranges above; msg names the field. */
int xt_motion_check(const xt_motion *m, xt_msg *msg);
void xt_motion_eval(const xt_motion *m, uint64_t t_ns, xt_motion_state *st);
/* The map of the patient frame for a model at state st: rigid(user) * R(t) * C(t), where C is the
 * heart's scaling (cardiac: whether this model beats) and R breathing's translation (resp: whether
 * this model breathes); the user's transform comes last (it moves the whole patient). */
xt_affine xt_motion_transform(const xt_motion *m, const xt_motion_state *st, const xt_rigid *user, int cardiac,
                              int resp);
/* The rigid transform's map; xt_rigid_check the limits (msg names the field). */
xt_affine xt_rigid_affine(const xt_rigid *r);
int xt_rigid_check(const xt_rigid *r, xt_msg *msg);

#endif /* XT_MOTION_H */
