#!/usr/bin/python3
"""End-to-end tests of the imaging chain in `xtwin dataset` (the real binary, CPU backend):

- every frame is reproduced by `xtwin render --chain` from the frame's metadata alone (its pose and
  every chain parameter the metadata lists, --seed and --frame): raw and processed identical byte
  for byte, with noise off and with noise on (the render's 16-bit PNGs decoded by test_cli.py's
  reader, not by xtwin), and the render sidecar's parameter list equal to the
  frame's (every parameter, by the chain's own table);
- dose_ngy: the frame's mAs gives that air kerma at the SID by the render sidecar's kerma per mAs
  at 1 m and the inverse square law;
- noise on: the same spec gives byte-identical shards whatever the split (--shard I/N), the batch
  size and the writer count;
- bad chain keys and values: exit 2 and one stderr line naming the JSON key, nothing written;
- a Gaussian mixture in the scene: the chain sees it (its material channels), the frame darkens
  where it is.

usage: test_dataset_chain.py XTWIN SOURCE_DIR SCRATCH_DIR     exit 0 pass, 1 fail, 77 skip (no numpy)"""
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("skip: python3-numpy is not installed")
    sys.exit(77)

XTWIN, SRC, SCRATCH = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(SRC, "api", "python"))
import xtwin_dataset as xd  # noqa: E402

# test_cli.py's check() and its 16-bit PNG reader (chunks and CRCs, zlib, the five scanline
# filters; not xtwin's code). That script reads its arguments when imported: it gets these.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
_argv, sys.argv = sys.argv, [sys.argv[0], XTWIN, os.path.join(SRC, "tools", "xt_render_cmd.c"), SCRATCH]
from test_cli import check, failures, read_png16_gray as read_png16  # noqa: E402
sys.argv = _argv

def env():
    e = dict(os.environ)
    for k in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP",
              "JOB_COMPLETION_INDEX", "XTWIN_SHARD_COUNT"):
        e.pop(k, None)
    return e


def dataset(*args):
    p = subprocess.run([XTWIN, "dataset", *args, "--threads", "1", "--progress", "none"], capture_output=True,
                       text=True, timeout=600, env=env())
    return p.returncode, p.stderr


def fresh(name):
    d = os.path.join(SCRATCH, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def write_spec(d, spec):
    p = os.path.join(d, "spec.json")
    with open(p, "w") as f:
        json.dump(spec, f, indent=1)
    return p


def sha(p):
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def one_line_error(rc, err, want_rc, pattern, what):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    ok = check(rc == want_rc, f"{what}: exit {rc}, want {want_rc} ({err.strip()})")
    ok &= check(len(lines) == 1, f"{what}: {len(lines)} stderr lines: {err!r}")
    ok &= check(bool(lines) and re.search(pattern, lines[-1]) is not None, f"{what}: {err.strip()!r} !~ {pattern!r}")
    return ok


HEAD = {"name": "head", "phantom": "head-labels", "size": 32, "spacing_mm": 6}
QUIET = {"seed": 4242, "frames": 6, "backend": "cpu", "detector": {"modes": ["fd20-128"]}, "models": [HEAD],
         "poses": {"primary_deg": [-90, 90], "secondary_deg": [-20, 20]},
         "chain": {"kv": [60, 90], "mas": 0.004, "noise": False, "filter_cu_mm": 0.2, "lag": 0},
         "output": {"shard_frames": 3}}
NOISY = {"seed": 9007199254741001, "frames": 12, "backend": "cpu", "detector": {"modes": ["fd20-128"]}, "models": [HEAD],
         "poses": {"primary_deg": [-90, 90], "secondary_deg": [-20, 20], "sid_mm": [1000, 1200]},
         "chain": {"kv": [60, 90], "dose_ngy": [200, 800], "binning": 2, "panel_seed": 5},
         "write": {"lineint": False, "intensity": True},
         "output": {"shard_frames": 3}}


def render_frame(d, meta, name):
    """`xtwin render --chain` of one dataset frame from its metadata: raw, processed, sidecar."""
    ch = meta["imaging"]["chain"]
    args = [XTWIN, "render", "--phantom", "head-labels", "--phantom-size", "32", "--phantom-spacing", "6",
            "--mode", meta["detector"]["mode"], "--threads", "1", "--chain", "--frame", str(ch["frame"]),
            "--out", os.path.join(d, name)]
    for k, opt in (("primary_deg", "--primary"), ("secondary_deg", "--secondary"), ("sod_mm", "--sod"),
                   ("sid_mm", "--sid")):
        args += [opt, repr(meta["pose"][k])]
    for k, v in ch["parameters"].items():
        args += ["--" + k.replace("_", "-"), repr(v)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"render {name}: exit {p.returncode}: {p.stderr}")
    base = os.path.join(d, name)
    with open(base + ".json") as f:
        side = json.load(f)
    return read_png16(base + "_raw.png"), read_png16(base + "_proc.png"), side


def compare_with_render(name, spec, frames):
    d = fresh(name)
    out = os.path.join(d, "out")
    rc, err = dataset(write_spec(d, spec), "--out", out)
    check(rc == 0, f"{name}: exit {rc}: {err}")
    ds = xd.open_dataset(out)
    check(len(ds) == spec["frames"] and ds.verify() == [], f"{name}: all frames, checksums right")
    b = spec["chain"].get("binning", 1)
    seen = 0
    for f in ds:
        m = f["meta"]
        ch = m["imaging"]["chain"]
        check(f["raw"].dtype == np.uint16 and f["processed"].dtype == np.uint16, f"{name}: uint16 frames")
        check(f["raw"].shape == (128 // b, 128 // b) == (ch["files"]["rows"], ch["files"]["cols"]),
              f"{name}: frame shape {f['raw'].shape} with binning {b}")
        check(ch["frame"] == f["frame"], f"{name}: the chain's frame number is the frame index")
        check(ch["parameters"]["seed"] == spec["seed"] % 2**53, f"{name}: noise seed = spec seed mod 2^53")
        check(60 <= ch["parameters"]["kv"] <= 90, f"{name}: kv drawn in range")
        check(int(f["raw"].max()) <= 2**ch["parameters"]["adc_bits"] - 1 and int(f["processed"].max()) <= 4095,
              f"{name}: codes within the ADC and the 12 stored bits")
        # the big pixels of fd20-128 need the low gain: a saturated frame would hide its noise
        check((f["raw"] == 2**ch["parameters"]["adc_bits"] - 1).mean() < 0.05, f"{name}: frame {f['frame']} not saturated")
        if f["frame"] not in frames:
            continue
        raw, proc, side = render_frame(d, m, f"r{f['frame']}")
        check(np.array_equal(raw, f["raw"]), f"{name} frame {f['frame']}: raw == render --chain "
                                             f"({int((raw != f['raw']).sum())} pixels differ)")
        check(np.array_equal(proc, f["processed"]), f"{name} frame {f['frame']}: processed == render --chain "
                                                    f"({int((proc != f['processed']).sum())} pixels differ)")
        check(side["chain"]["parameters"] == ch["parameters"],
              f"{name} frame {f['frame']}: the metadata lists every parameter of the chain's table, as render does")
        check(side["chain"]["frame"] == ch["frame"], f"{name}: same frame number")
        if spec["chain"].get("noise", True):  # the control: another frame number draws other noise
            other = dict(m, imaging=dict(m["imaging"], chain=dict(ch, frame=ch["frame"] + 1)))
            raw2, _, _ = render_frame(d, other, f"x{f['frame']}")
            check(not np.array_equal(raw2, f["raw"]), f"{name} frame {f['frame']}: frame number + 1 gives other noise")
        if "dose_ngy" in ch:  # air kerma at the detector without patient: mAs x K(1 m) x (1000/SID)^2
            k1 = side["chain"]["derived"]["air_kerma_ugy_per_mas_at_1m"]
            dose = ch["parameters"]["mas"] * k1 * (1000.0 / m["pose"]["sid_mm"]) ** 2 * 1000.0
            check(abs(dose / ch["dose_ngy"] - 1) < 1e-9 and 200 <= ch["dose_ngy"] <= 800,
                  f"{name}: dose {ch['dose_ngy']} nGy vs mAs x kerma: {dose}")
        seen += 1
    check(seen == len(frames), f"{name}: compared {seen} frames")
    return out


print("== noise off: frames == xtwin render --chain")
compare_with_render("quiet", QUIET, {0, 4})
print("== noise on, dose and SID ranges, 2x2 binning: frames == xtwin render --chain --seed --frame")
ref = compare_with_render("noisy", NOISY, {1, 10})

print("== noise on: byte-identical shards for any split, batch and writer count")
shards = sorted(os.path.relpath(p, ref) for p in glob.glob(os.path.join(ref, "shards", "shard-*.tar")))
check(len(shards) == 4, f"4 shards: {shards}")
d = fresh("split")
sp = write_spec(d, NOISY)
for args in (["--shard", "0/3"], ["--shard", "1/3"], ["--shard", "2/3", "--batch", "1", "--writers", "2"]):
    rc, err = dataset(sp, "--out", os.path.join(d, "tasks"), *args)
    check(rc == 0, f"{args}: exit {rc}: {err}")
rc, err = dataset(sp, "--out", os.path.join(d, "one"), "--batch", "2", "--writers", "1")
check(rc == 0, f"--batch 2: exit {rc}: {err}")
for rel in shards:
    for where in ("tasks", "one"):
        p = os.path.join(d, where, rel)
        check(os.path.isfile(p) and sha(p) == sha(os.path.join(ref, rel)), f"{where}: {rel} == the single run's")
with open(os.path.join(ref, "dataset.json")) as fh:
    members = {m["ext"]: m for m in json.load(fh)["members"]}
check(members["raw.npy"]["dtype"] == "<u2" and members["raw.npy"]["shape"] == "(rows / 2, cols / 2)" ==
      members["processed.npy"]["shape"], f"dataset.json: binned chain members {members}")
a = xd.open_dataset(ref)
frames = list(a)
check(not np.array_equal(frames[0]["raw"], frames[1]["raw"]), "frames differ")

print("== bad chain keys and values: one line naming the key, nothing written")
bad = [({"kvp": 70}, r'spec\.json: chain\.kvp: unknown field \(did you mean "kv"\?\)'),
       ({"filter_cu_mm": 9}, r"spec\.json: chain\.filter_cu_mm: 9 outside \[0, 2\]"),
       ({"adc_bits": 12.5}, r"spec\.json: chain\.adc_bits: 12\.5 is not a whole number"),
       ({"lag": "on"}, r"spec\.json: chain\.lag: expected a number, got a string"),
       ({"kv": [90, 60]}, r"spec\.json: chain\.kv: \[90, 60\]: lo > hi"),
       ({"seed": 3}, r"spec\.json: chain\.seed: not settable"),
       ({"mas": 1, "dose_ngy": 100}, r"spec\.json: chain\.mas: give mas or dose_ngy, not both"),
       ({"noise": False, "e_noise_adu": 2}, r"spec\.json: chain\.e_noise_adu: conflicts with"),
       ({"lag_frac_1": 0.45, "lag_frac_2": 0.46}, r"spec\.json: chain\.lag_frac_\*: fractions sum to"),
       ({"dose_ngy": [0.001, 1]}, r"spec\.json: chain\.dose_ngy: 0\.001 nGy at 60 kV and SID 1195 mm needs .* mAs"),
       ("on", r"spec\.json: chain: expected an object, got a string")]
for i, (chain, pattern) in enumerate(bad):
    d = fresh(f"bad{i}")
    spec = dict(QUIET, chain=chain if not isinstance(chain, dict) else dict({"kv": [60, 90]}, **chain))
    out = os.path.join(d, "out")
    rc, err = dataset(write_spec(d, spec), "--out", out)
    one_line_error(rc, err, 2, pattern, f"chain {chain}")
    check(not os.path.exists(out), f"chain {chain}: nothing written")
d = fresh("badwrite")
rc, err = dataset(write_spec(d, dict(QUIET, write={"raw": False, "processed": False})), "--out", os.path.join(d, "o"))
one_line_error(rc, err, 2, r'spec\.json: write: a "chain" but neither raw nor processed', "chain shaping nothing")

print("== a Gaussian mixture is seen by the chain (its material channels: soft tissue without labels)")
d = fresh("gmm")
with open(os.path.join(d, "blob.gmm.json"), "w") as f:
    json.dump({"gaussians": [{"center": [0, 0, 0], "scale": 10, "rho": 0.02}]}, f)
spec = dict(QUIET, frames=2, models=[{"name": "blob", "file": "blob.gmm.json"}])
out = os.path.join(d, "out")
rc, err = dataset(write_spec(d, spec), "--out", out)
check(rc == 0, f"gmm with a chain: exit {rc}: {err}")
if rc == 0:
    for f in xd.open_dataset(out):
        raw = f["raw"].astype(float) - f["meta"]["imaging"]["chain"]["parameters"]["offset_adu"]
        # the blob (line integral up to rho sigma sqrt(2 pi) = 0.5 through its centre) darkens the
        # middle of the frame's signal well beyond the panel's 3 % gain and 20 ADU offset patterns
        centre, edge = np.median(raw[56:72, 56:72]), np.median(np.concatenate([raw[:16].ravel(), raw[-16:].ravel()]))
        check(centre < 0.85 * edge, f"gmm frame {f['frame']}: signal centre {centre} vs edge {edge}: the chain sees it")

print("OK" if not failures else f"{len(failures)} FAILED")
sys.exit(1 if failures else 0)
