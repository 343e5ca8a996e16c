/* Material channels: the projectors' multi-channel output that the polychromatic chain integrates.
 *
 * A channel is the areal density (g/cm^2) along the ray of one basis material (models/xt_basis.h)
 * of the scene's channel set. The set is the union of the models' basis materials in the order the
 * models were added (at most XT_MAX_CHANNELS). Every model kind states how it feeds the set:
 *  - label volumes: each label is one or two basis parts at partial densities (xt_material_basis),
 *    so a voxel adds density x path length to its parts' channels (iodine contrast feeds blood and
 *    iodine);
 *  - dense mu volumes (CT in mu or HU): as DeepDRR does, each voxel is classed by its HU into air
 *    (HU < -800), soft tissue (-800 <= HU < 350) or bone (HU >= 350) and its density is taken as
 *    mu / (mu/rho)_class at the volume's energy (xt_volume.energy_kev), so the channels reproduce
 *    the volume's own line integral at that energy; iodine cannot be told from HU and comes from a
 *    label model (a vessel mask) instead;
 *  - NanoVDB grids: label grids as label volumes (their own table), mu grids as dense volumes (HU
 *    classes at the grid's energy, xt_nvdb.energy_kev), through the same map (xt_voxel_chan);
 *  - Gaussian mixtures: each Gaussian is one material. With labels (the native .xgmm), label l is
 *    entry l of the default material table, and its optical depth tau (the Gaussian's line
 *    integral of mu) becomes the path tau / mu_l(E0) through that material: density x path per
 *    basis part, mu_l = sum_parts (mu/rho) rho at E0 = XT_DEFAULT_ENERGY_KEV (the energy the
 *    mixtures' mu are taken at; mixtures carry none of their own). Without labels (the thesis .gmm,
 *    fits of mu volumes) the whole mixture is soft tissue: A = tau / (mu/rho)_soft(E0).
 * The monochromatic line integral at any energy E0 is sum_m (mu/rho)_m(E0) A_m; at the tables'
 * own energy it equals the mono render to float rounding (tests/test_channels.c). */
#ifndef XT_CHANNELS_H
#define XT_CHANNELS_H

#include "xt_basis.h"
#include "xt_model.h"

#define XT_MAX_CHANNELS 8

/* DeepDRR's HU classes for dense volumes. */
#define XT_DENSE_AIR_BELOW_HU -800.0
#define XT_DENSE_BONE_FROM_HU 350.0

typedef struct xt_chanset {
  int n;
  int basis[XT_MAX_CHANNELS]; /* xt_basis_id of channel c */
} xt_chanset;

/* The channel of basis material b in the set, or -1. */
int xt_chanset_find(const xt_chanset *cs, int b);
/* Adds the basis materials model m uses to the set (those not yet in it), in order. XT_ETOOLARGE
 * when the set would exceed XT_MAX_CHANNELS; XT_EUNSUPPORTED for a kind without channels. */
int xt_chanset_add_model(xt_chanset *cs, const xt_model *m, xt_msg *msg);
/* "soft_tissue,bone,..." into buf. */
void xt_chanset_names(const xt_chanset *cs, char *buf, size_t len);

/* How one voxel model's voxels feed the channels of a set. Host form; the CUDA kind uploads it. */
typedef struct xt_voxel_chan {
  int labels;
  /* labels: g/cm^2 of channel c per mm of path through label l: w[l][c] */
  float w[256][XT_MAX_CHANNELS];
  /* dense: class boundaries in mu (1/mm), air < thr[0] <= soft < thr[1] <= bone, and g/cm^2 of
   * channel c per unit of mu x mm (optical depth) in class k: cw[k][c] = [c = channel of k] / (mu/rho)_k */
  float thr[2];
  float cw[3][XT_MAX_CHANNELS];
} xt_voxel_chan;

/* The class (0 air, 1 soft tissue, 2 bone) of a dense voxel of mu, whose optical depth feeds row
 * cw[class]: one rule for the references, the CUDA kinds' background rows and their marches. */
static inline int xt_voxel_chan_class(const xt_voxel_chan *ch, float mu) {
  return mu < ch->thr[0] ? 0 : (mu < ch->thr[1] ? 1 : 2);
}

/* Builds the map of voxel model m (dense or labels, or a NanoVDB grid of mu or labels) onto the set cs, which must hold m's materials. */
int xt_voxel_chan_build(const xt_chanset *cs, const xt_model *m, xt_voxel_chan *out, xt_msg *msg);

/* How a mixture's Gaussians feed the channels of a set: g/cm^2 of channel c per unit of optical
 * depth of a Gaussian of label l, w[l][c] (row 0 for every Gaussian of a mixture without labels).
 * Host form; the CUDA kind uploads the rows per Gaussian. */
typedef struct xt_gmm_chan {
  int labels;
  float w[256][XT_MAX_CHANNELS];
} xt_gmm_chan;

int xt_gmm_chan_build(const xt_chanset *cs, const xt_model *m, xt_gmm_chan *out, xt_msg *msg);

/* Contrast (issue 26, docs/contrast.md): a label volume's labels with iodine added, as a projector
 * renders them. Label l's composition is its own parts plus iodine at the partial density rho[l]
 * (g/cm^3; 10 mg/mL = 0.010): the mono table mu[l] = table mu[l] + (mu/rho)_I(E) rho[l] / 10 (1/mm,
 * E the table's energy), and the iodine channel's weight col[l] = (own iodine + rho[l]) / 10 (g/cm^2
 * per mm; ci the iodine channel, -1 without a channel set). With rho = 0 both equal the model's own
 * (xt_voxel_chan_build's column) bit for bit. Built once per change on the host, for every backend. */
typedef struct xt_iodine_tab {
  int ci;
  float mu[256];
  float col[256];
  /* a labelled mixture's regions (its Gaussians carry their own mu): each label's optical depth is
   * scaled by scale[l] = (mu_l + (mu/rho)_I rho[l] / 10) / mu_l (1 exactly without iodine), its
   * channel rows divided by it and its iodine weight per unit of the scaled depth wio[l] =
   * col[l] / (mu_l scale[l]); 1 and 0 for other kinds */
  double scale[256];
  float wio[256];
} xt_iodine_tab;

/* XT_EINVAL naming the model and label for a negative or non-finite rho, or iodine on a label whose
 * table entry has contrast[l] == 0 (its channel set need not hold iodine); XT_EUNSUPPORTED for a
 * model that is no label volume. An instrument's table is read the same way: its lumen region's
 * entry (xt_instr_lumen_region) takes the iodine. cs may be NULL (mono only). */
int xt_iodine_tab_build(const xt_chanset *cs, const xt_model *m, const double *rho, xt_iodine_tab *out, xt_msg *msg);

/* An instrument's lumen under io (docs/contrast.md, "An instrument's lumen"): *id gets the device's
 * lumen region's table entry (xt_instr_lumen_id; -1: none, *mu then 0) and *mu its mono mu less the
 * medium's, (double)io->mu[id] - (double)mu[medium], as xt_instr_geom_build forms a segment's
 * mu_lumen and the CPU reference's seg_integral reads it: every other entry keeps the device's own
 * float (XT_EINVAL naming the entry otherwise), so the pair (xt_tube_mu_lumen) is all a frame needs
 * of io's mono table. */
struct xt_instr_device; /* xt_instr.h */
int xt_iodine_instr_lumen(const struct xt_instr_device *dev, const xt_iodine_tab *io, int *id, double *mu, xt_msg *msg);

/* mu/rho (cm^2/g) of every channel of cs at energy e_kev: the line integral is sum_c mr[c] A[c]. */
int xt_chanset_mass_atten(const xt_chanset *cs, double e_kev, double mr[XT_MAX_CHANNELS], xt_msg *msg);

#endif /* XT_CHANNELS_H */
