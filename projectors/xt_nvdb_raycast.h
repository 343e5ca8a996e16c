/* The world -> cell map of a NanoVDB model, shared by the CPU reference (proj_cpu_nvdb.c) and the
 * CUDA kind (proj_nvdb.cu), which must agree on it to the last bit: the same composition as the
 * dense kind's xt_world_to_cell (xt_raycast.h), with cell 0 at the domain's first voxel, so that a
 * grid converted from a volume (domain lo = 0, the volume's own map) gets the volume's map exactly. */
#ifndef XT_NVDB_RAYCAST_H
#define XT_NVDB_RAYCAST_H

#include "xt_geom.h"
#include "xt_model.h"
#include "xt_nvdb.h"

/* Returns 0 if the map is singular. */
static inline int xt_nvdb_world_to_cell(const xt_model *m, const xt_pose *pose, xt_affine *out) {
  xt_affine p2w = xt_geom_patient_to_world(pose);
  xt_affine m2w = xt_aff_compose(&p2w, &m->placement);
  xt_affine i2w = xt_aff_compose(&m2w, &m->nvdb->index_to_model);
  xt_affine w2i;
  if (!xt_aff_invert(&i2w, &w2i)) return 0;
  for (int a = 0; a < 3; a++) w2i.t[a] += 0.5 - (double)m->nvdb->lo[a];
  *out = w2i;
  return 1;
}

#endif /* XT_NVDB_RAYCAST_H */
