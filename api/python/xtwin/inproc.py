"""xtwin in process: the C library in this Python process (issue 30), beside the server client.

    from xtwin import inproc
    scene = inproc.Scene()                                   # backend="cuda" on a GPU build
    scene.add_volume(ct_hu, kind="hu", affine=ijk_to_lps)    # numpy [i, j, k]
    frames = scene.render(poses=inproc.poses(primary=[0, 30, 60]), mode="fd20-256")  # (3, 256, 256) float32

    # the differentiable operator (torch.autograd), gradients for the volume and the six pose parameters
    img = inproc.project_torch(mu, pose6, affine, mode="fd20-128")

The extension module is xtwin._core (pymod/, built by CMake into <build>/python/xtwin/); this file
adds what is easier in Python: pose arrays, other tools' camera conventions (docs/geometry.md,
"Other tools' conventions"), the torch.autograd.Function, and DLPack objects. Errors are the
client's classes (xtwin.errors: InvalidRequest, OutOfRange, NotFound, ...), message the library's
one line. docs/python-inprocess.md is the manual.
"""
import numpy as np

try:
    from . import _core
except ImportError as e:  # the client's sources alone (api/python), without the built module beside them
    raise ImportError("xtwin.inproc needs the extension xtwin._core, which CMake builds into <build>/python/xtwin/: "
                      "PYTHONPATH=<build>/python, or cmake --install (docs/python-inprocess.md); %s" % e) from e
from ._core import Scene, back_project, bolus_mg_ml, geometry, modes, pose_grad, project  # noqa: F401,E402

__all__ = ["Scene", "poses", "project", "back_project", "pose_grad", "geometry", "modes", "P_from_deepdrr",
           "P_from_diffdrr", "P_to_edge", "P_from_edge", "DLPackFrames", "render_dlpack", "project_torch",
           "POSE_PARAMS", "cuda_available"]

#: The six pose parameters of the gradients, in order (degrees, then millimetres).
POSE_PARAMS = ("primary_deg", "secondary_deg", "detector_rot_deg", "table_x_mm", "table_y_mm", "table_z_mm")

_T = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]])


def cuda_available():
    """True when this build has the CUDA backend and a usable device."""
    return bool(_core.cuda)


def poses(primary=0.0, secondary=0.0, detector_rot=0.0, table=(0.0, 0.0, 0.0), sod=None, sid=None):
    """An (n, 6) pose array (or (n, 8) with sod and sid) from scalars or sequences, broadcast.

    Columns: primary_deg (LAO +), secondary_deg (CRAN +), detector_rot_deg, table x, y, z (mm,
    patient LPS: world = patient + table). docs/geometry.md states the conventions."""
    table = np.asarray(table, dtype=float)
    cols = [np.asarray(primary, float), np.asarray(secondary, float), np.asarray(detector_rot, float)]
    if table.ndim == 1:
        cols += [table[0], table[1], table[2]]
    else:
        cols += [table[:, 0], table[:, 1], table[:, 2]]
    if sod is not None or sid is not None:
        if sod is None or sid is None:
            raise ValueError("poses: give sod and sid together")
        cols += [np.asarray(sod, float), np.asarray(sid, float)]
    b = np.broadcast_arrays(*cols)
    return np.ascontiguousarray(np.stack([np.atleast_1d(x) for x in b], axis=-1).reshape(-1, len(cols)))


def P_to_edge(P):
    """xtwin's P (pixel centres at integers) -> the pixel-edge P of DeepDRR and DiffDRR: T P."""
    return np.einsum("ij,...jk->...ik", _T, np.asarray(P, float))


def P_from_edge(P_edge):
    """The pixel-edge P of DeepDRR / DiffDRR -> xtwin's: T^-1 P_edge."""
    return np.einsum("ij,...jk->...ik", np.linalg.inv(_T), np.asarray(P_edge, float))


def P_from_deepdrr(intrinsic, camera3d_from_world):
    """DeepDRR's camera (CameraIntrinsicTransform's 3x3 K, pixel edges, and the 4x4 extrinsic
    camera3d_from_world of its world frame) -> xtwin's P, pixel centres: T^-1 K [I | 0] E.

    Render with the volume placed in the same world frame (the affine DeepDRR's Volume has,
    world_from_ijk) and size=(cols, rows), sid_mm = its source-to-detector distance."""
    K = np.asarray(intrinsic, float)
    E = np.asarray(camera3d_from_world, float)
    if K.shape[-2:] != (3, 3) or E.shape[-2:] != (4, 4):
        raise ValueError("P_from_deepdrr: intrinsic 3x3 and camera3d_from_world 4x4")
    return P_from_edge(K @ E[..., :3, :])


def P_from_diffdrr(extrinsic, sdd, height, width, delx, dely=None, x0=0.0, y0=0.0, reorient=None):
    """DiffDRR's detector (diffdrr/detector.py, commit 11b1f0a) -> xtwin's P for its image's pixels.

    DiffDRR puts the source at its camera origin and the pixel in row i, column j of the image it
    returns at (delx (j - (W-1)/2) - x0, -dely (i - (H-1)/2) - y0, sdd) in the camera frame (its
    target grid: rows along -y, columns along +x, centred; x0, y0 as its Detector's properties), and
    maps camera to world by reorient, then extrinsic (pose = reorient.compose(extrinsic): world =
    E R c). So col w = (sdd/delx) c_x + ((W-1)/2 + x0/delx) c_z, row w = -(sdd/dely) c_y +
    ((H-1)/2 - y0/dely) c_z, w = c_z: depth along the camera axis, mm. extrinsic: 4x4 or (n, 4, 4);
    render with size=(width, height), sid_mm=sdd and the volume's world affine as DiffDRR has it."""
    dely = delx if dely is None else dely
    E = np.asarray(extrinsic, float)
    R = np.eye(4) if reorient is None else np.asarray(reorient, float)
    if E.shape[-2:] != (4, 4) or R.shape != (4, 4):
        raise ValueError("P_from_diffdrr: extrinsic and reorient are 4x4 matrices")
    K = np.array([[sdd / delx, 0.0, (width - 1) / 2.0 + x0 / delx],
                  [0.0, -sdd / dely, (height - 1) / 2.0 - y0 / dely],
                  [0.0, 0.0, 1.0]])
    cam_from_world = np.linalg.inv(E @ R)
    return K @ cam_from_world[..., :3, :]


class DLPackFrames:
    """A batch of frames exported through DLPack: device memory on a CUDA scene, host memory on a
    CPU one. Hand it to torch.utils.dlpack.from_dlpack (or CuPy's, or numpy's from_dlpack on the
    CPU): the consumer takes the memory without a copy and frees it when its tensor dies. One
    consumer only (a DLPack capsule is consumed once)."""

    def __init__(self, capsule):
        self._capsule = capsule
        info = _core.dlpack_info(capsule)
        self.device = (info["device_type"], info["device_id"])
        self.shape = info["shape"]
        self.strides = info["strides"]

    def __dlpack__(self, stream=None):
        if self._capsule is None:
            raise RuntimeError("DLPackFrames: already consumed")
        cap, self._capsule = self._capsule, None
        return cap

    def __dlpack_device__(self):
        return self.device


def render_dlpack(scene, **geometry):
    """scene.render_dlpack(...) wrapped as a DLPackFrames (the protocol's __dlpack__ and
    __dlpack_device__)."""
    return DLPackFrames(scene.render_dlpack(**geometry))


# ---- torch.autograd -----------------------------------------------------------------------------

_Function = None


def _function():
    global _Function
    if _Function is not None:
        return _Function
    import torch

    class Project(torch.autograd.Function):
        """Line integrals of a float64 mu grid for a batch of poses; gradients w.r.t. the grid
        (back-projection, the exact transpose: xt_adjoint.h) and the pose parameters (the
        analytic derivative of the same traversal)."""

        @staticmethod
        def forward(ctx, mu, pose, affine, mode, threads):
            mu_np = mu.detach().cpu().numpy()
            pose_np = np.ascontiguousarray(pose.detach().cpu().numpy(), dtype=float)
            out = _core.project(mu_np, affine, poses=pose_np, mode=mode, threads=threads)
            ctx.save_for_backward(mu, pose)
            ctx.extra = (affine, mode, threads, mu_np, pose_np)
            return torch.from_numpy(out).to(device=mu.device, dtype=mu.dtype)

        @staticmethod
        def backward(ctx, grad):
            mu, pose = ctx.saved_tensors
            affine, mode, threads, mu_np, pose_np = ctx.extra
            y = np.ascontiguousarray(grad.detach().cpu().numpy(), dtype=float)
            gmu = gpose = None
            if ctx.needs_input_grad[0]:
                g = _core.back_project(y, tuple(mu.shape), affine, poses=pose_np, mode=mode, threads=threads)
                gmu = torch.from_numpy(np.ascontiguousarray(g)).to(device=mu.device, dtype=mu.dtype)
            if ctx.needs_input_grad[1]:
                g6 = _core.pose_grad(mu_np, affine, y, poses=pose_np, mode=mode, threads=threads)
                k = min(pose.shape[-1], 6)
                gp = np.zeros(pose_np.shape)
                gp[:, :k] = g6[:, :k]
                gpose = torch.from_numpy(gp).reshape(pose.shape).to(device=pose.device, dtype=pose.dtype)
            return gmu, gpose, None, None, None

    _Function = Project
    return Project


def project_torch(mu, pose, affine, mode="fd20-256", threads=0):
    """Differentiable line integrals: mu a float64 tensor (nx, ny, nz) indexed [i, j, k] (1/mm),
    pose (n, 3|6|8) (POSE_PARAMS, then sod and sid, held fixed), affine the 4x4 voxel index ->
    patient mm map. Returns (n, rows, cols). Gradients flow to mu and to the first six pose
    columns (per degree, per mm)."""
    if pose.dim() == 1:
        pose = pose.unsqueeze(0)
    return _function().apply(mu, pose, np.asarray(affine, float), mode, threads)
