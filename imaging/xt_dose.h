/* Dose bookkeeping (issue 11): the air kerma at the interventional reference point and the
 * kerma-area product of each frame, from the spectrum (air kerma per mAs at 1 m), the frame's mAs
 * and the geometry, and their running totals over a run - the figures an RDSR and dose monitors
 * read (notes §3.3).
 *
 *   K_irp = mAs x K_1m x (1000 / d_irp)^2          d_irp = SOD - irp_mm (IEC 60601-2-43: 15 cm
 *                                                    toward the focal spot from the isocentre)
 *   KAP   = K_irp x A_field(d_irp)                 A_field: the collimated field (wedges counted at
 *                                                    their transmission) scaled from the detector
 *                                                    plane by (d_irp / SID)^2; KAP is the same at
 *                                                    any distance (inverse square x area)
 *
 * Free-in-air kerma on the central ray, no backscatter; the wedges' attenuation of the central
 * ray is not in K_irp (it is in KAP). */
#ifndef XT_DOSE_H
#define XT_DOSE_H

#include <stdint.h>

#include "xt_chain.h"

typedef struct xt_dose {
  double d_irp_mm;     /* focal spot to the reference point */
  double field_cm2;    /* effective field area at the reference point */
  double k_irp_mgy;    /* air kerma at the reference point */
  double kap_gycm2;    /* kerma-area product */
} xt_dose;

typedef struct xt_dose_totals {
  uint64_t frames;
  double k_irp_mgy, kap_gycm2;
} xt_dose_totals;

/* The frame's dose: p its exposure (mas, collimation, irp_mm), kerma_ugy_per_mas the spectrum's air
 * kerma per mAs at 1 m (xt_chain_info), g the frame's geometry (SOD, SID, the detector's size). */
int xt_dose_frame(const xt_chain_params *p, double kerma_ugy_per_mas, const xt_geometry *g, xt_dose *out, xt_msg *msg);
void xt_dose_add(xt_dose_totals *t, const xt_dose *d);

#endif /* XT_DOSE_H */
