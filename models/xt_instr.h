/* Instruments (issue 26): thin devices - guidewires, catheters - as a model kind.
 *
 * An instrument is a *device* and a *shape*. The device is fixed when the model is made: its
 * sections from the distal tip back (each a length along the device, an outer and an inner radius,
 * the wall's material and the lumen's), a material table, the medium it lies in, and the most
 * centreline points a shape may have (the capacity every buffer is sized for once). The shape is
 * the centreline, tip first, in the model frame (mm): the sections are laid along it by arc length
 * from the tip, split where a section ends inside a segment, and whatever of the device lies
 * beyond the last point is outside the patient and not rendered. A new shape (over REST or the
 * stream, at frame rate) replaces the centreline only.
 *
 * Each straight piece is a tube segment cut by the mitre planes of its joints (xt_tube.h), so the
 * line integral is a closed form per segment. Instruments *add* to the scene as the other kinds
 * do, with the medium's mu subtracted from the wall's and the lumen's: a wire in a vessel replaces
 * the blood it occupies (exact when the instrument lies wholly inside its medium; medium "air" is
 * outside any patient). Joints turn at most XT_INSTR_MAX_BEND_DEG, and each segment is long enough
 * for its mitres not to cross inside the tube; a shape that is not is refused.
 *
 * Bounding boxes over runs of consecutive segments (8 per box, then 8 boxes per box, ...) let a
 * ray skip the parts of a long device it does not come near; they are rebuilt with every shape. */
#ifndef XT_INSTR_H
#define XT_INSTR_H

#include <stdint.h>

#include "xt_model.h"
#include "xt_tube.h"

extern const struct xt_model_kind_ops xt_model_kind_instr;
#define XT_MODEL_INSTR (&xt_model_kind_instr)

#define XT_INSTR_MAX_SECTIONS 16
#define XT_INSTR_MAX_POINTS 65536
#define XT_INSTR_MAX_BEND_DEG 60.0
#define XT_INSTR_FANOUT 8
#define XT_INSTR_MAX_LEVELS 8
/* Sub-rays per pixel side of the pixel-area integral (docs/instruments.md, "Thinner than a pixel"). */
#define XT_INSTR_AREA_SAMPLES 8

typedef struct xt_instr_section {
  double length_mm;     /* along the device; <= 0 on the last section: to the proximal end */
  double r_out, r_in;   /* mm; r_in 0 = solid, else 0 < r_in < r_out */
  int wall, lumen;      /* ids into the device's material table; lumen ignored when solid */
} xt_instr_section;

typedef struct xt_instr_device {
  int nsections;
  xt_instr_section sec[XT_INSTR_MAX_SECTIONS];
  int medium;           /* the table id of what the instrument displaces */
  int max_points;       /* capacity of a shape, 2..XT_INSTR_MAX_POINTS */
  xt_material_table mt; /* at mt.energy_kev (XT_DEFAULT_ENERGY_KEV) */
} xt_instr_device;

/* A box over a run of segments (or of boxes), model mm. */
typedef struct xt_instr_box {
  double lo[3], hi[3];
} xt_instr_box;

/* Whether the ray o + s d, s in [0, len] (model mm, d a unit direction), meets box b grown by e on
 * every side: the slab test the CPU reference culls with (and the bench mirrors). */
int xt_instr_box_hit(const xt_instr_box *b, const double o[3], const double d[3], double len, double e);

/* The rendered form of one shape: segments and the box levels above them, in buffers of the
 * device's capacity (allocated once by xt_instr_geom_alloc). Level 0 boxes hold FANOUT segments
 * each, level k+1 boxes FANOUT boxes of level k; the last level has one box. */
typedef struct xt_instr_geom {
  int cap_seg, cap_box;
  int nseg;
  xt_tube_seg *seg;
  int nlevels;
  int level_off[XT_INSTR_MAX_LEVELS], level_n[XT_INSTR_MAX_LEVELS];
  xt_instr_box *box;
  double length_mm; /* of the device inside the shape */
} xt_instr_geom;

typedef struct xt_instr {
  xt_instr_device dev;
  int npoints;
  double *points; /* the model's own shape: npoints x 3, capacity dev.max_points */
  xt_instr_geom geom;
} xt_instr;

static inline xt_instr *xt_model_instr(const xt_model *m) {
  return m->kind == XT_MODEL_INSTR ? (xt_instr *)m->payload : NULL;
}

/* Adds material `name` to the device's table (a default material, an instrument material -
 * "nitinol", "stainless_steel", "platinum", "catheter_polymer", "catheter_polymer_w" - or a basis
 * material at its own density), or finds it there; *id gets its index. */
int xt_instr_material(xt_instr_device *dev, const char *name, int *id, xt_msg *msg);
/* An empty device: table at XT_DEFAULT_ENERGY_KEV, medium `medium` (a material name). */
int xt_instr_device_init(xt_instr_device *dev, const char *medium, int max_points, xt_msg *msg);
/* Checks the sections and ids; msg names `what` and the section. */
int xt_instr_device_check(const xt_instr_device *dev, const char *what, xt_msg *msg);

/* Buffers for shapes of up to dev->max_points points (never re-sized). */
int xt_instr_geom_alloc(const xt_instr_device *dev, xt_instr_geom *g, xt_msg *msg);
void xt_instr_geom_free(xt_instr_geom *g);
/* Lays the device along the centreline pts (n x 3, tip first) into g: segments, mitres, boxes.
 * Points closer than 1e-9 mm to the previous are skipped. XT_EINVAL, naming `what` and the point,
 * for non-finite points, fewer than 2 distinct points, more than the capacity, a joint bending more
 * than XT_INSTR_MAX_BEND_DEG or a segment too short for its mitres. g is unchanged on failure. */
int xt_instr_geom_build(const xt_instr_device *dev, const double *pts, int n, const char *what, xt_instr_geom *g,
                        xt_msg *msg);

/* The box of one segment (every box above holds those of its segments). */
void xt_instr_seg_box(const xt_tube_seg *t, xt_instr_box *b);

/* A model of the device (copied) with the shape pts (n x 3); name as every model's. */
int xt_model_from_instr(const xt_instr_device *dev, const double *pts, int n, const char *name, xt_model **out,
                        xt_msg *msg);
/* Replaces the model's own shape (what a projector copies at add_model). */
int xt_instr_set_shape(xt_model *m, const double *pts, int n, xt_msg *msg);

/* Makes the instrument's lumen a contrast region (issue 26, docs/contrast.md "An instrument's
 * lumen"): every hollow section whose lumen holds the medium (the channel a catheter injects
 * through) gets a table entry of its own - the medium's material under the medium's name, same mu,
 * flagged contrast[] - so iodine can be put into the lumen and not into the medium it displaces (the
 * medium's entry stays unflagged). Without iodine the lumen still equals the medium bit for bit.
 * *id (may be NULL) gets the entry. XT_EINVAL when no hollow section has such a lumen; a second call
 * finds the entry it made. */
int xt_instr_lumen_region(xt_instr_device *dev, int *id, xt_msg *msg);
/* The device's lumen region's table entry, -1 when it has none. */
int xt_instr_lumen_id(const xt_instr_device *dev);

/* Two ready-made devices, for the phantom, tests and benchmarks: a 0.014-inch guidewire (0.36 mm,
 * nitinol core, a 30 mm platinum coil tip) and a 5 F catheter (1.67 mm outside, 1.1 mm lumen of
 * the medium, tungsten-loaded polymer shaft, a 1 mm platinum marker band 2 mm from its tip). */
int xt_instr_guidewire(xt_instr_device *dev, const char *medium, int max_points, xt_msg *msg);
int xt_instr_catheter(xt_instr_device *dev, const char *medium, int max_points, xt_msg *msg);

#endif /* XT_INSTR_H */
