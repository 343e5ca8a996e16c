#!/usr/bin/python3
"""xtwin-server with the model kinds that are not volumes (issues 8 and 9), over a real socket:
NanoVDB grids (.nvdb) and Gaussian mixtures (.xgmm native, .gmm thesis layout, .gmm.json), given
with --model at start and through POST /v1/models under --model-root.

    /usr/bin/python3 tests/server/test_models.py --server build/server/xtwin-server [test ...]

Oracles are independent of the server's own reading: the mixtures are written here from their
documented byte layouts (docs/models.md: the native header, records and CRC-32; the thesis's
count + arrays; JSON), and the grids are files of our converter (the fuzz seeds
tests/fuzz/nvdb/, 8^3 phantoms) whose counts are read here from NanoVDB's file metadata (grid
bytes, active voxel count), not through PNanoVDB. GET /v1/models must report kind, domain voxels,
active fraction and device bytes (grid rounded up to 32 bytes, + a 256-float table for labels)
for grids, and gaussians, cut-off and file bytes for mixtures; a frame renders with all of them.
Confinement holds for these readers as for the volume readers: a file outside the roots, a
symlink out of them and a '..' path answer 403; a FIFO answers 400 at once (never blocks); a
missing file 404. Exit 0: all passed; 1: a failure; 77: python3-websockets missing.
"""
import json
import os
import shutil
import socket
import struct
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_stream as ts  # noqa: E402  (exits 77 when python3-websockets is missing)
from test_security import JSON, is_error, post_model, request  # noqa: E402
from test_stream import Server, check  # noqa: E402

SEEDS = os.path.join(HERE, "..", "fuzz", "nvdb")
XGMM_LAYOUT = b"centre:f32x3,scale:f32x3,quat_wxyz:f32x4,rho:f32,label:u32"


# ---- independent writers and readers ------------------------------------------------------------

def gaussians(n):
    """n Gaussians inside a 60 mm box: (centre, scale, quat, rho, label)."""
    out = []
    for i in range(n):
        out.append(((-20.0 + 9 * i, 5.0 - 3 * i, 2.0 * i), (4.0 + i, 6.0, 3.0 + 0.5 * i),
                    (0.9, 0.1 * i, 0.2, -0.1), 0.01 + 0.002 * i, i % 8))
    return out


def write_xgmm(path, gs, cutoff):
    """The native file from docs/models.md's table: 128-byte header, 48-byte records, CRC-32 of
    bytes 0-111 continued over the records."""
    recs = b"".join(struct.pack("<3f3f4ffI", *c, *s, *q, rho, lab) for c, s, q, rho, lab in gs)
    head = bytearray(128)
    struct.pack_into("<8sIIQIIdd", head, 0, b"XTGMM\r\n\x1a", 1, 128, len(gs), 48, 1, cutoff, 1.0)
    head[48:48 + len(XGMM_LAYOUT)] = XGMM_LAYOUT
    crc = zlib.crc32(recs, zlib.crc32(bytes(head[:112])))
    struct.pack_into("<I", head, 112, crc)
    with open(path, "wb") as f:
        f.write(bytes(head) + recs)
    return len(head) + len(recs)


def write_thesis(path, gs):
    """The thesis's .gmm (xray-thesis 5.1): u64 count, positions, densities, scales, rotations."""
    b = struct.pack("<Q", len(gs))
    b += b"".join(struct.pack("<3f", *g[0]) for g in gs)
    b += b"".join(struct.pack("<f", g[3]) for g in gs)
    b += b"".join(struct.pack("<3f", *g[1]) for g in gs)
    b += b"".join(struct.pack("<4f", *g[2]) for g in gs)
    with open(path, "wb") as f:
        f.write(b)


def write_json(path, gs, cutoff):
    with open(path, "w") as f:
        json.dump({"name": "hand", "cutoff_sigma": cutoff, "gaussians": [
            {"center": list(c), "scale": list(s), "quat": list(q), "rho": rho} for c, s, q, rho, _ in gs]}, f)


def nvdb_meta(path):
    """NanoVDB 32.x file: 16-byte header, then the first grid's 176-byte metadata: gridSize (u64 @0),
    fileSize (@8), nameKey (@16), voxelCount (@24: active voxels), gridType (u32 @32)."""
    with open(path, "rb") as f:
        b = f.read(16 + 176)
    grid_size, _, _, voxels, gtype = struct.unpack_from("<QQQQI", b, 16)
    return grid_size, voxels, gtype


# ---- the tests ----------------------------------------------------------------------------------

def models_by_name(srv):
    st, _, body = request(srv, "GET", "/v1/models")
    check(st == 200, "GET /v1/models: %d %r" % (st, body))
    return {m["name"]: m for m in body["models"]}


def check_nvdb(m, seed, labels, name):
    grid_size, active, _ = nvdb_meta(os.path.join(SEEDS, seed))
    check(m["kind"] == "nvdb", "%s: kind %r" % (name, m.get("kind")))
    check(m["voxels"] == 8 ** 3, "%s: voxels %r, want 512 (the 8^3 domain)" % (name, m.get("voxels")))
    check(abs(m["active_fraction"] - active / 512.0) < 1e-9,
          "%s: active_fraction %r, want %d/512 from the file's metadata" % (name, m.get("active_fraction"), active))
    want = (grid_size + 31) // 32 * 32 + (256 * 4 if labels else 0)
    check(m["device_bytes"] == want, "%s: device_bytes %r, want %d" % (name, m.get("device_bytes"), want))
    check(m["grid"]["labels"] == labels, "%s: grid %r" % (name, m.get("grid")))


def check_gmm(m, n, cutoff, name, nbytes=None):
    check(m["kind"] == "gmm", "%s: kind %r" % (name, m.get("kind")))
    check(m["gaussians"] == n, "%s: gaussians %r, want %d" % (name, m.get("gaussians"), n))
    check(abs(m["cutoff_sigma"] - cutoff) < 1e-12, "%s: cutoff_sigma %r, want %g" % (name, m.get("cutoff_sigma"), cutoff))
    check(m["device_bytes"] == 296 * n, "%s: device_bytes %r, want 296 a Gaussian" % (name, m.get("device_bytes")))
    if nbytes is not None:
        check(m["bytes"] == nbytes, "%s: bytes %r, want %d" % (name, m.get("bytes"), nbytes))


async def test_models_at_start_and_posted(srv, tmp):
    root = srv.root
    ms = models_by_name(srv)
    check_nvdb(ms["float_head.nvdb"], "float_head.nvdb", False, "--model .nvdb")
    check_gmm(ms["start.xgmm"], 5, 3.5, "--model .xgmm", 128 + 48 * 5)
    shutil.copy(os.path.join(SEEDS, "zip_int16_labels.nvdb"), os.path.join(root, "labels.nvdb"))
    write_xgmm(os.path.join(root, "p.xgmm"), gaussians(3), 6.0)
    write_thesis(os.path.join(root, "p.gmm"), gaussians(4))
    write_json(os.path.join(root, "p.gmm.json"), gaussians(2), 2.5)
    for f in ("labels.nvdb", "p.xgmm", "p.gmm", "p.gmm.json"):
        st, _, body = post_model(srv, os.path.join(root, f))
        check(st == 201, "POST /v1/models %s: %d %r" % (f, st, body))
    ms = models_by_name(srv)
    check_nvdb(ms["labels.nvdb"], "zip_int16_labels.nvdb", True, "POST .nvdb (ZIP, Int16 labels)")
    check_gmm(ms["p.xgmm"], 3, 6.0, "POST .xgmm", 128 + 48 * 3)
    check_gmm(ms["p.gmm"], 4, 4.8, "POST .gmm (default cut-off)")
    check_gmm(ms["p.gmm.json"], 2, 2.5, "POST .gmm.json")
    check(len(ms) == 6, "6 models (2 at start, 4 posted; --model replaces the head): %r" % sorted(ms))
    st, h, body = request(srv, "POST", "/v1/render?format=npy", json.dumps({"pixel_format": "float32"}), JSON)
    check(st == 200 and h.get("content-type", "").startswith("application/") and len(body) > 64 * 64 * 4,
          "a frame of all six: %d %r" % (st, body if isinstance(body, dict) else len(body)))


async def test_confined_and_never_blocking(srv, tmp):
    root, out = srv.root, os.path.join(tmp, "outside")
    os.makedirs(out)
    shutil.copy(os.path.join(SEEDS, "float_head.nvdb"), os.path.join(out, "secret.nvdb"))
    write_xgmm(os.path.join(out, "secret.xgmm"), gaussians(2), 4.8)
    write_thesis(os.path.join(out, "secret.gmm"), gaussians(2))
    write_json(os.path.join(out, "secret.gmm.json"), gaussians(2), 4.8)
    for f in ("secret.nvdb", "secret.xgmm", "secret.gmm", "secret.gmm.json"):
        os.symlink(os.path.join(out, f), os.path.join(root, "link-" + f))
        for p in (os.path.join(out, f), os.path.join(root, "..", "outside", f), os.path.join(root, "link-" + f)):
            is_error(*post_model(srv, p), 403, "PERM")
        os.mkfifo(os.path.join(root, "pipe-" + f))
        try:
            st, h, body = post_model(srv, os.path.join(root, "pipe-" + f), timeout=20)
        except socket.timeout:
            raise ts.Failure("POST /v1/models with a FIFO named %s blocked" % f)
        is_error(st, h, body, 400, "INVAL")
        check("regular file" in body["error"]["message"], "FIFO %s: %r" % (f, body))
        is_error(*post_model(srv, os.path.join(root, "nope-" + f)), 404, "NOTFOUND")
    ms = models_by_name(srv)
    check(len(ms) == 1, "nothing loaded: %r" % sorted(ms))
    st, _, _ = request(srv, "GET", "/v1/health")
    check(st == 200, "still serving")


TESTS = [
    (test_models_at_start_and_posted, ["--model", "{seeds}/float_head.nvdb", "--model", "{tmp}/start.xgmm"]),
    (test_confined_and_never_blocking, []),
]


def run_one(fn, extra, timeout):
    import asyncio
    tmp = tempfile.mkdtemp(prefix="xtwin-models-")
    srv = None
    try:
        root = os.path.join(tmp, "models")
        os.makedirs(root)
        write_xgmm(os.path.join(tmp, "start.xgmm"), gaussians(5), 3.5)
        args = [a.replace("{seeds}", os.path.abspath(SEEDS)).replace("{tmp}", tmp) for a in extra]
        srv = Server("--model-root", root, *args)
        srv.root = root
        asyncio.run(asyncio.wait_for(fn(srv, tmp), timeout))
        srv.stop()
        return None
    except Exception as e:  # noqa: BLE001 - a test's failure, reported and counted
        return ts.failure(e, srv)
    finally:
        if srv:
            srv.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(ts.run_main(TESTS, run_one))
