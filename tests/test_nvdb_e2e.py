#!/usr/bin/python3
"""NanoVDB models end to end, through the real binaries (issue 9, "everywhere models go").

  xtwin nvdb-convert  writes .nvdb files (labels fp8, mu float with a tolerance, zip) that
                      Debian's nanovdb_validate accepts (when installed); a refused conversion
                      leaves no file
  xtwin render        renders them like the volumes they came from (the CPU backend; float32
                      output, so equal to float rounding), and a truncated one fails in one line;
                      --volume X --add Y,Z with a dense volume, a thesis .gmm and a grid renders as
                      the sum of the three rendered alone
  xtwin-server        loads one with --model and one through POST /v1/models (next to the dense
                      head), reports kind, voxels, active fraction and device bytes, and renders

Usage: test_nvdb_e2e.py XTWIN XTWIN_SERVER SCRATCH_DIR  (exit 77 = skipped: no numpy)
"""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy missing (python3-numpy)")
    sys.exit(77)

XTWIN, SERVER, SCRATCH = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("  FAIL:", what)


def run(*args, ok=True):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=300)
    if ok and r.returncode != 0:
        raise SystemExit("command failed: %s\n%s" % (" ".join(args), r.stderr))
    return r


shutil.rmtree(SCRATCH, ignore_errors=True)
os.makedirs(SCRATCH)
P = lambda name: os.path.join(SCRATCH, name)
small = ["--phantom-size", "96", "--phantom-spacing", "2"]

# --- conversion ----------------------------------------------------------------------------------
run(XTWIN, "nvdb-convert", "--phantom", "head-labels", *small, "--quant", "fp8", "--out", P("labels.nvdb"))
run(XTWIN, "nvdb-convert", "--phantom", "head", *small, "--tolerance", "0", "--zip", "--name", "mu",
    "--out", P("sub/mu.nvdb"))
check(os.path.getsize(P("sub/mu.nvdb")) > 1000, "zip file written into a created directory")
# mu by default in the index form (an IndexGrid and its value channel); --quant float for NanoVDB's
# own validator, which does not take Index grids (Debian's 32.4 nanovdb_validate)
run(XTWIN, "nvdb-convert", "--phantom", "head", *small, "--tolerance", "0", "--quant", "float", "--out", P("muf.nvdb"))
r = run(XTWIN, "nvdb-convert", "--phantom", "head-labels", "--quant", "fp4", "--out", P("bad.nvdb"), ok=False)
check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and not os.path.exists(P("bad.nvdb")),
      "fp4 labels refused in one line, no file: %r" % r.stderr)
r = run(XTWIN, "nvdb-convert", "--phantom", "head", "--out", P("x.vdb"), ok=False)
check(r.returncode == 2 and "nvdb" in r.stderr, "--out must end in .nvdb")
if shutil.which("nanovdb_validate"):
    for f in ("labels.nvdb", "muf.nvdb"):
        v = run("nanovdb_validate", "-v", P(f), ok=False)
        check(v.returncode == 0 and "passed" in v.stdout, "nanovdb_validate %s: %s" % (f, v.stdout + v.stderr))
if shutil.which("nanovdb_print"):
    v = run("nanovdb_print", "-l", P("sub/mu.nvdb"), ok=False)
    row = [ln.split() for ln in v.stdout.splitlines() if " mu " in ln]
    check(v.returncode == 0 and row and row[0][2:4] == ["Index", "INDEX"],
          "nanovdb_print reads the default mu grid as an Index grid: %s" % (v.stdout + v.stderr))

# --- render: the grid like its volume ------------------------------------------------------------
for grid, phantom in (("labels.nvdb", "head-labels"), ("sub/mu.nvdb", "head"), ("muf.nvdb", "head")):
    run(XTWIN, "render", "--volume", P(grid), "--mode", "fd20-128", "--primary", "30", "--out", P("r/nvdb"))
    run(XTWIN, "render", "--phantom", phantom, *small, "--mode", "fd20-128", "--primary", "30", "--out", P("r/vol"))
    a, b = np.load(P("r/nvdb.npy")), np.load(P("r/vol.npy"))
    err = float(np.abs(a - b).max() / np.abs(b).max())
    check(err < 1e-6, "render of %s equals the volume's: max relative difference %.3g" % (grid, err))
    meta = json.load(open(P("r/nvdb.json")))
    check(meta["model"]["kind"] == "nvdb", "sidecar names the kind")
r = run(XTWIN, "render", "--volume", P("labels.nvdb"), "--grid-name", "nonesuch", "--out", P("r/x"), ok=False)
check(r.returncode == 1 and "no grid named" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
      "--grid-name with a wrong name: %r" % r.stderr)
data = open(P("labels.nvdb"), "rb").read()
open(P("cut.nvdb"), "wb").write(data[: len(data) // 2])
r = run(XTWIN, "render", "--volume", P("cut.nvdb"), "--out", P("r/cut"), ok=False)
check(r.returncode == 1 and "truncated" in r.stderr and len(r.stderr.strip().splitlines()) == 1
      and not os.path.exists(P("r/cut.npy")), "truncated file: %r" % r.stderr)

# --- a mixed scene through the CLI: --volume X --add Y,Z renders as the sum of the three alone ----
# (issue 9 Deliver 5, issue 8 Deliver 6). A dense MetaImage volume written here with numpy, a
# mixture in the thesis's .gmm layout written here (xray-thesis 5.1: u64 count, positions,
# densities, scales, rotations w,x,y,z), and the label grid; native placement, so that each model
# stays where its file puts it whichever is the main one. Frames are float32: the scene equals the
# sum of the three frames to float rounding (4 roundings of 2^-24), in either order of the models.
vol = np.zeros((24, 32, 40), np.float32)  # z, y, x
z, y, x = np.mgrid[0:24, 0:32, 0:40]
vol[(x - 22) ** 2 + (y - 14) ** 2 + (z - 12) ** 2 < 100] = 0.03
vol[(x - 10) ** 2 + (y - 20) ** 2 + (z - 8) ** 2 < 30] = 0.06
os.makedirs(P("mix"), exist_ok=True)
with open(P("mix/v.mha"), "wb") as f:
    f.write(b"ObjectType = Image\nNDims = 3\nDimSize = 40 32 24\nElementSpacing = 1.5 1.5 2\n"
            b"Offset = -40 -20 -30\nElementType = MET_FLOAT\nElementDataFile = LOCAL\n" + vol.tobytes())
gs = [((-20.0 + 7 * i, 10.0 - 4 * i, -5.0 + 3 * i), 0.01 + 0.003 * i, (3.0 + i, 6.0, 4.0), (0.9, 0.1 * i, 0.3, -0.2))
      for i in range(6)]
with open(P("mix/g.gmm"), "wb") as f:
    f.write(np.uint64(len(gs)).tobytes() + np.array([g[0] for g in gs], "<f4").tobytes()
            + np.array([g[1] for g in gs], "<f4").tobytes() + np.array([g[2] for g in gs], "<f4").tobytes()
            + np.array([g[3] for g in gs], "<f4").tobytes())
view = ["--mode", "fd20-128", "--primary", "30", "--secondary", "10", "--place", "native", "--convert", "mu"]
frames = {}
for name, args in (("v", ["--volume", P("mix/v.mha")]), ("g", ["--volume", P("mix/g.gmm")]),
                   ("n", ["--volume", P("labels.nvdb")]),
                   ("vgn", ["--volume", P("mix/v.mha"), "--add", P("mix/g.gmm") + "," + P("labels.nvdb")]),
                   ("ngv", ["--volume", P("labels.nvdb"), "--add", P("mix/g.gmm") + "," + P("mix/v.mha")])):
    run(XTWIN, "render", *args, *view, "--out", P("mix/" + name))
    frames[name] = np.load(P("mix/%s.npy" % name)).astype(np.float64)
total = frames["v"] + frames["g"] + frames["n"]
for name in ("vgn", "ngv"):
    err = float(np.max(np.abs(frames[name] - total) - 4 * 2.0 ** -24 * total))
    check(err <= 0, "scene %s = sum of the three alone to float rounding: excess %.3g" % (name, err))
check(min(frames[k].max() for k in "vgn") > 0 and np.count_nonzero((frames["v"] > 0) & (frames["g"] > 0)
                                                                    & (frames["n"] > 0)) > 0,
      "each model in view, some pixels see all three")
meta = json.load(open(P("mix/vgn.json")))
check(len(json.dumps(meta)) > 0 and "nvdb" in json.dumps(meta) and "gmm" in json.dumps(meta),
      "the sidecar lists the added kinds: %s" % json.dumps(meta)[:300])

# --- server --------------------------------------------------------------------------------------
ports = P("ports.json")
log = open(P("server.log"), "w")
srv = subprocess.Popen([SERVER, "--rest-port", "0", "--ws-port", "0", "--backend", "cpu", "--threads", "2",
                        "--mode", "fd20-128", "--fps", "5", "--phantom", "head", "--phantom-dim", "64",
                        "--phantom-spacing", "3", "--ports-file", ports, "--model", P("labels.nvdb"),
                        "--model-root", SCRATCH],  # POST /v1/models loads only from there
                       stdout=log, stderr=log)
try:
    t0 = time.time()
    while not os.path.exists(ports) and time.time() - t0 < 60 and srv.poll() is None:
        time.sleep(0.1)
    check(os.path.exists(ports), "server started (see %s)" % P("server.log"))
    base = "http://127.0.0.1:%d" % json.load(open(ports))["rest"]

    def http(method, path, body=None):
        req = urllib.request.Request(base + path, method=method, data=None if body is None else
                                     json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    st, body = http("POST", "/v1/models", {"path": P("sub/mu.nvdb"), "name": "mu-grid"})
    check(st == 201, "POST /v1/models .nvdb: %d %s" % (st, body[:200]))
    st, body = http("POST", "/v1/models", {"path": P("cut.nvdb")})
    check(st == 400 and b"truncated" in body, "POST of a truncated grid: %d %s" % (st, body[:200]))
    st, body = http("GET", "/v1/models")
    models = json.loads(body)
    models = models["models"] if isinstance(models, dict) else models
    kinds = sorted(m["kind"] for m in models)
    check(kinds.count("nvdb") == 2, "two nvdb models listed: %s" % kinds)
    for m in models:
        if m["kind"] != "nvdb":
            continue
        check(m["voxels"] == 96 ** 3 and 0 < m["active_fraction"] < 1 and m["device_bytes"] > 0,
              "nvdb report: %s" % m)
        check(m["grid"]["type"] in ("fp8", "index"), "grid type reported: %s" % m["grid"])
    st, body = http("POST", "/v1/render?format=npy", {"pixel_format": "float32", "mode": "fd20-128"})
    check(st == 200 and len(body) > 128 * 128 * 4, "render with dense + two nvdb models: %d" % st)
finally:
    srv.terminate()
    srv.wait(timeout=30)
    log.close()

print("%d passed, %d failed" % (1 if not failures else 0, len(failures)))
sys.exit(1 if failures else 0)
