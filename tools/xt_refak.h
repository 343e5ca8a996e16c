/* Reference air kerma (issue 24): the Instructions for Use's measurement set-up as a built-in scene,
 * and the measurement a physicist makes in it, for any protocol and detector field.
 *
 * The set-up (IFU-p312 [S], notes-azurion-ifu §3): beam horizontal at 90 deg LAO / 0 deg CAUD, focus
 * to isocentre 810 mm, to the patient entrance reference point (PERP) 660 mm, to the phantom's
 * entrance 945 mm, to the detector 1195 mm; 200 mm PMMA, sides >= 300 x 400 mm, grid in, wedges out,
 * table out of the beam. The measurement: fluoroscopy (here: the protocol's own dose-rate control)
 * runs until kV and mA are stable, then the air kerma of one image is read and corrected to the PERP
 * by the inverse square law.
 *
 * Here each (protocol, field) is one run of a plane through the acquisition layer (xt_acq_expose):
 * the plane's loop moves the exposure along the protocol's curve, the field's dose ratio raising its
 * target (acq/xt_acq.c), until the measured detector dose sits on the target; that frame's K_irp
 * (xt_dose.h: mAs x the spectrum's kerma per mAs at 1 m x (1000/660)^2) is the reference air kerma
 * per image, times the frame rate x 60 the rate per minute. */
#ifndef XT_REFAK_H
#define XT_REFAK_H

#include <stdint.h>

#include "xt_geom.h"
#include "xt_model.h"
#include "xt_proj.h"

/* The set-up's distances (IFU-p312 [S]). */
#define XT_REFAK_SOD_MM 810.0
#define XT_REFAK_SID_MM 1195.0
#define XT_REFAK_PERP_MM 660.0     /* focus -> patient entrance reference point: isocentre - 150 mm */
#define XT_REFAK_ENTRANCE_MM 945.0 /* focus -> phantom entrance */
#define XT_REFAK_PMMA_MM 200.0
#define XT_REFAK_PMMA_DENSITY 1.19 /* g/cm^3, C5H8O2 */
#define XT_REFAK_PMMA_U_MM 400.0   /* the phantom's sides across the beam: along the detector's columns... */
#define XT_REFAK_PMMA_V_MM 300.0   /* ... and rows (the FD20's 38 x 30 cm field at its exit is 36 x 29 cm) */

typedef struct xt_refak_options {
  xt_backend backend;
  int threads;
  int grid_cols;   /* the render grid's columns across the field (its physical size is the mode's); 0: 48 */
  int scatter;     /* the scatter model on (1) or off (0) */
  int max_frames;  /* frames a run may take to settle; 0: 60 */
} xt_refak_options;

typedef struct xt_refak_result {
  const char *protocol, *mode;
  double field_cm, dose_ratio, fps;
  double kv, ma, pulse_ms, mas;   /* the settled frame's exposure */
  double target_ngy;              /* the loop's target: the protocol's detector dose x the field's ratio */
  double detector_ngy;            /* the loop's measurement of that frame (in front of the grid) */
  double kerma_ugy_per_mas;       /* the spectrum's air kerma per mAs at 1 m */
  double d_irp_mm;
  double k_irp_mgy;               /* reference air kerma per image at the PERP */
  double k_irp_mgy_min;           /* ... per minute: per image x fps x 60 */
  int frames;                     /* frames run until it settled */
  int settled;                    /* the measurement within XT_REFAK_SETTLED of the target */
  uint32_t drc_flags;             /* the loop's flags after the frame (clamped high: the target is out of reach) */
} xt_refak_result;

#define XT_REFAK_CLOSE 0.002   /* relative: a frame this close to the target ends the run */
#define XT_REFAK_SETTLED 0.02  /* ... and the closest frame within this is a settled measurement */

typedef struct xt_refak xt_refak;

/* The pose of the set-up: 90 LAO, 0 CAUD, SOD 810, SID 1195. */
xt_pose xt_refak_pose(void);
/* The PMMA phantom placed for that pose: its entrance face at 945 mm from the focus, centred on the
 * central ray, its 400 mm side along the detector's columns. */
int xt_refak_phantom(xt_model **out, xt_msg *msg);
/* A render grid for a field: the mode's centred region (its physical size, field and dose ratio) at
 * grid_cols columns and as many rows as keep its aspect. */
xt_detector_mode xt_refak_grid_mode(const xt_detector_mode *field, int grid_cols);

int xt_refak_open(const xt_refak_options *o, xt_refak **out, xt_msg *msg);
/* One measurement: protocol (a row of imaging/protocols.tsv, not custom) in field mode. */
int xt_refak_measure(xt_refak *r, int protocol, const xt_detector_mode *mode, xt_refak_result *res, xt_msg *msg);
void xt_refak_close(xt_refak *r);

#endif /* XT_REFAK_H */
