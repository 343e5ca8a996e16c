/* Dose-rate control (issue 11; notes §3.12): a closed loop that holds the requested detector dose
 * per frame. Each frame it measures the mean signal of a central measuring field (the middle third
 * of the detector each way) in the raw frame, as a detector air kerma, and moves the exposure along
 * the protocol's dose control curve (imaging/dose_curves.tsv, issue 24), a path through (kV, mA,
 * pulse width) that raises one factor at a time; issue 11's, the table's "default":
 *
 *   node   0    1    2    3    4    5    6    7
 *   kV     60   70   70   80   80   90   90   drc_kv_max      (kV capped at drc_kv_max throughout)
 *   mA     10   10   10   10   100  100  400  400
 *   ms     3    3    8    8    8    8    8    8
 *
 * linear between nodes in a curve position s in [0, 7]; the generator sets kV in 1 kV steps, so a
 * frame's kV is the curve's rounded to a whole kV and its mAs takes up the remainder (x (kV_curve /
 * kV_set)^3, at most 2.5 %), which lets the chain keep one set of spectral tables per whole kV
 * (xt_chain_set_params never rebuilds them on the loop's path). The loop predicts the detector dose at
 * another s as D' = D x (mAs'/mAs) x (kV'/kV)^3 (behind a patient the signal grows ~kV^3..5 at
 * fixed mAs; the low exponent errs on the stable side), asks for a step of 0.6 x ln(target/D),
 * at most ln(drc_max_step) either way (the rate limit), and solves for s' in closed form; s is
 * clamped to [0, 7]. With the default rate limit 2 a tenfold change of attenuation settles to
 * within 10 % of the target in 10 frames (tests/test_dose.c holds this). No signal at all (closed
 * shutters) drives the loop to the curve's end, kV at drc_kv_max, without an error. */
#ifndef XT_DRC_H
#define XT_DRC_H

#include <stdint.h>

#include "xt_chain.h"
#include "xt_drc_math.h"

#define XT_DRC_SETTLE_FRAMES 10 /* the stated settling time (to 10 %) after a tenfold step */

/* Starts the loop at the point of p's protocol's curve nearest in output to p's kV and mAs. */
void xt_drc_reset(xt_drc *d, const xt_chain_params *p);
/* The exposure of curve position s: kv (whole kV), pulse_ms and mas of p set (other fields kept). */
void xt_drc_apply(const xt_drc *d, xt_chain_params *p);
/* The loop's constants and the measurement's, from the parameters and the frame's detector mode (its
 * render pixel's area, and the native pixels a resampled mode's code is the mean of). */
xt_drc_law xt_drc_law_of(const xt_chain_params *p);
xt_drc_meter xt_drc_meter_of(const xt_chain_params *p, const xt_detector_mode *mode);
/* The measuring field's exact code sum of a raw frame (ocols x orows) and its pixel count. */
void xt_drc_field_sum(const uint16_t *raw, int ocols, int orows, uint64_t *sum, uint64_t *n);
/* Detector air kerma (nGy, in front of the grid) of the measuring field of a raw frame, from the
 * mean offset-subtracted code and the spectrum's signal per air kerma
 * (xt_chain_info.flat_kev_per_mm2_ugy); mode the frame's detector mode (the render grid's). */
double xt_drc_measure(const uint16_t *raw, int ocols, int orows, const xt_chain_params *p, const xt_chain_info *ci,
                      const xt_detector_mode *mode);
/* The same from a field sum (xt_chain_drc_field: the device's reduction). */
double xt_drc_measure_sum(uint64_t sum, uint64_t n, const xt_chain_params *p, const xt_chain_info *ci,
                          const xt_detector_mode *mode);
/* One step of the loop from a measurement of a frame exposed with p. */
void xt_drc_update(xt_drc *d, const xt_chain_params *p, double measured_ngy);

#endif /* XT_DRC_H */
