#!/usr/bin/python3
"""The adjoint and the gradients of xtwin in process (issue 30, point 3), CPU, float64.

    PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_inproc_torch.py [-v]

Oracles: the dot-product test <A x, y> = <x, A^T y> (A and A^T called separately); the float32
projector of a Scene (Scene.render, the acquisition layer's path) for A itself; and
torch.autograd.gradcheck, whose numerical Jacobian is central differences of the forward alone, for
the gradients with respect to the volume (the back-projection) and the six pose parameters (the
analytic derivative). Exit 77 (ctest: skipped) without numpy, torch (Debian's python3-torch) or
the module.
"""
import sys
import unittest

try:
    import numpy as np
    import torch
    from xtwin import inproc
except ImportError as e:
    print("test_inproc_torch skipped: %s (Debian: python3-numpy python3-torch; PYTHONPATH=<build>/python)" % e)
    sys.exit(77)

AFFINE = np.array([[9.0, 1.0, 0.0, -20.0], [0.0, 8.0, 1.0, -15.0], [1.0, 0.0, 10.0, -18.0], [0.0, 0.0, 0.0, 1.0]])
MODE = {"cols": 9, "rows": 7, "pitch_mm": 10.0}
POSES = [[10.0, 5.0, 3.0, 1.0, -2.0, 3.0], [-40.0, 20.0, -7.0, 0.0, 4.0, -1.0], [95.0, -30.0, 0.0, 2.5, 0.0, 0.0]]


class Adjoint(unittest.TestCase):
    def test_dot_product(self):
        rng = np.random.default_rng(5)
        x = rng.uniform(-1, 1, (12, 10, 8))
        y = rng.uniform(-1, 1, (3, 7, 9))
        ax = inproc.project(x, AFFINE, poses=POSES, mode=MODE, threads=2)
        aty = inproc.back_project(y, x.shape, AFFINE, poses=POSES, mode=MODE, threads=2)
        lhs, rhs = float((ax * y).sum()), float((x * aty).sum())
        self.assertGreater(np.count_nonzero(ax), ax.size // 2)  # the rays see the grid
        self.assertLessEqual(abs(lhs - rhs), 1e-6 * abs(lhs))
        # and in the raw-P geometry the same
        P = inproc.geometry(poses=POSES, mode=MODE)
        ax2 = inproc.project(x, AFFINE, P=P, size=(9, 7), sid_mm=1195.0)
        aty2 = inproc.back_project(y, x.shape, AFFINE, P=P, size=(9, 7), sid_mm=1195.0)
        self.assertLessEqual(abs(float((ax2 * y).sum()) - float((x * aty2).sum())), 1e-6 * abs(float((ax2 * y).sum())))

    def test_forward_is_the_scene_projector(self):
        s = inproc.Scene(threads=2)
        s.add_phantom(dims=(40, 40, 40), spacing_mm=5.0)
        mu, A = s.grid(0)
        p = inproc.poses(primary=[20, -70], secondary=[5, 25], table=(4, -3, 2))
        want = s.render(poses=p, mode="fd20-128")
        got = inproc.project(mu, A, poses=p, mode="fd20-128")
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)

    def test_errors(self):
        import xtwin
        with self.assertRaises(xtwin.InvalidRequest):
            inproc.back_project(np.zeros((2, 7, 9)), (4, 4, 4), AFFINE, poses=POSES, mode=MODE)  # 3 poses, 2 frames
        with self.assertRaises(xtwin.InvalidRequest):
            inproc.project(np.zeros((4, 4, 4)), np.zeros((4, 4)), poses=POSES, mode=MODE)  # singular affine
        with self.assertRaises(xtwin.Unsupported):
            inproc.pose_grad(np.zeros((4, 4, 4)), AFFINE, np.zeros((1, 7, 9)), P=np.eye(3, 4), size=(9, 7))


class Autograd(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(1)
        self.mu = torch.tensor(rng.uniform(0, 0.05, (6, 5, 4)), dtype=torch.float64, requires_grad=True)
        self.pose = torch.tensor(POSES, dtype=torch.float64, requires_grad=True)

    def f(self, mu, pose):
        return inproc.project_torch(mu, pose, AFFINE, mode=MODE, threads=2)

    def test_gradcheck_volume_and_pose(self):
        self.assertTrue(torch.autograd.gradcheck(self.f, (self.mu, self.pose), eps=1e-6, atol=1e-7, rtol=1e-5))

    def test_gradcheck_angles_only(self):
        pose3 = self.pose.detach()[:, :3].clone().requires_grad_(True)
        self.assertTrue(torch.autograd.gradcheck(lambda p: self.f(self.mu.detach(), p), (pose3,), eps=1e-6, atol=1e-7,
                                                 rtol=1e-5))

    def test_pose_gradient_moves_towards_the_target(self):
        # one step down the gradient of a registration loss lowers it (the sign and the scale)
        target = self.f(self.mu.detach(), self.pose.detach())
        start = (self.pose.detach() + torch.tensor([2.0, -1.5, 1.0, 1.0, -1.0, 0.5])).requires_grad_(True)
        loss = ((self.f(self.mu.detach(), start) - target) ** 2).sum()
        loss.backward()
        step = start.detach() - 1e-3 * start.grad / start.grad.norm()
        self.assertLess(float(((self.f(self.mu.detach(), step) - target) ** 2).sum()), float(loss))


if __name__ == "__main__":
    unittest.main()
