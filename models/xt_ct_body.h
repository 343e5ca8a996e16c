/* Telling the patient from what surrounds it in a CT volume of mu, so that a sparse grid stores
 * only the patient: the air around it (never exactly 0 in a real scan: noise, reconstruction
 * ripple) and separate objects in the field (the table, a head rest, cables) become the background.
 *
 * The rule (docs/models.md, "A CT's background"):
 *   body    = the largest 6-connected component of the voxels with mu >= mu_threshold
 *             (the converter uses mu(-500 HU): halfway between air and fat);
 *   outside = the voxels not in the body that reach the edge of their slice (index axis 2, a CT
 *             series' slices) through voxels not in the body, 4-connected within the slice;
 *   outside voxels are set to the background, every other voxel is kept exactly.
 * Per slice, not in 3D: the airways run across slices from the nose and mouth to the lungs, so a
 * 3D fill would enter them and empty the lungs (about -850 HU, mass that matters); within one
 * slice the lungs, airways and sinuses are enclosed by the body and stay.
 * The report states the error this introduces against the volume as loaded. */
#ifndef XT_CT_BODY_H
#define XT_CT_BODY_H

#include <stddef.h>

#include "xt_model.h"

typedef struct xt_ct_body_report {
  double mu_threshold;       /* 1/mm, as given */
  size_t voxels;             /* of the volume */
  size_t body;               /* voxels of the largest component above the threshold */
  size_t outside;            /* voxels set to the background */
  size_t changed;            /* outside voxels whose value was not the background already */
  double max_abs_dmu;        /* largest |mu before - mu after| over the volume, 1/mm */
  double mean_abs_dmu;       /* mean of |mu before - mu after| over all voxels, 1/mm */
  double mass;               /* sum of |mu - background| * voxel volume before, mm^2 */
  double mass_dropped;       /* the same over the outside voxels: the share of every parallel
                                projection's total line integral that the change removes */
} xt_ct_body_report;

/* Sets the outside voxels of a dense (float mu) volume to `background`, in place; fills *r.
 * XT_EINVAL for a label volume or a non-finite threshold; XT_ENOMEM. On error v is unchanged. */
int xt_ct_body_classify(xt_volume *v, double mu_threshold, double background, xt_ct_body_report *r, xt_msg *msg);

/* The report as one line, as xtwin nvdb-convert and gmm-fit print it (body_hu: the HU the threshold
 * came from), without a newline; snprintf's return. */
int xt_ct_body_format(const xt_ct_body_report *r, double body_hu, char *buf, size_t n);

#endif /* XT_CT_BODY_H */
