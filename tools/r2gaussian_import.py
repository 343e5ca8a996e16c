#!/usr/bin/python3
"""Import an R2-Gaussian checkpoint (point_cloud/iteration_N/point_cloud.pickle) as an xtwin
Gaussian mixture: the native .xgmm (docs/models.md) or the thesis's .gmm, chosen by the output
name. Needs only Debian's python3-numpy.

R2-Gaussian (github Ruyi-Zha/r2_gaussian) saves raw, pre-activation arrays in a pickle:
  xyz [N,3], density [N,1] (softplus), scale [N,3] (bounded sigmoid when scale_bound = [smin, smax]
  is set, else exp), rotation [N,4] (w, x, y, z, not normalised), scale_bound (None or [2]),
in a frame scaled by scene_scale = 2 / max(sVoxel) so that the volume fits [-1, 1]^3. This tool
applies the activations, normalises the quaternions and undoes the frame: positions and scales are
divided by scene_scale (mm when sVoxel is in mm); rho keeps the units of the training's mu (the
projections were scaled by the same factor), times --mu-scale.

usage: r2gaussian_import.py POINT_CLOUD.pickle OUT.xgmm|OUT.gmm
           (--meta meta_data.json | --svoxel X,Y,Z | --scene-scale S)
           [--offset X,Y,Z] [--mu-scale F] [--cutoff K]

The pickle is read with an unpickler that admits numpy arrays and plain containers only: a
checkpoint from elsewhere cannot run code. Exit 0 on success, 1 on a bad input (one line on
stderr naming the file and the field), 2 on a usage error. The output appears whole or not at all.
"""
import argparse
import io
import json
import math
import os
import pickle
import struct
import sys
import tempfile
import zlib

try:
    import numpy as np
except ImportError:
    sys.stderr.write("r2gaussian_import: python3-numpy is required (apt-get install python3-numpy)\n")
    sys.exit(1)

MAGIC = b"XTGMM\r\n\x1a"
VERSION = 1
LAYOUT = b"centre:f32x3,scale:f32x3,quat_wxyz:f32x4,rho:f32,label:u32"
NO_LABEL = 0xFFFFFFFF
MAX_COUNT = 64 * 1024 * 1024
SCALE_MIN, SCALE_MAX = 1e-4, 1e4


class BadInput(Exception):
    pass


class SafeUnpickler(pickle.Unpickler):
    """Only what a numpy-array dict needs: numpy's array reconstruction and dtypes."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("builtins", "slice"),
    }

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise BadInput("refuses to load %s.%s (a checkpoint holds numpy arrays only)" % (module, name))


def load_checkpoint(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BadInput(e.strerror)
    try:
        obj = SafeUnpickler(io.BytesIO(data)).load()
    except BadInput:
        raise
    except Exception as e:  # a truncated or foreign pickle
        raise BadInput("not a readable pickle (%s)" % type(e).__name__)
    if not isinstance(obj, dict):
        raise BadInput("expected a dict of arrays, found %s" % type(obj).__name__)
    return obj


def field(obj, key, cols):
    if key not in obj:
        raise BadInput("field %s: missing" % key)
    a = np.asarray(obj[key], dtype=np.float64)
    if a.ndim == 1 and cols == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[1] != cols:
        raise BadInput("field %s: shape %s, expected [N, %d]" % (key, a.shape, cols))
    if not np.all(np.isfinite(a)):
        i = int(np.argwhere(~np.isfinite(a))[0][0])
        raise BadInput("field %s: Gaussian %d is not finite" % (key, i))
    return a


def activate(obj):
    """(centre, scale, quat, rho) in R2-Gaussian's normalised frame."""
    xyz = field(obj, "xyz", 3)
    n = xyz.shape[0]
    if n < 1 or n > MAX_COUNT:
        raise BadInput("xyz: %d Gaussians, outside [1, %d]" % (n, MAX_COUNT))
    dens = field(obj, "density", 1)
    scale = field(obj, "scale", 3)
    rot = field(obj, "rotation", 4)
    for key, a in (("density", dens), ("scale", scale), ("rotation", rot)):
        if a.shape[0] != n:
            raise BadInput("field %s: %d rows, but xyz has %d" % (key, a.shape[0], n))
    # softplus, written to stay finite for large raw values
    rho = np.where(dens > 20.0, dens, np.log1p(np.exp(np.minimum(dens, 20.0))))[:, 0]
    bound = obj.get("scale_bound")
    if bound is not None:
        b = np.asarray(bound, dtype=np.float64).reshape(-1)
        if b.shape != (2,) or not np.all(np.isfinite(b)) or not (0 <= b[0] < b[1]):
            raise BadInput("field scale_bound: expected [smin, smax] with 0 <= smin < smax")
        s = 1.0 / (1.0 + np.exp(-scale)) * (b[1] - b[0]) + b[0]
    else:
        s = np.exp(scale)
    norm = np.sqrt(np.sum(rot * rot, axis=1))
    bad = np.argwhere(~(norm > 1e-6))
    if bad.size:
        raise BadInput("field rotation: Gaussian %d's quaternion cannot be normalised" % int(bad[0][0]))
    q = rot / norm[:, None]
    return xyz, s, q, rho


def scene_scale_of(args):
    if args.scene_scale is not None:
        return args.scene_scale
    if args.svoxel is not None:
        sv = args.svoxel
    else:
        try:
            with open(args.meta) as f:
                meta = json.load(f)
        except (OSError, ValueError) as e:
            raise BadInput("%s: %s" % (args.meta, getattr(e, "strerror", None) or e))
        sv = meta.get("sVoxel") if isinstance(meta, dict) else None
        if sv is None and isinstance(meta, dict):
            sv = meta.get("scanner", {}).get("sVoxel") if isinstance(meta.get("scanner"), dict) else None
        if not isinstance(sv, list) or len(sv) != 3:
            raise BadInput("%s: no sVoxel [x, y, z] (mm)" % args.meta)
    try:
        sv = [float(v) for v in sv]
    except (TypeError, ValueError):
        raise BadInput("sVoxel: not three numbers")
    if not all(math.isfinite(v) and v > 0 for v in sv):
        raise BadInput("sVoxel: %s, each must be > 0" % sv)
    return 2.0 / max(sv)


def records(centre, scale, quat, rho):
    n = centre.shape[0]
    rec = np.zeros(n, dtype=np.dtype([("c", "<f4", 3), ("s", "<f4", 3), ("q", "<f4", 4), ("rho", "<f4"), ("label", "<u4")]))
    rec["c"] = centre
    rec["s"] = scale
    rec["q"] = quat
    rec["rho"] = rho
    rec["label"] = NO_LABEL
    assert rec.dtype.itemsize == 48
    return rec


def check_ranges(rec):
    s = rec["s"].astype(np.float64)
    bad = np.argwhere(~((s >= SCALE_MIN) & (s <= SCALE_MAX)))
    if bad.size:
        i, a = int(bad[0][0]), int(bad[0][1])
        raise BadInput("Gaussian %d: scale %s is %g mm, outside [%g, %g] (check the frame: --svoxel/--meta)"
                       % (i, "xyz"[a], s[i, a], SCALE_MIN, SCALE_MAX))
    c = rec["c"].astype(np.float64)
    if not np.all(np.isfinite(c)) or np.any(np.abs(c) > 1e6):
        raise BadInput("a centre lies beyond 1e6 mm")
    r = rec["rho"].astype(np.float64)
    if not np.all((r >= 0) & (r <= 1e3)):
        raise BadInput("rho outside [0, 1000] /mm (check --mu-scale)")


def native_bytes(rec, cutoff):
    header = bytearray(128)
    header[0:8] = MAGIC
    struct.pack_into("<IIQIIdd", header, 8, VERSION, 128, len(rec), 48, 0, cutoff, 1.0)
    header[48:48 + len(LAYOUT)] = LAYOUT
    body = rec.tobytes()
    crc = zlib.crc32(bytes(header[:112]))
    crc = zlib.crc32(body, crc)
    struct.pack_into("<I", header, 112, crc & 0xFFFFFFFF)
    return bytes(header) + body


def thesis_bytes(rec):
    n = len(rec)
    parts = [struct.pack("<Q", n), rec["c"].astype("<f4").tobytes(), rec["rho"].astype("<f4").tobytes(),
             rec["s"].astype("<f4").tobytes(), rec["q"].astype("<f4").tobytes()]
    return b"".join(parts)


def write_atomic(path, data):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def vec3(text):
    try:
        v = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("expected X,Y,Z")
    if len(v) != 3 or not all(math.isfinite(x) for x in v):
        raise argparse.ArgumentTypeError("expected X,Y,Z")
    return v


def main(argv):
    ap = argparse.ArgumentParser(prog="r2gaussian_import.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("pickle", help="R2-Gaussian point_cloud.pickle")
    ap.add_argument("out", help="output: .xgmm (native) or .gmm (thesis layout)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--meta", help="the dataset's meta_data.json (sVoxel, mm)")
    g.add_argument("--svoxel", type=vec3, help="the volume's size X,Y,Z in mm (sVoxel)")
    g.add_argument("--scene-scale", type=float, help="R2-Gaussian's scene_scale directly")
    ap.add_argument("--offset", type=vec3, default=[0.0, 0.0, 0.0], help="added to the centres, mm (default 0,0,0)")
    ap.add_argument("--mu-scale", type=float, default=1.0, help="multiplies rho (unit conversion; default 1)")
    ap.add_argument("--cutoff", type=float, default=4.8, help="the model's cut-off radius (default 4.8)")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    low = args.out.lower()
    if not (low.endswith(".xgmm") or low.endswith(".gmm")):
        sys.stderr.write("r2gaussian_import: %s: the output name must end in .xgmm or .gmm\n" % args.out)
        return 2
    if not (math.isfinite(args.mu_scale) and args.mu_scale > 0) or not (2.0 <= args.cutoff <= 8.0):
        sys.stderr.write("r2gaussian_import: --mu-scale must be > 0 and --cutoff in [2, 8]\n")
        return 2
    if args.scene_scale is not None and not (math.isfinite(args.scene_scale) and args.scene_scale > 0):
        sys.stderr.write("r2gaussian_import: --scene-scale must be > 0\n")
        return 2
    try:
        ss = scene_scale_of(args)
        obj = load_checkpoint(args.pickle)
        xyz, s, q, rho = activate(obj)
        centre = xyz / ss + np.asarray(args.offset)[None, :]
        rec = records(centre, s / ss, q, rho * args.mu_scale)
        check_ranges(rec)
        data = native_bytes(rec, args.cutoff) if low.endswith(".xgmm") else thesis_bytes(rec)
    except BadInput as e:
        sys.stderr.write("r2gaussian_import: %s: %s\n" % (args.pickle, e))
        return 1
    try:
        write_atomic(args.out, data)
    except OSError as e:
        sys.stderr.write("r2gaussian_import: %s: %s\n" % (args.out, e.strerror or e))
        return 1
    print("wrote %s: %d Gaussians, %d bytes (scene_scale %.6g)" % (args.out, len(rec), len(data), ss))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
