#!/usr/bin/python3
"""End-to-end tests of the Gaussian-mixture tools: the R2-Gaussian importer
(tools/r2gaussian_import.py) on pickles this test writes in R2-Gaussian's structure, the files it
writes read back by this test's own parser and by the real `xtwin` (render), a rendered pixel of a
single imported Gaussian against the closed form computed here from the sidecar's geometry,
rejections (one stderr line, no output left), and `xtwin gmm-fit` end to end.

usage: test_gmm_py.py XTWIN_BINARY IMPORTER_PY SCRATCH_DIR
Exit 0 pass, 1 fail, 77 skip (no numpy)."""
import json
import math
import os
import pickle
import random
import shutil
import struct
import subprocess
import sys
import zlib

try:
    import numpy as np
except ImportError:
    print("skip: python3-numpy is not installed")
    sys.exit(77)

XTWIN, IMPORTER, SCRATCH = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("  FAIL:", what)
    return cond


def run(*args):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def fresh(name):
    d = os.path.join(SCRATCH, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def one_line(err):
    return len(err.strip().splitlines()) == 1


# --- R2-Gaussian checkpoints, raw (pre-activation) as its GaussianModel keeps them ------------

def random_mixture(rng, n):
    centre = rng.uniform(-60, 60, (n, 3))
    scale = rng.uniform(0.8, 8.0, (n, 3))
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1)[:, None]
    rho = rng.uniform(0.002, 0.05, n)
    return centre, scale, q, rho


def checkpoint(centre, scale, q, rho, ss, bound, rng):
    """The raw arrays R2-Gaussian would hold for these activated values (frame scaled by ss)."""
    s_norm = scale * ss
    if bound is None:
        raw_s = np.log(s_norm)
    else:
        f = (s_norm - bound[0]) / (bound[1] - bound[0])
        raw_s = np.log(f / (1 - f))
    raw_q = q * rng.uniform(0.5, 3.0, (len(q), 1))  # R2 stores it unnormalised
    return {
        "xyz": (centre * ss).astype(np.float32),
        "density": np.log(np.expm1(rho))[:, None].astype(np.float32),
        "scale": raw_s.astype(np.float32),
        "rotation": raw_q.astype(np.float32),
        "scale_bound": None if bound is None else np.array(bound, dtype=np.float64),
    }


def write_pickle(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def read_xgmm(path):
    """This test's own reader of the native format (docs/models.md)."""
    with open(path, "rb") as f:
        b = f.read()
    assert b[:8] == b"XTGMM\r\n\x1a", "magic"
    version, hb, count, rb, flags, cutoff, unit = struct.unpack_from("<IIQIIdd", b, 8)
    assert (version, hb, rb) == (1, 128, 48) and len(b) == 128 + 48 * count
    layout = b[48:112].rstrip(b"\0").decode()
    crc = struct.unpack_from("<I", b, 112)[0]
    assert crc == zlib.crc32(b[128:], zlib.crc32(b[:112])) & 0xFFFFFFFF, "crc"
    rec = np.frombuffer(b[128:], dtype=np.dtype([("c", "<f4", 3), ("s", "<f4", 3), ("q", "<f4", 4), ("rho", "<f4"),
                                                 ("label", "<u4")]))
    return rec, layout, cutoff, unit


def importer(*args):
    return run(sys.executable if sys.executable else "/usr/bin/python3", IMPORTER, *args)


def test_import_round_trip():
    d = fresh("import")
    rng = np.random.default_rng(7)
    sv = [256.0, 230.0, 180.0]
    ss = 2.0 / max(sv)
    for bound in ([0.0005 * 2, 0.5 * 2], None):
        centre, scale, q, rho = random_mixture(rng, 50)
        ck = os.path.join(d, "point_cloud.pickle")
        write_pickle(ck, checkpoint(centre, scale, q, rho, ss, bound, rng))
        with open(os.path.join(d, "meta_data.json"), "w") as f:
            json.dump({"sVoxel": sv, "nVoxel": [256, 230, 180]}, f)
        out = os.path.join(d, "m.xgmm")
        rc, so, se = importer(ck, out, "--meta", os.path.join(d, "meta_data.json"))
        check(rc == 0, "import (bound %s): rc %d %s" % (bound, rc, se))
        if rc:
            continue
        rec, layout, cutoff, unit = read_xgmm(out)
        check(layout == "centre:f32x3,scale:f32x3,quat_wxyz:f32x4,rho:f32,label:u32" and unit == 1.0 and cutoff == 4.8,
              "header fields")
        check(np.allclose(rec["c"], centre, rtol=1e-5, atol=1e-4), "centres in mm")
        check(np.allclose(rec["s"], scale, rtol=1e-4), "scales in mm (activation %s)" % ("sigmoid" if bound else "exp"))
        check(np.allclose(rec["rho"], rho, rtol=1e-5), "rho (softplus)")
        qq = rec["q"].astype(np.float64)
        same = np.minimum(np.abs(qq - q).max(axis=1), np.abs(qq + q).max(axis=1))  # q and -q: one rotation
        check(same.max() < 1e-5 and np.allclose(np.linalg.norm(qq, axis=1), 1, atol=1e-6), "quaternions normalised")
        check(np.all(rec["label"] == 0xFFFFFFFF), "no labels")
        # the real loader and renderer take it
        rc, so, se = run(XTWIN, "render", "--volume", out, "--mode", "fd20-128", "--threads", "2", "--out",
                         os.path.join(d, "r"))
        check(rc == 0, "xtwin render of the import: %s" % se)
        if rc == 0:
            with open(os.path.join(d, "r.json")) as f:
                side = json.load(f)
            check(side["model"]["kind"] == "gmm" and side["model"]["gaussians"] == 50, "sidecar: kind gmm, 50")
    # --svoxel and --scene-scale give the same file as --meta
    out2, out3 = os.path.join(d, "m2.xgmm"), os.path.join(d, "m3.xgmm")
    check(importer(ck, out2, "--svoxel", "256,230,180")[0] == 0, "--svoxel")
    check(importer(ck, out3, "--scene-scale", repr(ss))[0] == 0, "--scene-scale")
    with open(out, "rb") as a, open(out2, "rb") as b, open(out3, "rb") as c:
        ab, bb, cb = a.read(), b.read(), c.read()
    check(ab == bb == cb, "the three frame options agree")
    # the thesis layout
    outg = os.path.join(d, "m.gmm")
    check(importer(ck, outg, "--svoxel", "256,230,180")[0] == 0, "import to .gmm")
    with open(outg, "rb") as f:
        g = f.read()
    n = struct.unpack_from("<Q", g)[0]
    check(n == 50 and len(g) == 8 + 44 * n, "thesis size")
    pos = np.frombuffer(g, "<f4", 3 * n, 8).reshape(n, 3)
    check(np.allclose(pos, rec["c"]), "thesis positions")
    rc, so, se = run(XTWIN, "render", "--volume", outg, "--mode", "fd20-128", "--threads", "2", "--out",
                     os.path.join(d, "t"))
    check(rc == 0, "xtwin render of the thesis file: %s" % se)


def test_single_gaussian_pixel():
    """importer -> loader -> renderer against the closed form, for one anisotropic Gaussian."""
    d = fresh("pixel")
    rng = np.random.default_rng(3)
    centre = np.array([[4.0, -6.0, 9.0]])
    scale = np.array([[3.0, 7.0, 12.0]])
    q = np.array([[0.9, 0.2, -0.3, 0.25]])
    q /= np.linalg.norm(q)
    rho = np.array([0.03])
    ck = os.path.join(d, "c.pickle")
    write_pickle(ck, checkpoint(centre, scale, q, rho, 1.0 / 128, None, rng))
    out = os.path.join(d, "one.xgmm")
    check(importer(ck, out, "--scene-scale", repr(1.0 / 128))[0] == 0, "import one")
    rc, so, se = run(XTWIN, "render", "--volume", out, "--place", "native", "--mode", "fd20-128", "--primary", "25",
                     "--secondary", "-10", "--threads", "2", "--out", os.path.join(d, "r"))
    if not check(rc == 0, "render one: %s" % se):
        return
    with open(os.path.join(d, "r.json")) as f:
        side = json.load(f)
    img = np.load(os.path.join(d, "r.npy"))
    geo = side["geometry"]
    src, o, u, v = (np.array(geo[k]) for k in ("source", "det_origin", "u", "v"))
    pu, pv = side["detector"]["pitch_u_mm"], side["detector"]["pitch_v_mm"]
    w_, x_, y_, z_ = q[0]
    R = np.array([[1 - 2 * (y_ * y_ + z_ * z_), 2 * (x_ * y_ - w_ * z_), 2 * (x_ * z_ + w_ * y_)],
                  [2 * (x_ * y_ + w_ * z_), 1 - 2 * (x_ * x_ + z_ * z_), 2 * (y_ * z_ - w_ * x_)],
                  [2 * (x_ * z_ - w_ * y_), 2 * (y_ * z_ + w_ * x_), 1 - 2 * (x_ * x_ + y_ * y_)]])
    P = R @ np.diag(1 / scale[0] ** 2) @ R.T
    # world = patient + table (0): the Gaussian is where its file says
    row, col = np.unravel_index(np.argmax(img), img.shape)
    worst = 0.0
    for (r, c) in [(row, col), (row + 3, col - 2), (row - 5, col + 4), (64, 64)]:
        px = o + c * pu * u + r * pv * v
        dvec = px - src
        dn = dvec / np.linalg.norm(dvec)
        a = dn @ P @ dn
        rr = src - centre[0]
        ts = -(rr @ P @ dn) / a
        wv = rr + ts * dn
        m2 = wv @ P @ wv
        want = rho[0] * math.sqrt(2 * math.pi / a) * math.exp(-0.5 * m2) if m2 <= 4.8 ** 2 else 0.0
        worst = max(worst, abs(img[r, c] - want))
    check(worst <= 1e-6 * img.max() + 1e-9, "rendered pixels vs closed form: worst %.3g of %.3g" % (worst, img.max()))


def test_import_rejections():
    d = fresh("reject")
    rng = np.random.default_rng(5)
    centre, scale, q, rho = random_mixture(rng, 5)
    good = checkpoint(centre, scale, q, rho, 0.01, None, rng)

    def expect(obj_or_bytes, word, extra=("--scene-scale", "0.01"), out="x.xgmm", code=1):
        ck = os.path.join(d, "bad.pickle")
        if isinstance(obj_or_bytes, bytes):
            with open(ck, "wb") as f:
                f.write(obj_or_bytes)
        else:
            write_pickle(ck, obj_or_bytes)
        target = os.path.join(d, out)
        rc, so, se = importer(ck, target, *extra)
        check(rc == code and one_line(se) and word in se, "reject (%s): rc %d, %r" % (word, rc, se))
        check(not os.path.exists(target), "no output left for %s" % word)
        check(not [f for f in os.listdir(d) if ".tmp." in f], "no temporary left for %s" % word)

    bad = dict(good)
    bad["xyz"] = good["xyz"].copy()
    bad["xyz"][3, 1] = np.nan
    expect(bad, "Gaussian 3 is not finite")
    bad = dict(good)
    bad["rotation"] = good["rotation"].copy()
    bad["rotation"][2] = 0
    expect(bad, "cannot be normalised")
    bad = dict(good)
    del bad["density"]
    expect(bad, "density: missing")
    bad = dict(good)
    bad["scale"] = good["scale"][:, :2]
    expect(bad, "expected [N, 3]")
    bad = dict(good)
    bad["scale"] = np.full((5, 3), -40.0, dtype=np.float32)  # exp(-40) / 0.01: below 1e-4 mm
    expect(bad, "outside")
    expect([1, 2, 3], "expected a dict")
    with open(os.path.join(d, "ok.pickle"), "wb") as f:
        pickle.dump(good, f)
    with open(os.path.join(d, "ok.pickle"), "rb") as f:
        raw = f.read()
    expect(raw[: len(raw) // 2], "not a readable pickle")

    class Evil:  # unpickling would call os.system
        def __reduce__(self):
            return (os.system, ("touch %s" % os.path.join(d, "pwned"),))

    expect(pickle.dumps({"xyz": Evil()}), "refuses")
    check(not os.path.exists(os.path.join(d, "pwned")), "the unpickler ran nothing")
    expect(good, "must end in", out="x.txt", code=2)
    expect(good, "sVoxel", extra=("--svoxel", "0,1,1"))


def test_gmm_fit_cli():
    d = fresh("fit")
    out = os.path.join(d, "h.xgmm")
    rc, so, se = run(XTWIN, "gmm-fit", "--phantom", "head", "--phantom-size", "40", "--phantom-spacing", "4.5",
                     "--budget", "700", "--iters", "8", "--threads", "2", "--report", "cpu", "--report-size", "48",
                     "--out", out)
    if check(rc == 0, "gmm-fit: rc %d %s" % (rc, se)):
        check("700 Gaussians" in so or "Gaussians" in so, "report count")
        check("PSNR min" in so and "SSIM" in so, "2D report")
        rec, layout, cutoff, unit = read_xgmm(out)
        check(0 < len(rec) <= 700, "count within the budget")
        rc, so2, se = run(XTWIN, "render", "--volume", out, "--mode", "fd20-128", "--threads", "2", "--out",
                          os.path.join(d, "r"))
        check(rc == 0, "render of the fit")
    # a CT in HU (MetaImage): a water cylinder cut by the first and last slices, a table slab apart
    # from it, noisy air. By default the table and the air become the background (a "background:"
    # line) and the cut faces get the margin; --classify off keeps them, --margin 0 drops the margin
    rnd = random.Random(29)
    hu = []
    for z in range(12):
        for y in range(24):
            for x in range(24):
                v = -1000 + rnd.gauss(0, 20)
                if (x - 12) ** 2 + (y - 11) ** 2 <= 36:
                    v = 40
                if 20 <= y < 22:
                    v = 300
                hu.append(int(round(v)))
    with open(os.path.join(d, "ct.raw"), "wb") as f:
        f.write(struct.pack("<%dh" % len(hu), *hu))
    with open(os.path.join(d, "ct.mhd"), "w") as f:
        f.write("ObjectType = Image\nNDims = 3\nDimSize = 24 24 12\nElementSpacing = 2 2 3\n"
                "ElementType = MET_SHORT\nElementByteOrderMSB = False\nElementDataFile = ct.raw\n")
    ct = ["--volume", os.path.join(d, "ct.mhd"), "--convert", "hu", "--budget", "60", "--iters", "3", "--threads",
          "2", "--report", "none", "--out", os.path.join(d, "ct.xgmm")]
    rc, so, se = run(XTWIN, "gmm-fit", *ct)
    if check(rc == 0, "gmm-fit of a CT: rc %d %s" % (rc, se)):
        check(so.startswith("background: outside the patient") and "line-integral mass dropped" in so,
              "the default classification and its report: %r" % so)
        check("24 x 24 x 28 grid (the volume's 24 x 24 x 12 and 8 empty voxels beyond each face" in so,
              "the 8-voxel margin beyond the cut faces: %r" % so)
    rc, so, se = run(XTWIN, "gmm-fit", *ct, "--classify", "off", "--margin", "0")
    if check(rc == 0, "gmm-fit --classify off --margin 0: rc %d %s" % (rc, se)):
        check("background:" not in so and "24 x 24 x 12 grid (peak" in so, "no classification, no margin: %r" % so)
    for args, word, code in [
        (["--out", out, "--classify", "body"], "--classify", 2),
        (["--out", out, "--body-hu", "-300"], "--body-hu", 2),
        (["--out", out, "--margin", "65"], "--margin", 2),
        (["--out", os.path.join(d, "x.txt")], "must end in", 2),
        (["--out", os.path.join(d, "none", "x.xgmm")], "no such directory", 1),
        (["--out", out, "--budget", "0"], "--budget", 2),
        (["--out", out, "--volume", os.path.join(d, "missing.nii")], "missing.nii", 1),
        (["--out", out, "--phantom", "bench-head", "--phantom-size", "40"], "--phantom-size", 2),
    ]:
        before = sorted(os.listdir(d))
        rc, so, se = run(XTWIN, "gmm-fit", *args)
        check(rc == code and one_line(se) and word in se, "gmm-fit %s: rc %d %r" % (args, rc, se))
        check(sorted(os.listdir(d)) == before, "gmm-fit %s left nothing" % args)


for t in (test_import_round_trip, test_single_gaussian_pixel, test_import_rejections, test_gmm_fit_cli):
    print(t.__name__)
    t()
print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
