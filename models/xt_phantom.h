/* Analytic phantoms: sets of ellipsoids, their exact chord lengths, and their voxelisation.
 *
 * An ellipsoid is {x : |S^-1 R^T (x - c)| <= 1} with S = diag(semi-axes) and R a rotation whose
 * columns are the ellipsoid's axes in the model frame. Dense voxelisation adds the mu of every
 * ellipsoid containing the voxel centre (Shepp-Logan is defined additively); label voxelisation
 * paints the label of the last ellipsoid containing the centre. */
#ifndef XT_PHANTOM_H
#define XT_PHANTOM_H

#include "xt_model.h"

typedef struct xt_ellipsoid {
  xt_vec3 center;  /* mm, model frame */
  xt_vec3 semi;    /* semi-axes along R's columns, mm */
  double R[3][3];  /* rotation, row-major; columns are the axes */
  double mu;       /* additive attenuation, 1/mm (dense) */
  int label;       /* material index painted (labels) */
} xt_ellipsoid;

#define XT_PHANTOM_MAX_ELLIPSOIDS 64

typedef struct xt_phantom {
  char name[64];
  int count;
  xt_ellipsoid e[XT_PHANTOM_MAX_ELLIPSOIDS];
} xt_phantom;

/* An axis-aligned-then-rotated ellipsoid: rotation phi about z, then theta about x (degrees). */
xt_ellipsoid xt_ellipsoid_make(xt_vec3 center, xt_vec3 semi, double phi_deg, double theta_deg, double mu, int label);

/* Kak & Slaney's 3D Shepp-Logan head, in the default material table's mu at energy_kev:
 * the phantom's unit length is scale_mm (100 mm gives a 138 x 184 x 180 mm head), its additive
 * densities are multiples of soft tissue's mu, and each ellipsoid carries a material label. */
int xt_phantom_shepp_logan(double scale_mm, const xt_material_table *mt, xt_phantom *out, xt_msg *msg);

/* Exact length, in mm, of the part of segment a->b inside the ellipsoid. */
double xt_ellipsoid_chord(const xt_ellipsoid *e, xt_vec3 a, xt_vec3 b);
/* Exact line integral of the phantom's dense (additive) mu along a->b. */
double xt_phantom_line_integral(const xt_phantom *p, xt_vec3 a, xt_vec3 b);
/* 1 when x is inside (or on) the ellipsoid. */
int xt_ellipsoid_contains(const xt_ellipsoid *e, xt_vec3 x);

/* Voxelises at centre samples on a grid of dim voxels of spacing mm centred on the model origin.
 * type XT_VOXEL_F32 gives additive mu; XT_VOXEL_U8 gives painted labels with a copy of mt
 * (mt is required for labels, ignored for dense). */
int xt_phantom_voxelize(const xt_phantom *p, const int dim[3], const double spacing[3], int type,
                        const xt_material_table *mt, xt_volume **out, xt_msg *msg);

/* The built-in head as a model: Shepp-Logan at 100 mm scale, 1 mm voxels over 256^3 (or the
 * given dims), dense or labels with the default table at XT_DEFAULT_ENERGY_KEV. */
int xt_phantom_head_model(const int dim[3], double spacing_mm, int type, xt_model **out, xt_msg *msg);

/* A rectangular slab of one basis material (models/xt_basis.h: "pmma", "water", ...) at a density
 * (g/cm^3): size_mm[0] x [1] x [2] along the model's x, y, z, centred on the model origin, as a label
 * volume of voxel_mm voxels (each side a whole number of them, so the faces are exact). Issue 24's
 * reference air kerma phantom is 400 x 300 x 200 mm of PMMA at 1.19 g/cm^3 (IFU-p312). */
int xt_phantom_slab_model(const char *material, double density, const double size_mm[3], double voxel_mm,
                          xt_model **out, xt_msg *msg);

/* The built-in patient (issue 26; models/xt_phantom_thorax.c): an adult thorax as a label volume of
 * voxel_mm voxels (1.25 mm for the server) over 360 x 260 x 360 mm - body, lungs, trachea and bronchi,
 * heart with blood-filled chambers, aorta with its arch branches, pulmonary trunk, venae cavae and
 * coronary arteries (label "blood": the regions contrast will fill), vertebrae, ribs, sternum,
 * clavicles, scapulae, stomach gas - named "thorax", its own table: labels XT_THORAX_* below. Model
 * frame = patient LPS, the heart at the origin. */
enum {
  XT_THORAX_AIR = 0,
  XT_THORAX_SOFT,
  XT_THORAX_LUNG,
  XT_THORAX_SPONGY_BONE,
  XT_THORAX_BONE,
  /* blood, one label per region contrast may fill: */
  XT_THORAX_HEART,
  XT_THORAX_AORTA, /* and its arch branches */
  XT_THORAX_PULMONARY,
  XT_THORAX_VEINS, /* the venae cavae */
  XT_THORAX_CORONARY,
  XT_THORAX_LABELS
};
int xt_phantom_thorax_model(double voxel_mm, xt_model **out, xt_msg *msg);
/* The contrast region of thorax label l ("heart", "aorta", "pulmonary", "veins", "coronary"; the
 * blood labels, flagged in the table's contrast[]), or NULL for a label that takes no contrast. */
const char *xt_phantom_thorax_region(int label);
/* The centreline of the thorax's guidewire (tip first, 1 mm steps, in the thorax's model frame):
 * up the descending aorta, over the arch, the tip in the ascending aorta. At most cap points;
 * returns the count. */
int xt_phantom_thorax_wire(double *pts, int cap);
/* That wire as an instrument model "guidewire" in blood, capacity max_points: a 0.035-inch (0.89 mm)
 * stainless-steel wire with a 30 mm platinum coil tip (xt_instr_guidewire's sections, that radius). */
int xt_phantom_thorax_wire_model(int max_points, xt_model **out, xt_msg *msg);

#endif /* XT_PHANTOM_H */
