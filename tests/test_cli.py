#!/usr/bin/python3
"""End-to-end tests of the real `xtwin` binary: outputs (NPY, PNG, JSON sidecar), geometry in the
sidecar, --angles, every usage/runtime error (one stderr line naming the option or file, and no
output left behind), --help against the option table in tools/xt_render_cmd.c.

usage: test_cli.py XTWIN_BINARY RENDER_SOURCE_C SCRATCH_DIR
Exit 0 pass, 1 fail, 77 skip (no numpy)."""
import ast
import json
import math
import os
import re
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

XTWIN, RENDER_SRC, SCRATCH = sys.argv[1], sys.argv[2], sys.argv[3]
SMALL = ["--phantom-size", "64", "--phantom-spacing", "3", "--mode", "fd20-128", "--threads", "2"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("  FAIL:", what)
    return cond


def run(*args):
    p = subprocess.run([XTWIN, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def fresh(name):
    d = os.path.join(SCRATCH, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def listing(d):
    out = []
    for root, dirs, files in os.walk(d):
        for f in files:
            out.append(os.path.relpath(os.path.join(root, f), d))
    return sorted(out)


# --- readers written from the format specs (no imaging libraries) ---------------------------

def read_npy(path):
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[:6] == b"\x93NUMPY", "npy magic"
    assert raw[6:8] == b"\x01\x00", "npy version 1.0"
    (hlen,) = struct.unpack("<H", raw[8:10])
    assert (10 + hlen) % 64 == 0, "npy header not 64-byte aligned"
    header = raw[10:10 + hlen].decode("latin1")
    assert header.endswith("\n"), "npy header must end with a newline"
    d = ast.literal_eval(header.strip())
    assert d["descr"] == "<f4" and d["fortran_order"] is False, d
    rows, cols = d["shape"]
    data = raw[10 + hlen:]
    assert len(data) == rows * cols * 4, "npy data size"
    a = np.frombuffer(data, dtype="<f4").reshape(rows, cols)
    assert np.array_equal(a, np.load(path)), "numpy disagrees with the manual parse"
    return a


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def read_png16_gray(path):
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", "png signature"
    pos, idat, ihdr = 8, b"", None
    while pos < len(raw):
        (n,) = struct.unpack(">I", raw[pos:pos + 4])
        kind = raw[pos + 4:pos + 8]
        body = raw[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", raw[pos + 8 + n:pos + 12 + n])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, "png chunk crc"
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + n
    w, h, depth, ctype, comp, filt, interlace = ihdr
    assert (depth, ctype, interlace) == (16, 0, 0), ihdr
    data = zlib.decompress(idat)
    bpp, stride = 2, w * 2
    assert len(data) == h * (stride + 1), "png data size"
    prev = bytearray(stride)
    out = np.zeros((h, w), dtype=np.uint16)
    for r in range(h):
        ft = data[r * (stride + 1)]
        line = bytearray(data[r * (stride + 1) + 1:(r + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif ft == 4:
                line[i] = (line[i] + paeth(a, b, c)) & 255
            else:
                assert ft == 0, "png filter type"
        out[r] = np.frombuffer(bytes(line), dtype=">u2")
        prev = line
    return out


def expected_u16(L):
    x = np.exp(-np.maximum(L.astype(np.float64), 0.0)) * 65535.0 + 0.5
    return np.floor(np.minimum(x, 65535.0)).astype(np.uint16)


def project(P, p):
    h = np.asarray(P) @ np.array([p[0], p[1], p[2], 1.0])
    return h[0] / h[2], h[1] / h[2], h[2]


# --- tests -------------------------------------------------------------------------------------

def test_render_outputs():
    d = fresh("render")
    rc, out, err = run("render", "--phantom", "head", *SMALL, "--out", d + "/head")
    if not check(rc == 0, f"render exit {rc}: {err}"):
        return
    check(err == "", f"render wrote to stderr: {err!r}")
    check(listing(d) == ["head.json", "head.npy", "head.png"], f"outputs: {listing(d)}")
    check(len(out.strip().splitlines()) == 1 and "head" in out and "ms" in out, f"summary: {out!r}")
    L = read_npy(d + "/head.npy")
    check(L.shape == (128, 128), f"shape {L.shape}")
    png = read_png16_gray(d + "/head.png")
    check(png.shape == L.shape, "png size")
    check(np.array_equal(png, expected_u16(L)), "png != round(65535*exp(-L))")
    check(L[64, 64] > 0.5, f"central line integral {L[64, 64]}")
    check(L[0, 0] == 0.0 and L[-1, -1] == 0.0, f"corner line integrals {L[0, 0]} {L[-1, -1]}")
    check(png[0, 0] == 65535, "corner intensity")
    with open(d + "/head.json") as f:
        j = json.load(f)
    g, det, pose = j["geometry"], j["detector"], j["pose"]
    rows, cols = det["rows"], det["cols"]
    check((rows, cols, det["mode"]) == (128, 128, "fd20-128"), f"detector {det}")
    check(abs(det["pitch_u_mm"] - 2.31) < 1e-12, "pitch")
    c, r, w = project(g["P"], (0, 0, 0))
    check(abs(c - (cols - 1) / 2) < 1e-9 and abs(r - (rows - 1) / 2) < 1e-9, f"P(isocentre) = {c}, {r}")
    check(abs(w - pose["sod_mm"]) < 1e-9, f"depth of the isocentre {w}")
    check(g["principal_point"] == [(cols - 1) / 2, (rows - 1) / 2], "principal point")
    src, dc, do = np.array(g["source"]), np.array(g["det_center"]), np.array(g["det_origin"])
    check(abs(np.linalg.norm(src) - pose["sod_mm"]) < 1e-9, "|source| = sod")
    check(abs(np.linalg.norm(dc - src) - pose["sid_mm"]) < 1e-9, "|det_center - source| = sid")
    c0, r0, _ = project(g["P"], do)
    check(abs(c0) < 1e-9 and abs(r0) < 1e-9, f"P(det_origin) = {c0}, {r0}")
    u, v, dd = (np.array(g[k]) for k in "uvd")
    check(abs(u @ v) < 1e-12 and abs(u @ dd) < 1e-12 and abs(np.linalg.norm(dd) - 1) < 1e-12, "u, v, d orthonormal")
    check("convention" in " ".join(g.keys()) and "integer" in g["P_convention"], "P convention note")
    check(j["intensity"]["formula"].startswith("png = round(65535 * exp(-L))"), "intensity formula")
    m = j["model"]
    check(m["name"] == "head" and m["dims"] == [64, 64, 64] and m["spacing_mm"] == [3.0, 3.0, 3.0], f"model {m}")
    check(len(m["index_to_model"]) == 3 and len(m["index_to_model"][0]) == 4, "index_to_model 3x4")
    check(m["place"] == "center" and len(j["patient_to_world"]) == 3, "placement fields")
    check(j["backend"]["name"] == "cpu" and j["xtwin_version"], "backend/version")
    check(abs(j["intensity"]["line_integral_max"] - float(L.max())) < 1e-6, "recorded max")


def test_pose_options():
    d = fresh("pose")
    rc, out, err = run("render", *SMALL, "--primary", "-30", "--secondary", "15", "--detector-rot", "10",
                       "--sod", "700", "--sid", "1100", "--table", "10,-5,20", "--out", d + "/p")
    if not check(rc == 0, f"pose render exit {rc}: {err}"):
        return
    with open(d + "/p.json") as f:
        j = json.load(f)
    p = j["pose"]
    check((p["primary_deg"], p["secondary_deg"], p["detector_rot_deg"], p["sod_mm"], p["sid_mm"], p["table_mm"])
          == (-30, 15, 10, 700, 1100, [10, -5, 20]), f"pose {p}")
    g = j["geometry"]
    check(abs(np.linalg.norm(g["source"]) - 700) < 1e-9, "|source| = --sod")
    c, r, _ = project(g["P"], (0, 0, 0))
    check(abs(c - 63.5) < 1e-9 and abs(r - 63.5) < 1e-9, "isocentre -> principal point at any pose")
    check(j["patient_to_world"][0][3] == 10 and j["patient_to_world"][2][3] == 20, "patient_to_world translation")


def test_angles():
    d = fresh("angles")
    rc, out, err = run("render", *SMALL, "--angles", "-30,0,45.5", "--out", d + "/sweep")
    if not check(rc == 0, f"angles exit {rc}: {err}"):
        return
    names = [f"sweep_p{a}.{e}" for a in ("-30", "0", "45.5") for e in ("json", "npy", "png")]
    check(listing(d) == sorted(names), f"angle outputs: {listing(d)}")
    check(len(out.strip().splitlines()) == 3, f"one summary line per frame: {out!r}")
    for a in (-30, 0, 45.5):
        with open(f"{d}/sweep_p{a:g}.json") as f:
            j = json.load(f)
        check(j["pose"]["primary_deg"] == a, f"angle {a} pose")
        L = read_npy(f"{d}/sweep_p{a:g}.npy")
        check(L[64, 64] > 0, f"angle {a} centre")


def test_labels():
    d = fresh("labels")
    rc, out, err = run("render", "--phantom", "head-labels", *SMALL, "--out", d + "/lab")
    if not check(rc == 0, f"labels exit {rc}: {err}"):
        return
    with open(d + "/lab.json") as f:
        j = json.load(f)
    mats = j["model"].get("materials")
    check(mats and len(mats["entries"]) >= 2 and mats["energy_kev"] > 0, f"materials {mats}")
    check(all("name" in e and "mu_per_mm" in e for e in mats["entries"]), "material entries")
    L = read_npy(d + "/lab.npy")
    check(L[64, 64] > 0.5, "labels centre")
    check(np.array_equal(read_png16_gray(d + "/lab.png"), expected_u16(L)), "labels png")


def expect_error(name, args, code, needles, setup=None, keep=()):
    """Runs render with args (PREFIX in args is replaced by the case's output prefix); expects exit
    code, one stderr line containing every needle, and no files in the case directory but keep."""
    d = fresh("err_" + name)
    if setup:
        setup(d)
    prefix = d + "/sub/x"
    full = [a.replace("PREFIX", prefix).replace("DIR", d) for a in args]
    if not any(a == "--out" for a in full):
        full += ["--out", prefix]
    rc, out, err = run("render", *full)
    lines = err.splitlines()
    check(rc == code, f"{name}: exit {rc}, want {code} ({err.strip()!r})")
    check(len(lines) == 1, f"{name}: want one stderr line, got {lines!r}")
    for n in needles:
        n = n.replace("DIR", d)
        check(any(n in l for l in lines), f"{name}: stderr {err.strip()!r} lacks {n!r}")
    left = listing(d) if os.path.isdir(d) else []
    check(left == sorted(keep), f"{name}: left behind {left}")
    check(not os.path.exists(d + "/sub") or "sub" in "".join(keep), f"{name}: output directory created and left")


def write_file(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def test_errors():
    expect_error("nan", [*SMALL, "--primary", "abc"], 2, ['--primary: "abc" is not a number'])
    expect_error("range", [*SMALL, "--primary", "200"], 2, ["--primary", "200", "outside"])
    expect_error("secondary", [*SMALL, "--secondary", "-91"], 2, ["--secondary"])
    expect_error("inf", [*SMALL, "--detector-rot", "inf"], 2, ["--detector-rot"])
    expect_error("mode", ["--mode", "fd21"], 2, ['--mode: unknown mode "fd21" (see xtwin modes)'])
    expect_error("backend", [*SMALL, "--backend", "opencl"], 2, ["--backend", "opencl"])
    expect_error("size", ["--phantom-size", "12x", "--mode", "fd20-128"], 2, ["--phantom-size"])
    expect_error("table", [*SMALL, "--table", "1,2"], 2, ["--table"])
    expect_error("angles", [*SMALL, "--angles", "10,abc"], 2, ["--angles", "abc"])
    expect_error("angles_dup", [*SMALL, "--angles", "10,10"], 2, ["--angles"])
    expect_error("angles_primary", [*SMALL, "--angles", "10", "--primary", "5"], 2, ["--angles", "--primary"])
    expect_error("sid", [*SMALL, "--sid", "500"], 2, ["--sid"])
    expect_error("unknown", [*SMALL, "--bogus", "1"], 2, ["--bogus"])
    expect_error("missing", [*SMALL, "--primary"], 2, ["--primary", "missing"])
    expect_error("twice", [*SMALL, "--primary", "1", "--primary", "2"], 2, ["--primary"])
    expect_error("positional", [*SMALL, "stray"], 2, ["stray"])
    expect_error("outdir_prefix", [*SMALL, "--out", "DIR/sub/"], 2, ["--out"])
    expect_error("volume_missing", ["--volume", "DIR/none.nii"], 1, ["--volume", "DIR/none.nii"])
    expect_error("volume_bad", ["--volume", "DIR/bad.nii"], 1, ["bad.nii"],
                 setup=lambda d: write_file(d + "/bad.nii", b"this is not a NIfTI file\n" * 20), keep=["bad.nii"])
    expect_error("volume_bad_mha", ["--volume", "DIR/bad.mha"], 1, ["bad.mha"],
                 setup=lambda d: write_file(d + "/bad.mha", b"NDims = 3\nDimSize = 4 4\nElementType = MET_FLOAT\n"),
                 keep=["bad.mha"])
    # the output directory cannot be created: its parent is a regular file
    expect_error("unwritable", [*SMALL, "--out", "DIR/blocker/sub/x"], 1, ["--out", "blocker"],
                 setup=lambda d: write_file(d + "/blocker", b"x"), keep=["blocker"])
    # the last step fails: x.png exists as a non-empty directory, so its rename fails after x.npy's
    # succeeded; the run must take x.npy back and leave no temporary files
    def block_png(d):
        write_file(d + "/sub/x.png/keep", b"k")
    expect_error("rename", [*SMALL], 1, ["x.png"], setup=block_png, keep=["sub/x.png/keep"])


def write_ball_mha(path, n=40):
    """A water ball (HU 0, radius 15 voxels) with a bone core in air, 2 mm voxels, origin far
    from the isocentre: (100, 200, 300) mm."""
    z, y, x = np.mgrid[0:n, 0:n, 0:n]
    r2 = (x - 20) ** 2 + (y - 20) ** 2 + (z - 20) ** 2
    hu = np.full((n, n, n), -1000, np.int16)
    hu[r2 < 15 ** 2] = 0
    hu[r2 < 5 ** 2] = 1000
    hdr = (f"ObjectType = Image\nNDims = 3\nDimSize = {n} {n} {n}\nElementSpacing = 2 2 2\n"
           "Offset = 100 200 300\nElementType = MET_SHORT\nElementByteOrderMSB = False\n"
           "ElementDataFile = LOCAL\n")
    write_file(path, hdr.encode() + hu.astype("<i2").tobytes())


def test_volume():
    rc, out, err = run("--version")
    if "volume loading: yes" not in out:
        print("  (volume loading not built: skipped)")
        return
    d = fresh("volume")
    write_ball_mha(d + "/ball.mha")
    rc, out, err = run("render", "--volume", d + "/ball.mha", "--convert", "hu", "--mode", "fd20-128",
                       "--out", d + "/c")
    if not check(rc == 0, f"volume render exit {rc}: {err}"):
        return
    L = read_npy(d + "/c.npy")
    check(L[64, 64] > 0.5 and L[0, 0] == 0.0, f"centred ball: centre {L[64, 64]}, corner {L[0, 0]}")
    with open(d + "/c.json") as f:
        m = json.load(f)["model"]
    # bounds of the voxel cubes: 99 .. 179 mm etc., so the centre goes to the isocentre
    check(m["placement"] == [[1, 0, 0, -139], [0, 1, 0, -239], [0, 0, 1, -339]], f"placement {m['placement']}")
    check(m["index_to_model"][0] == [2, 0, 0, 100] and m["convert"] == "hu" and m["dims"] == [40, 40, 40], f"{m}")
    rc, out, err = run("render", "--volume", d + "/ball.mha", "--place", "native", "--mode", "fd20-128",
                       "--out", d + "/n")
    check(rc == 0 and float(read_npy(d + "/n.npy").max()) == 0.0, "native placement: the ball is out of view")
    rc, out, err = run("render", "--volume", d + "/ball.mha", "--convert", "hu-labels", "--mode", "fd20-128",
                       "--out", d + "/l")
    if check(rc == 0, f"hu-labels exit {rc}: {err}"):
        with open(d + "/l.json") as f:
            check("materials" in json.load(f)["model"], "hu-labels sidecar has the material table")


def sphere_chord(src, px, c, r):
    """Exact length of segment src->px inside the sphere (c, r)."""
    d = px - src
    L = float(np.linalg.norm(d))
    w = d / L
    t = float(np.dot(c - src, w))
    h2 = float(np.dot(c - src, c - src)) - t * t
    if h2 >= r * r:
        return 0.0
    half = math.sqrt(r * r - h2)
    return max(0.0, min(L, t + half) - max(0.0, t - half))


def test_ellipsoids():
    """A JSON sphere phantom against closed-form chords, within the voxelisation bound of
    docs/projector.md (centre sampling: the shell between radii r(1 -+ t), t = (sqrt 3 / 2) h / r)."""
    rc, out, err = run("--version")
    if "volume loading: yes" not in out:
        print("  (phantom files not built: skipped)")
        return
    d = fresh("ellipsoids")
    spec = {"name": "ball", "ellipsoids": [{"center": [5, -3, 2], "semi_axes": [40, 40, 40], "mu": 0.02},
                                          {"center": [5, -3, 2], "semi_axes": [10, 10, 10], "material": "bone"}]}
    write_file(d + "/ball.json", json.dumps(spec).encode())
    # the labels render first: its sidecar gives the default table's bone mu (float32)
    rc, out, err = run("render", "--ellipsoids", d + "/ball.json", "--labels", "--phantom-size", "100",
                       "--mode", "fd20-128", "--out", d + "/lab")
    if not check(rc == 0, f"ellipsoid labels exit {rc}: {err}"):
        return
    with open(d + "/lab.json") as f:
        mats = json.load(f)["model"]["materials"]["entries"]
    mu_bone = float(np.float32([m["mu_per_mm"] for m in mats if m["name"] == "bone"][0]))
    rc, out, err = run("render", "--ellipsoids", d + "/ball.json", "--phantom-size", "100", "--phantom-spacing", "1",
                       "--mode", "fd20-128", "--primary", "20", "--out", d + "/b")
    if not check(rc == 0, f"ellipsoid render exit {rc}: {err}"):
        return
    L = read_npy(d + "/b.npy")
    with open(d + "/b.json") as f:
        g = json.load(f)
    geo, det = g["geometry"], g["detector"]
    src, o, u, v = (np.array(geo[k], float) for k in ("source", "det_origin", "u", "v"))
    pu, pv = det["pitch_u_mm"], det["pitch_v_mm"]
    c = np.array([5.0, -3.0, 2.0])
    delta = math.sqrt(3) / 2 * 1.0
    worst = 0.0
    for r in range(0, 128, 3):
        for col in range(0, 128, 3):
            px = o + col * pu * u + r * pv * v
            exact = 0.0
            bound = 0.0
            for rad, mu in ((40.0, float(np.float32(0.02))), (10.0, mu_bone)):
                exact += mu * sphere_chord(src, px, c, rad)
                t = delta / rad
                bound += abs(mu) * (sphere_chord(src, px, c, rad * (1 + t)) - sphere_chord(src, px, c, rad * (1 - t)))
            err = abs(float(L[r, col]) - exact)
            worst = max(worst, err / (bound + 1e-6 * exact + 1e-6))
    print(f"  ellipsoid phantom: worst error / bound = {worst:.3f}")
    check(worst <= 1.0, f"ellipsoid phantom: worst error / bound = {worst:.3f}")
    check(L[64, 64] > 1.0, f"ellipsoid phantom: centre {L[64, 64]}")


def test_ellipsoid_errors():
    def bad(name, text):
        return lambda d: write_file(d + "/" + name, text.encode())
    expect_error("ell_key", ["--ellipsoids", "DIR/e.json"], 1, ["e.json", 'unknown key "semi"'],
                 setup=bad("e.json", '{"ellipsoids": [{"center": [0,0,0], "semi": [1,1,1]}]}'), keep=["e.json"])
    expect_error("ell_mat", ["--ellipsoids", "DIR/e.json"], 1, ["e.json", "material", "unobtainium"],
                 setup=bad("e.json", '{"ellipsoids": [{"center": [0,0,0], "semi_axes": [1,1,1], '
                                     '"material": "unobtainium"}]}'), keep=["e.json"])
    expect_error("ell_num", ["--ellipsoids", "DIR/e.json"], 1, ["e.json", "semi_axes[1]"],
                 setup=bad("e.json", '{"ellipsoids": [{"center": [0,0,0], "semi_axes": [1,"x",1]}]}'), keep=["e.json"])
    expect_error("ell_syntax", ["--ellipsoids", "DIR/e.json"], 1, ["e.json", "line"],
                 setup=bad("e.json", '{"ellipsoids": [}'), keep=["e.json"])
    expect_error("ell_both", ["--ellipsoids", "x.json", "--phantom", "head"], 2, ["--ellipsoids", "--phantom"])
    expect_error("ell_labels", ["--labels"], 2, ["--labels"])


def test_cuda():
    rc, out, err = run("--version")
    if "cuda" in out.split("backends:")[1].split(";")[0]:
        print("  (cuda available here: checking that --backend cuda renders)")
        d = fresh("cuda")
        rc, out, err = run("render", *SMALL, "--backend", "cuda", "--out", d + "/c")
        check(rc == 0, f"cuda render exit {rc}: {err}")
        return
    expect_error("cuda", [*SMALL, "--backend", "cuda"], 1, ["--backend cuda"])


def test_help_and_commands():
    with open(RENDER_SRC) as f:
        names = re.findall(r'\{"([a-z0-9-]+)", XT_OPT_', f.read())
    check(len(names) >= 18, f"option table parse found {names}")
    rc, out, err = run("render", "--help")
    check(rc == 0 and err == "", f"render --help exit {rc}")
    for n in names:
        check(re.search(r"--" + re.escape(n) + r"\b", out) is not None, f"--help lacks --{n}")
    check("default: fd20-512" in out and "round(65535 * exp(-L))" in out, "help shows defaults and the scaling")
    rc2, out2, _ = run("help", "render")
    check(rc2 == 0 and out2 == out, "xtwin help render == xtwin render --help")
    rc, out, err = run("--help")
    check(rc == 0 and all(c in out for c in ("render", "modes", "bench", "help")), "xtwin --help")
    rc, out, err = run("--version")
    check(rc == 0 and out.startswith("xtwin "), f"--version: {out!r}")
    bench_built = "bench: yes" in out
    rc, out, err = run("modes")
    check(rc == 0 and "fd20-128" in out and "fd20-512" in out, "modes")
    for args in (["frobnicate"], [], ["modes", "extra"], ["help", "frobnicate"]):
        rc, out, err = run(*args)
        check(rc == 2 and len(err.splitlines()) == 1, f"xtwin {args}: exit {rc}, stderr {err!r}")
    if not bench_built:
        rc, out, err = run("bench")
        check(rc == 2 and len(err.splitlines()) == 1 and "bench" in err, f"bench without bench: {rc} {err!r}")


def test_no_temporaries():
    leftovers = [f for f in listing(SCRATCH) if os.path.basename(f).startswith(".")]
    check(not leftovers, f"temporary files left: {leftovers}")


def test_chain():
    """--chain: raw and processed PNGs, the sidecar's chain section, replay, option errors."""
    d = fresh("chain")
    base = SMALL + ["--phantom", "head-labels", "--chain", "--kv", "70", "--mas", "0.02"]
    rc, out, err = run("render", *base, "--out", os.path.join(d, "a", "f"))
    check(rc == 0, f"--chain: exit {rc}: {err}")
    check(listing(os.path.join(d, "a")) == ["f.json", "f.npy", "f.png", "f_proc.png", "f_raw.png"],
          f"--chain files: {listing(os.path.join(d, 'a'))}")
    raw = read_png16_gray(os.path.join(d, "a", "f_raw.png"))
    proc = read_png16_gray(os.path.join(d, "a", "f_proc.png"))
    check(raw.shape == (128, 128) and int(raw.max()) <= 16383, f"raw: {raw.shape} max {raw.max()}")
    check(proc.shape == (128, 128) and int(proc.max()) <= 4095, f"processed: {proc.shape} max {proc.max()}")
    # the head attenuates: its centre gets fewer counts than the air at the corner
    check(float(raw[60:68, 60:68].mean()) < float(raw[2:6, 2:6].mean()), "raw: the head's shadow")
    j = json.load(open(os.path.join(d, "a", "f.json")))
    c = j.get("chain", {})
    check(c.get("parameters", {}).get("kv") == 70 and c.get("parameters", {}).get("mas") == 0.02, f"sidecar: {c}")
    check(c.get("frame") == 0 and c.get("files", {}).get("raw") == "f_raw.png", "sidecar files/frame")
    check(40 < c.get("derived", {}).get("mean_energy_kev", 0) < 60, f"mean energy {c.get('derived')}")
    # replay: same seed and frame, same bytes; another frame number, other noise
    rc, _, err = run("render", *base, "--out", os.path.join(d, "b", "f"))
    check(rc == 0 and open(os.path.join(d, "a", "f_raw.png"), "rb").read() ==
          open(os.path.join(d, "b", "f_raw.png"), "rb").read(), "replay: identical raw PNG")
    rc, _, err = run("render", *base, "--frame", "7", "--out", os.path.join(d, "c", "f"))
    check(rc == 0 and open(os.path.join(d, "a", "f_raw.png"), "rb").read() !=
          open(os.path.join(d, "c", "f_raw.png"), "rb").read(), "another frame number: other noise")
    rc, _, err = run("render", *base, "--binning", "2", "--out", os.path.join(d, "e", "f"))
    check(rc == 0 and read_png16_gray(os.path.join(d, "e", "f_raw.png")).shape == (64, 64), "binning 2: 64x64")
    for args, needle in ((["--kv", "70"], "--kv: applies with --chain only"),
                         (["--chain", "--kv", "300"], "--kv: 300 is outside [40, 125]"),
                         (["--chain", "--adc-bits", "13.5"], "--adc-bits: 13.5 is not a whole number")):
        rc, out, err = run("render", *SMALL, *args, "--out", os.path.join(d, "x", "f"))
        check(rc == 2 and err.strip() == "xtwin render: " + needle, f"{args}: exit {rc}, {err!r}")
    check(not os.path.exists(os.path.join(d, "x")), "no output after a usage error")


def test_contrast():
    """--iodine (docs/contrast.md): the thorax's aorta with iodine adds to the line integrals where the
    aorta projects and nowhere else, in proportion to the concentration; the sidecar says what each
    region held; bad entries are refused by name, leaving nothing."""
    d = fresh("contrast")
    base = ["render", "--phantom", "thorax", "--phantom-spacing", "4", "--mode", "fd20-128", "--primary", "20"]
    outs = {}
    for mg in (0, 20, 40):
        args = base + ["--out", f"{d}/c{mg}"] + (["--iodine", f"aorta={mg},heart=0"] if mg else [])
        rc, out, err = run(*args)
        if not check(rc == 0, f"--iodine aorta={mg}: exit {rc}: {err}"):
            return
        outs[mg] = read_npy(f"{d}/c{mg}.npy").astype(np.float64)
        with open(f"{d}/c{mg}.json") as f:
            side = json.load(f)
        if mg:
            check(side.get("contrast", {}).get("iodine_mg_ml") == {"aorta": float(mg), "heart": 0.0},
                  f"sidecar contrast {side.get('contrast')}")
        else:
            check("contrast" not in side, "no contrast object without --iodine")
    d20, d40 = outs[20] - outs[0], outs[40] - outs[0]
    check(d20.min() >= 0 and (d20 > 1e-3).sum() > 100, f"iodine adds where the aorta is ({(d20 > 1e-3).sum()} px)")
    check(np.all(d20[outs[0] == outs[0].min()] == 0) if outs[0].min() == 0 else True, "nothing outside the body")
    m = d20 > 1e-2
    check(np.allclose(d40[m], 2 * d20[m], rtol=1e-4), "twice the iodine, twice the line integral")
    check(np.array_equal(d40 == 0, d20 == 0), "the same pixels at any concentration")
    expect_error("iodine_region", base[1:] + ["--iodine", "bone=20"], 2, ["--iodine", "'bone'", "no contrast region"])
    expect_error("iodine_value", base[1:] + ["--iodine", "aorta=999"], 2, ["--iodine", "aorta", "0..400"])
    expect_error("iodine_form", base[1:] + ["--iodine", "aorta"], 2, ["--iodine", "REGION=MG"])


def main():
    os.makedirs(SCRATCH, exist_ok=True)
    tests = [test_render_outputs, test_pose_options, test_angles, test_labels, test_volume, test_ellipsoids,
             test_ellipsoid_errors, test_errors, test_cuda, test_chain,
             test_help_and_commands, test_no_temporaries, test_contrast]
    for t in tests:
        before = len(failures)
        try:
            t()
        except Exception as e:  # a crash in one test is that test's failure
            failures.append(f"{t.__name__}: {e!r}")
            print(f"  FAIL: {t.__name__}: {e!r}")
        print(("FAIL " if len(failures) > before else "ok   ") + t.__name__)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
