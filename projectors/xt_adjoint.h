/* The voxel line-integral operator A of the CPU reference projector on a grid of double mu, its
 * exact transpose A^T (back-projection) and its derivative with respect to the pose: what a
 * gradient-based user (registration, reconstruction, torch.autograd) needs.
 *
 * A maps a grid x (voxel (i,j,k) at x[i + nx (j + ny k)], 1/mm) to one line integral per pixel,
 * (A x)_p = sum_v len_pv x_v, with len_pv the length (mm) of pixel p's ray (source -> pixel centre,
 * docs/geometry.md) inside voxel v as the reference projector's traversal measures it: the same
 * iterator (xt_voxel_walk.h), so A x equals xt_ref_render_f64 of that grid bit for bit, and A^T y
 * scatters y_p len_pv over the same voxels: <A x, y> = <x, A^T y> up to rounding.
 *
 * The pose derivative is analytic: a ray's integral through cells of constant mu is
 *   L = len * integral_0^1 mu(A + t (B - A)) dt   (A, B: source and pixel in cell space),
 * so dL = L dlen / len - sum over plane crossings of (mu before - mu after) dp_a / q_a, where dp is
 * the velocity of the crossing point, a the plane's axis and q the cell-space direction per mm
 * (docs/python-inprocess.md, "Gradients"). It is exact wherever L is differentiable (everywhere but
 * on the measure-zero set of poses where a ray grazes a voxel edge). The six parameters, in this
 * order: primary_deg, secondary_deg, detector_rot_deg (derivatives per degree), table x, y, z (per
 * mm). */
#ifndef XT_ADJOINT_H
#define XT_ADJOINT_H

#include "xt_geom.h"
#include "xt_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xt_adj_grid {
  int dim[3];
  xt_affine index_to_model; /* voxel centre index -> model mm */
  xt_affine placement;      /* model -> patient */
} xt_adj_grid;

#define XT_ADJ_NPARAM 6

/* The grid of a dense or label model (its dims, index_to_model and placement). */
int xt_adj_grid_of_model(const xt_model *m, xt_adj_grid *out, xt_msg *msg);
/* Checks dims and the map; msg names what is wrong. */
int xt_adj_grid_validate(const xt_adj_grid *grid, xt_msg *msg);

/* out[f][row][col] = (A_f mu) for the n geometries g, all of one detector size (n x rows x cols).
 * threads 0 = all cores. */
int xt_adj_forward(const xt_adj_grid *grid, const double *mu, const xt_geometry *g, int n, double *out, int threads,
                   xt_msg *msg);
/* x = sum_f A_f^T y_f (x overwritten, grid-sized; y laid out as xt_adj_forward's out). The sum is
 * the same for any thread count given (each thread's share fixed by the pixel index). */
int xt_adj_back(const xt_adj_grid *grid, const xt_geometry *g, int n, const double *y, double *x, int threads,
                xt_msg *msg);
/* grad[f][k] = sum_p y_fp dL_fp / d theta_k for the six pose parameters above (n x 6). */
int xt_adj_pose_grad(const xt_adj_grid *grid, const double *mu, const xt_geometry *g, int n, const double *y,
                     double *grad, int threads, xt_msg *msg);

/* The velocity, in patient mm per unit of each pose parameter, of the source and of pixel (c, r)
 * relative to the patient (a table move of +1 mm moves both by -1 mm): the geometry's derivative,
 * which test_adjoint checks against differences of xt_geom_compute. */
void xt_adj_geom_velocity(const xt_geometry *g, double c, double r, xt_vec3 dS[XT_ADJ_NPARAM],
                          xt_vec3 dX[XT_ADJ_NPARAM]);

/* The forward and the transpose on CUDA device `device` (adjoint_voxel.cu), float64, the same rays
 * and traversal, no multiply-add contracted: the forward equals xt_adj_forward's, the transpose its
 * sums up to the order of the atomic additions. Host arrays in and out (copied per call).
 * XT_ENODEV in a build without CUDA or where no device is usable. */
int xt_adj_forward_cuda(const xt_adj_grid *grid, const double *mu, const xt_geometry *g, int n, double *out,
                        int device, xt_msg *msg);
int xt_adj_back_cuda(const xt_adj_grid *grid, const xt_geometry *g, int n, const double *y, double *x, int device,
                     xt_msg *msg);

#ifdef __cplusplus
}
#endif

#endif /* XT_ADJOINT_H */
