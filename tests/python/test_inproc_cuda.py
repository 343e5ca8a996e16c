#!/usr/bin/python3
"""xtwin in process on the GPU (issue 30, point 2 and 3): label gpu, run by scripts/gpu-check.

    /usr/bin/python3 tests/python/test_inproc_cuda.py --python <build>/python [-v]

Batches rendered into device memory and exported through DLPack: the capsule's device, shape,
strides and lifetime, read by a consumer of our own (xtwin._core.dlpack_to_numpy: cudaMemcpy from the
capsule's pointer) and, where a CUDA-built PyTorch is installed, by torch.utils.dlpack without a
copy (the same device pointer); the frames against the CPU reference projector. The CUDA adjoint:
the dot-product test and its agreement with the CPU's. Without a usable device (or the module) it
prints one line "SKIP test_inproc_cuda: <why>" and exits 77.
"""
import argparse
import sys
import unittest

ap = argparse.ArgumentParser()
ap.add_argument("--python", help="the build's python folder (<build>/python)")
ARGS, REST = ap.parse_known_args()
if ARGS.python:
    sys.path.insert(0, ARGS.python)
try:
    import numpy as np
    from xtwin import inproc
except ImportError as e:
    print("SKIP test_inproc_cuda: %s" % e)
    sys.exit(77)
if not inproc.cuda_available():
    print("SKIP test_inproc_cuda: no usable CUDA device (or a build without CUDA)")
    sys.exit(77)

POSES = inproc.poses(primary=[0, 35, -80, 150], secondary=[0, 20, -10, 5], table=(3, -4, 2))


class DLPack(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gpu = inproc.Scene(backend="cuda")
        cls.gpu.add_phantom(dims=(96, 96, 96), spacing_mm=2.0)
        cpu = inproc.Scene(threads=0)
        cpu.add_phantom(dims=(96, 96, 96), spacing_mm=2.0)
        cls.want = cpu.render(poses=POSES, mode="fd20-256")

    def close(self, got):
        np.testing.assert_allclose(got, self.want, rtol=0, atol=2e-4 * float(self.want.max()))

    def test_capsule_device_shape_strides_lifetime(self):
        live = inproc._core.dlpack_live()
        f = inproc.render_dlpack(self.gpu, poses=POSES, mode="fd20-256")
        self.assertEqual(f.__dlpack_device__()[0], 2)  # kDLCUDA
        self.assertEqual(f.shape, (4, 256, 256))
        self.assertEqual(f.strides, (256 * 256, 256, 1))
        self.assertEqual(inproc._core.dlpack_live(), live + 1)
        got = inproc._core.dlpack_to_numpy(f.__dlpack__())  # our consumer: copies, then calls the deleter
        self.assertEqual(inproc._core.dlpack_live(), live)
        self.close(got)
        cap = self.gpu.render_dlpack(poses=POSES, mode="fd20-256")  # never consumed: freed with the capsule
        self.assertEqual(inproc._core.dlpack_live(), live + 1)
        del cap
        self.assertEqual(inproc._core.dlpack_live(), live)

    def test_scene_render_matches(self):
        self.close(self.gpu.render(poses=POSES, mode="fd20-256"))

    def test_torch_takes_it_without_a_copy(self):
        try:
            import torch
            import torch.utils.dlpack as tdl
        except ImportError:
            self.skipTest("no torch")
        if not torch.cuda.is_available():
            self.skipTest("torch without CUDA (Debian's is CPU-only)")
        live = inproc._core.dlpack_live()
        f = inproc.render_dlpack(self.gpu, poses=POSES, mode="fd20-256")
        ptr = inproc._core.dlpack_info(f._capsule)["data"]
        t = tdl.from_dlpack(f)
        self.assertTrue(t.is_cuda)
        self.assertEqual(t.data_ptr(), ptr)
        self.close(t.cpu().numpy())
        del t
        self.assertEqual(inproc._core.dlpack_live(), live)


class Adjoint(unittest.TestCase):
    def test_dot_product_and_cpu(self):
        rng = np.random.default_rng(7)
        x = rng.uniform(-1, 1, (40, 36, 30))
        A = np.array([[4.0, 0.5, 0, -80], [0, 4.5, 0.3, -80], [0.2, 0, 5.0, -75], [0, 0, 0, 1]])
        y = rng.uniform(-1, 1, (4, 128, 128))
        ax = inproc.project(x, A, poses=POSES, mode="fd20-128", backend="cuda")
        aty = inproc.back_project(y, x.shape, A, poses=POSES, mode="fd20-128", backend="cuda")
        lhs, rhs = float((ax * y).sum()), float((x * aty).sum())
        self.assertLessEqual(abs(lhs - rhs), 1e-6 * abs(lhs))
        ax_cpu = inproc.project(x, A, poses=POSES, mode="fd20-128")
        aty_cpu = inproc.back_project(y, x.shape, A, poses=POSES, mode="fd20-128")
        np.testing.assert_allclose(ax, ax_cpu, rtol=0, atol=1e-12 * abs(ax_cpu).max())
        np.testing.assert_allclose(aty, aty_cpu, rtol=0, atol=1e-12 * abs(aty_cpu).max())


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + REST)
