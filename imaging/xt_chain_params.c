/* The chain's parameters as one table: name, type, default, range, unit, help. The CLI options,
 * the server's settings, the sidecar and docs/imaging.md are all read off this table, so a
 * parameter added here is everywhere at once. Sources of the defaults: docs/imaging.md. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "xt_chain.h"
#include "xt_exposure.h"

#define P(f) offsetof(xt_chain_params, f)

static const xt_chain_param_info tab[] = {
    /* tube and exposure */
    {"kv", XT_PARAM_REAL, P(kv), 80, XT_KV_MIN, XT_KV_MAX, "kV", "tube voltage (constant potential)"},
    {"anode_deg", XT_PARAM_REAL, P(anode_deg), XT_ANODE_REF_DEG, XT_ANODE_MIN_DEG, XT_ANODE_MAX_DEG, "deg",
     "anode (target) angle"},
    {"inherent_al_mm", XT_PARAM_REAL, P(inherent_al_mm), XT_TASMIP_RQR_AL_MM, 0, XT_FILTER_MAX_MM_AL, "mm",
     "inherent filtration, aluminium added to TASMIP's tube (0.9 gives the IEC 61267 RQR beams at 40-80 kV)"},
    {"filter_al_mm", XT_PARAM_REAL, P(filter_al_mm), 1.0, 0, XT_FILTER_MAX_MM_AL, "mm", "spectral filter: aluminium"},
    {"filter_cu_mm", XT_PARAM_REAL, P(filter_cu_mm), 0.1, 0, XT_FILTER_MAX_MM_CU, "mm", "spectral filter: copper"},
    {"mas", XT_PARAM_REAL, P(mas), 0.1, 1e-5, 1000, "mAs", "exposure of one frame: tube current x pulse width"},
    {"energy_bins", XT_PARAM_INT, P(energy_bins), 0, 0, XT_SPECTRUM_MAX_BINS, "",
     "energy bins of the polychromatic integral: 0 = every 1 keV bin, else merged into this many"},
    /* detector */
    {"csi_mm", XT_PARAM_REAL, P(csi_mm), 0.6, 0.05, 2.0, "mm", "CsI:Tl scintillator thickness"},
    {"csi_fill", XT_PARAM_REAL, P(csi_fill), 0.8, 0.1, 1.0, "", "packing fraction of the columnar CsI"},
    {"psf_mm", XT_PARAM_REAL, P(psf_mm), 0.12, 0, 2.0, "mm",
     "sigma of the Gaussian light-spread PSF at the detector (0 = none)"},
    {"adu_per_kev", XT_PARAM_REAL, P(adu_per_kev), 0.1, 1e-6, 1000, "ADU/keV",
     "conversion gain of a native pixel (a resampled mode's pixel reads the mean of its native pixels' codes)"},
    {"e_noise_adu", XT_PARAM_REAL, P(e_noise_adu), 2.0, 0, 1000, "ADU",
     "electronic noise per read of a native pixel, rms (0 = off)"},
    {"offset_adu", XT_PARAM_REAL, P(offset_adu), 1000, 0, 60000, "ADU", "mean dark offset"},
    {"offset_fpn_adu", XT_PARAM_REAL, P(offset_fpn_adu), 20, 0, 5000, "ADU", "pixel-to-pixel offset spread, rms"},
    {"gain_fpn", XT_PARAM_REAL, P(gain_fpn), 0.03, 0, 0.5, "", "pixel-to-pixel relative gain spread, rms"},
    {"defect_fraction", XT_PARAM_REAL, P(defect_fraction), 2e-4, 0, 0.01, "", "fraction of dead and hot pixels"},
    {"defect_lines", XT_PARAM_INT, P(defect_lines), 1, 0, 16, "", "dead columns"},
    {"lag", XT_PARAM_INT, P(lag), 1, 0, 1, "", "image lag on (1) or off (0)"},
    {"lag_frac_1", XT_PARAM_REAL, P(lag_frac[0]), 0.0240625, 0, 0.5, "", "charge released in later frames, term 1"},
    {"lag_frac_2", XT_PARAM_REAL, P(lag_frac[1]), 0.001875, 0, 0.5, "", "charge released in later frames, term 2"},
    {"lag_frac_3", XT_PARAM_REAL, P(lag_frac[2]), 0.0040625, 0, 0.5, "", "charge released in later frames, term 3"},
    {"lag_decay_1", XT_PARAM_REAL, P(lag_decay[0]), 0.1, 0.001, 0.999, "", "per-frame decay of lag term 1"},
    {"lag_decay_2", XT_PARAM_REAL, P(lag_decay[1]), 0.5, 0.001, 0.999, "", "per-frame decay of lag term 2"},
    {"lag_decay_3", XT_PARAM_REAL, P(lag_decay[2]), 0.9, 0.001, 0.999, "", "per-frame decay of lag term 3"},
    {"adc_bits", XT_PARAM_INT, P(adc_bits), 14, 8, 16, "bit", "ADC resolution of the raw frame"},
    {"binning", XT_PARAM_INT, P(binning), 1, 1, 2, "", "1, or 2: 2x2 binning in the panel, charge summed"},
    {"quantum_noise", XT_PARAM_INT, P(quantum_noise), 1, 0, 1, "", "Poisson quantum noise on (1) or off (0)"},
    {"seed", XT_PARAM_U64, P(seed), 1, 0, 9007199254740991.0, "", "run seed of the frames' noise"},
    {"panel_seed", XT_PARAM_U64, P(panel_seed), 20, 0, 9007199254740991.0, "",
     "seed of the panel's fixed pattern (gain, offset, defects)"},
    /* processing */
    {"window", XT_PARAM_REAL, P(window), 0.0, 0, 100, "", "display window, attenuation units ln(flat/signal); 0: automatic, from each frame's histogram (0.5-99.5 %)"},
    {"level", XT_PARAM_REAL, P(level), 3.0, -20, 100, "", "display level (window centre), attenuation units; unused with the automatic window"},
    {"temporal_alpha", XT_PARAM_REAL, P(temporal_alpha), 0.5, 0.01, 1.0, "",
     "recursive filter: weight of the new frame (1 = off)"},
    {"edge_gain", XT_PARAM_REAL, P(edge_gain), 0.5, 0, 10, "", "edge enhancement: unsharp-mask gain (0 = off)"},
    /* exposure settings, dose and dose-rate control (issue 11; xt_exposure.c, xt_dose.c, xt_drc.c) */
    {"pulse_ms", XT_PARAM_REAL, P(pulse_ms), 5.0, 0.1, 1000, "ms",
     "pulse width (the tube current mA = mas / pulse width; set 'ma' to change it)"},
    {"focal_spot_mm", XT_PARAM_REAL, P(focal_spot_mm), 0.4, 0.1, 2.0, "mm", "nominal focal spot (reported only)"},
    {"grid", XT_PARAM_INT, P(grid), 0, 0, 1, "", "anti-scatter grid in (1) or out (0)"},
    {"grid_tp", XT_PARAM_REAL, P(grid_tp), 0.7, 0.3, 1.0, "", "the grid's primary transmission"},
    {"shutter_left", XT_PARAM_REAL, P(shutter[0]), 0, 0, 1, "", "collimator: fraction of the field the left shutter covers"},
    {"shutter_right", XT_PARAM_REAL, P(shutter[1]), 0, 0, 1, "", "collimator: fraction the right shutter covers"},
    {"shutter_top", XT_PARAM_REAL, P(shutter[2]), 0, 0, 1, "", "collimator: fraction the top shutter covers"},
    {"shutter_bottom", XT_PARAM_REAL, P(shutter[3]), 0, 0, 1, "", "collimator: fraction the bottom shutter covers"},
    {"wedge_left", XT_PARAM_REAL, P(wedge[0]), 0, 0, 1, "", "wedge filter: fraction of the field it covers from the left"},
    {"wedge_right", XT_PARAM_REAL, P(wedge[1]), 0, 0, 1, "", "wedge filter: fraction it covers from the right"},
    {"wedge_t", XT_PARAM_REAL, P(wedge_t), 0.3, 0.01, 1.0, "", "a wedge filter's transmission"},
    {"irp_mm", XT_PARAM_REAL, P(irp_mm), 150, 0, 500, "mm",
     "interventional reference point: distance from the isocentre toward the focal spot (IEC 60601-2-43: 150)"},
    {"protocol", XT_PARAM_INT, P(protocol), 0, 0, XT_PROTOCOL_MAX, "",
     "protocol last applied: its row in imaging/protocols.tsv, 0 custom, 1..3 fluoro low/normal/high, 4, 5 cine "
     "15/30, 6 DSA, more in docs/protocols.md"},
    {"drc", XT_PARAM_INT, P(drc), 0, 0, 1, "", "dose-rate control: kV, pulse width and mA set each frame (1) or fixed (0)"},
    {"drc_target_ngy", XT_PARAM_REAL, P(drc_target_ngy), 40, 1, 100000, "nGy", "requested detector dose per frame"},
    {"drc_kv_max", XT_PARAM_REAL, P(drc_kv_max), 110, 70, XT_KV_MAX, "kV", "highest kV of the dose control curve"},
    {"drc_max_step", XT_PARAM_REAL, P(drc_max_step), 2.0, 1.05, 10, "",
     "largest factor by which the loop changes the detector dose in one frame"},
    {"dsa", XT_PARAM_INT, P(dsa), 0, 0, 1, "",
     "digital subtraction (1): processed = log image minus the mask frame's (the first after switching on)"},
    {"scatter", XT_PARAM_INT, P(scatter), 0, 0, 1, "", "scatter kernel model on (1) or off (0)"},
    {"scatter_sigma_mm", XT_PARAM_REAL, P(scatter_sigma_mm), 50, 5, 300, "mm",
     "sigma of the broad scatter kernel at the detector"},
    /* spr_200, spr_exp: [U], not fitted to a published table (none was reachable); the closest
     * citable figures - "Simulation of scatter in cone-beam CT: effects on projection image quality"
     * (Monte Carlo): ~5 for large water phantoms, wide beams, 120 kV; Siewerdsen & Jaffray, Med. Phys.
     * 28:220 (2001): > 1 for a pelvis at 6 degrees -
     * and the test holding the model to them: docs/imaging.md section 11 */
    {"spr_200", XT_PARAM_REAL, P(spr_200), 4.0, 0, 50, "",
     "scatter-to-primary ratio behind 200 mm of water, broad beam, grid out"},
    {"spr_exp", XT_PARAM_REAL, P(spr_exp), 1.4, 0.5, 3, "", "SPR(t) = spr_200 (t / 200 mm)^spr_exp"},
    {"grid_ts", XT_PARAM_REAL, P(grid_ts), 0.15, 0, 1, "", "the grid's scatter transmission"},
    /* backend */
    {"cpu_exact", XT_PARAM_INT, P(cpu_exact), 0, 0, 1, "",
     "CPU backend: material channels by the exact float64 reference projector (1) or the fast march (0, "
     "within 1e-5 rel L2 of it)"},
};
#define NTAB ((int)(sizeof tab / sizeof tab[0]))

int xt_chain_param_count(void) { return NTAB; }
const xt_chain_param_info *xt_chain_param_at(int i) { return i >= 0 && i < NTAB ? &tab[i] : NULL; }

const xt_chain_param_info *xt_chain_param_find(const char *name) {
  for (int i = 0; name && i < NTAB; i++)
    if (strcmp(tab[i].name, name) == 0) return &tab[i];
  return NULL;
}

double xt_chain_param_get(const xt_chain_params *p, const xt_chain_param_info *in) {
  const char *b = (const char *)p + in->offset;
  switch (in->type) {
  case XT_PARAM_REAL: return *(const double *)b;
  case XT_PARAM_INT: return *(const int *)b;
  case XT_PARAM_U64: return (double)*(const uint64_t *)b;
  }
  return NAN;
}

static int put(xt_chain_params *p, const xt_chain_param_info *in, double v, xt_msg *msg) {
  if (!isfinite(v)) return xt_fail(msg, XT_ERANGE, "chain.%s: not a finite number", in->name);
  if (v < in->lo || v > in->hi) return xt_fail(msg, XT_ERANGE, "chain.%s: %g outside [%g, %g]", in->name, v, in->lo, in->hi);
  if (in->type != XT_PARAM_REAL && v != floor(v))
    return xt_fail(msg, XT_ERANGE, "chain.%s: %g is not a whole number", in->name, v);
  char *b = (char *)p + in->offset;
  switch (in->type) {
  case XT_PARAM_REAL: *(double *)b = v; break;
  case XT_PARAM_INT: *(int *)b = (int)v; break;
  case XT_PARAM_U64: *(uint64_t *)b = (uint64_t)v; break;
  }
  return 0;
}

int xt_chain_param_set(xt_chain_params *p, const char *name, double value, xt_msg *msg) {
  const xt_chain_param_info *in = xt_chain_param_find(name);
  if (!in) return xt_fail(msg, XT_EINVAL, "chain.%s: unknown parameter", name ? name : "(null)");
  return put(p, in, value, msg);
}

xt_chain_params xt_chain_params_default(void) {
  xt_chain_params p;
  memset(&p, 0, sizeof p);
  for (int i = 0; i < NTAB; i++) put(&p, &tab[i], tab[i].def, NULL); /* defaults obey their ranges */
  return p;
}

int xt_chain_params_validate(const xt_chain_params *p, xt_msg *msg) {
  for (int i = 0; i < NTAB; i++) {
    const double v = xt_chain_param_get(p, &tab[i]);
    xt_chain_params tmp = *p;
    int rc = put(&tmp, &tab[i], v, msg);
    if (rc) return rc;
  }
  if (p->protocol >= xt_protocol_count())
    return xt_fail(msg, XT_ERANGE, "chain.protocol: %d is not a protocol (0..%d)", p->protocol, xt_protocol_count() - 1);
  const double lag = p->lag_frac[0] + p->lag_frac[1] + p->lag_frac[2];
  if (p->window > 0 && p->window < 0.01)
    return xt_fail(msg, XT_ERANGE, "chain.window: %g: 0 (automatic) or 0.01 .. 100 attenuation units", p->window);
  if (lag >= 0.9) return xt_fail(msg, XT_ERANGE, "chain.lag_frac_*: fractions sum to %g; they must stay below 0.9", lag);
  xt_tube t = {p->kv, p->anode_deg, p->inherent_al_mm, p->filter_al_mm, p->filter_cu_mm};
  return xt_tube_validate(&t, msg);
}
