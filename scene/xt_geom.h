/* C-arm geometry: pose, detector modes, and the derived source, detector frame and 3x4
 * projection matrix. docs/geometry.md states the conventions and formulas; this is the only
 * code that implements them.
 *
 * World frame ("room"): origin at the isocentre, axes those of patient LPS for a head-first
 * supine patient on an untranslated table (+x patient left, +y posterior, +z superior), mm. */
#ifndef XT_GEOM_H
#define XT_GEOM_H

#include "xt_err.h"
#include "xt_vec.h"

/* Defaults of the FD20 systems (Azurion IFU, reference air-kerma setup). */
#define XT_DEFAULT_SOD_MM 810.0
#define XT_DEFAULT_SID_MM 1195.0

/* Accepted ranges; anything outside is rejected with XT_ERANGE. */
#define XT_PRIMARY_MAX_DEG 180.0
#define XT_SECONDARY_MAX_DEG 90.0
#define XT_DETROT_MAX_DEG 180.0
#define XT_TABLE_MAX_MM 2000.0
#define XT_DIST_MAX_MM 5000.0

typedef struct xt_pose {
  double primary_deg;      /* LAO + / RAO -, about the patient's long axis */
  double secondary_deg;    /* CRAN + / CAUD -, tilt of the beam toward the head */
  double detector_rot_deg; /* rotation of the detector in its plane about the central beam */
  double sod_mm;           /* source to isocentre */
  double sid_mm;           /* source to image (detector plane) */
  xt_vec3 table_mm;        /* patient displacement in the room, LPS axes: world = patient + table */
} xt_pose;

typedef struct xt_detector_mode {
  const char *name;
  const char *description;
  int cols, rows;         /* output pixels */
  double pitch_u_mm;      /* pixel spacing along columns (u) at the detector plane */
  double pitch_v_mm;      /* pixel spacing along rows (v) */
  double sod_mm, sid_mm;  /* the distances this mode's pose defaults to */
  /* How the panel is read out (scene/detector_modes.tsv). A mode made by hand leaves these 0:
   * xt_geom_compute then takes it as a whole panel of cols x rows read pixel for pixel. */
  const char *detector;   /* the panel (scene/detectors.tsv): "fd20", "fd15", "fd12", "thesis" */
  int det_cols, det_rows; /* the panel's native matrix */
  double det_pitch_mm;    /* its native pitch */
  int roi_col0, roi_row0; /* the centred region read out: its first native pixel */
  int roi_cols, roi_rows; /* ... and its size in native pixels */
  double binning;         /* native pixels per output pixel along a side (2: 2x2 binning) */
  double field_cm;        /* the zoom field's nominal diagonal; 0 for a mode that is not a field */
  double dose_ratio;      /* requested detector dose relative to the panel's largest field (1 = 100 %) */
  double readout_ms;      /* the panel's readout time in this mode */
} xt_detector_mode;

typedef struct xt_geometry {
  xt_pose pose;
  xt_detector_mode mode;
  xt_vec3 source;     /* focal spot, world mm */
  xt_vec3 det_center; /* where the central beam meets the detector plane */
  xt_vec3 det_origin; /* centre of pixel (col 0, row 0) */
  xt_vec3 u;          /* unit, +column direction */
  xt_vec3 v;          /* unit, +row direction */
  xt_vec3 d;          /* unit, isocentre -> detector (the beam's direction) */
  double c0, r0;      /* pixel coordinates of the principal point ((cols-1)/2, (rows-1)/2) */
  double P[3][4];     /* world (mm, homogeneous) -> (col*w, row*w, w); w = depth along d in mm */
} xt_geometry;

/* The detector modes of scene/detector_modes.tsv (compiled in; read once, on first use). */
int xt_mode_count(void);
const xt_detector_mode *xt_mode_at(int i);
/* NULL when unknown. */
const xt_detector_mode *xt_mode_find(const char *name);
/* The panels of scene/detectors.tsv: name, or NULL past the end. */
const char *xt_detector_name_at(int i);
/* A mode made by hand (tests, fits, custom detectors): a whole panel of cols x rows at the pitches,
 * read pixel for pixel, no field. */
xt_detector_mode xt_mode_custom(const char *name, int cols, int rows, double pitch_u_mm, double pitch_v_mm,
                                double sod_mm, double sid_mm);
/* How many native pixels' codes one pixel of the mode is the mean of (docs/imaging.md §4): 1 for a
 * mode read pixel for pixel (binning 1) or 2x2 binned in the panel (binning 2: the four charges are
 * summed before one read); (roi / out)^2 for a resampled output, whose pixel the detector delivers
 * as the mean of the native pixels it covers (fd20-1024 3.52, fd20-256 56.25, fd20-128 225). */
double xt_mode_native_mean(const xt_detector_mode *m);

/* A C-arm stand (scene/stands.tsv): the plane it carries (0 A frontal, 1 B lateral), the ranges of
 * its axes and its default angles. Poses of both stands are in the same patient-based angles. */
typedef struct xt_stand {
  const char *name;
  int plane;
  double primary_min, primary_max, secondary_min, secondary_max, sid_min, sid_max;
  double primary_deg, secondary_deg; /* its default pose's angles */
} xt_stand;

/* NULL when unknown. */
const xt_stand *xt_stand_find(const char *name);
/* The stand that carries plane (0 A, 1 B); NULL when the table has none. */
const xt_stand *xt_stand_of_plane(int plane);
/* The stand's default angles with the mode's distances (the SID held within the stand's range). */
xt_pose xt_stand_default_pose(const xt_stand *s, const xt_detector_mode *mode);
/* xt_pose_validate, then the stand's own ranges (s NULL: the first only). */
int xt_stand_validate(const xt_stand *s, const xt_pose *pose, xt_msg *msg);

/* A pose at 0/0 with the mode's distances (or the FD20 defaults when mode is NULL). */
xt_pose xt_pose_default(const xt_detector_mode *mode);

/* Range and sanity checks of a pose; names the offending field in msg. */
int xt_pose_validate(const xt_pose *pose, xt_msg *msg);

/* Derives the full geometry; fails (XT_ERANGE/XT_EINVAL) on an invalid pose or mode. */
int xt_geom_compute(const xt_pose *pose, const xt_detector_mode *mode, xt_geometry *g, xt_msg *msg);

/* World position of the centre of pixel (col, row); fractional coordinates allowed. */
xt_vec3 xt_geom_pixel_pos(const xt_geometry *g, double col, double row);

/* Applies P to a world point: returns 0 when the point is at or behind the source plane. */
int xt_geom_project(const xt_geometry *g, xt_vec3 p, double *col, double *row);

/* Patient -> world for the pose (the table translation). */
xt_affine xt_geom_patient_to_world(const xt_pose *pose);

/* The projection matrix in the pixel-edge convention of DeepDRR and DiffDRR (pixel (c, r) covers
 * [c, c+1) x [r, r+1), its centre at (c + 0.5, r + 0.5), principal point (cols/2, rows/2) for a
 * centred detector) and back: P_edge = T P with T = [[1,0,0.5],[0,1,0.5],[0,0,1]]. w (the third
 * row) is unchanged, so both keep w = depth along the central beam. docs/geometry.md. */
void xt_P_to_pixel_edge(const double P[3][4], double out[3][4]);
void xt_P_from_pixel_edge(const double P_edge[3][4], double out[3][4]);

#endif /* XT_GEOM_H */
