/* The world -> cell map of a NanoVDB model, shared by the CPU reference (proj_cpu_nvdb.c) and the
 * CUDA kind (proj_nvdb.cu), which must agree on it to the last bit: the voxel kinds' composition
 * (xt_raycast.h) with cell 0 at the domain's first voxel, so that a grid converted from a volume
 * (domain from 0, the volume's own map) gets the volume's map exactly. */
#ifndef XT_NVDB_RAYCAST_H
#define XT_NVDB_RAYCAST_H

#include "xt_nvdb.h"
#include "xt_raycast.h"

/* Returns 0 if the map is singular. */
static inline int xt_nvdb_world_to_cell(const xt_model *m, const xt_pose *pose, xt_affine *out) {
  const xt_nvdb *g = xt_model_nvdb(m);
  return xt_world_to_cell_of(m, &g->index_to_model, g->lo, pose, out);
}

#endif /* XT_NVDB_RAYCAST_H */
