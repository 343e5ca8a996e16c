#!/usr/bin/python3
"""End-to-end tests of `xtwin dataset` (the real binary, CPU backend, small frames):
outputs read back through Python's tarfile, GNU tar and api/python/xtwin_dataset.py; metadata
against independent facts (the documented seed formula, landmarks through P, seg bits = channels
> 0, intensity = round(65535 exp(-L))); byte-identical reruns; --shard I/N and the Slurm and
Kubernetes variables whose manifests concatenate to the single run's; a run killed with SIGKILL
and restarted; --verify remaking a corrupted shard; bad input (spec, model, options, environment),
a full disk and an unwritable directory: one stderr line, no partial files, finished shards intact.

usage: test_dataset.py XTWIN SOURCE_DIR SCRATCH_DIR     exit 0 pass, 1 fail, 77 skip (no numpy)"""
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time

try:
    import numpy as np
except ImportError:
    print("skip: python3-numpy is not installed")
    sys.exit(77)

XTWIN, SRC, SCRATCH = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(SRC, "api", "python"))
import xtwin_dataset as xd  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("  FAIL:", what)
    return cond


def run(*args, env=None, timeout=300):
    e = dict(os.environ)
    for k in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP",
              "JOB_COMPLETION_INDEX", "XTWIN_SHARD_COUNT"):
        e.pop(k, None)
    e.update(env or {})
    p = subprocess.run([XTWIN, "dataset", *args], capture_output=True, text=True, timeout=timeout, env=e)
    return p.returncode, p.stdout, p.stderr


def fresh(name):
    d = os.path.join(SCRATCH, name)
    if os.path.ismount(d):
        subprocess.run(["umount", d], capture_output=True)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def write_spec(d, spec, name="spec.json"):
    p = os.path.join(d, name)
    with open(p, "w") as f:
        json.dump(spec, f, indent=1)
    return p


def files(d):
    return sorted(os.path.relpath(p, d) for p in glob.glob(os.path.join(d, "**"), recursive=True)
                  if os.path.isfile(p)) + sorted(
        os.path.relpath(p, d) for p in glob.glob(os.path.join(d, "**", ".*"), recursive=True))


def sha(p):
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def one_line_error(rc, err, want_rc, pattern, what):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    ok = check(rc == want_rc, f"{what}: exit {rc}, want {want_rc} ({err.strip()})")
    ok &= check(len(lines) == 1, f"{what}: {len(lines)} stderr lines: {err!r}")
    ok &= check(bool(lines) and re.search(pattern, lines[-1]) is not None, f"{what}: {err.strip()!r} !~ {pattern!r}")
    return ok


SPEC = {
    "seed": 4242,
    "frames": 12,
    "backend": "cpu",
    "detector": {"modes": ["fd20-128"]},
    "models": [{"name": "head", "phantom": "head-labels", "size": 32, "spacing_mm": 6,
                "perturb": {"translate_mm": 5, "rotate_deg": [0, 0, 10]}}],
    "poses": {"primary_deg": [-90, 90], "secondary_deg": [-20, 20], "table_mm": [0, 0, [-10, 10]]},
    "labels": {"channels": [{"name": "bone", "model": "head", "labels": ["bone"]},
                            {"name": "brain", "model": "head", "labels": [3]}]},
    "landmarks": [{"name": "vertex", "model": "head", "position_mm": [0, 0, 85]},
                  {"name": "far", "model": "head", "position_mm": [0, 0, 900]}],
    "write": {"intensity": True},
    "output": {"shard_frames": 3},
}
SMALL = ["--threads", "1"]


def make(name, spec=SPEC, extra=(), env=None):
    d = fresh(name)
    p = write_spec(d, spec)
    out = os.path.join(d, "out")
    prog = [] if "--progress" in extra else ["--progress", "none"]
    rc, so, se = run(p, "--out", out, *SMALL, *prog, *extra, env=env)
    return d, p, out, rc, se


# --- a run, read back three ways -------------------------------------------------------------

print("== run and read back")
d, spec_path, ref, rc, err = make("ref", extra=("--writers", "2"))
check(rc == 0, f"reference run: exit {rc}: {err}")
check("bottleneck:" in err, "the summary names a bottleneck")
# progress: plain lines without a terminal, a bar (carriage returns) when asked
_, _, _, rc, err = make("lines", extra=("--progress", "lines"))
check(rc == 0 and re.search(r"^xtwin dataset: 12/12 frames \(100\.0%\), \d+ frames/s, .* ETA ", err, re.M) is not None,
      f"--progress lines: {err}")
db = fresh("bar")
pb = subprocess.run([XTWIN, "dataset", write_spec(db, SPEC), "--out", os.path.join(db, "out"), "--progress", "bar",
                     *SMALL], capture_output=True, timeout=300)  # bytes: text mode would turn \r into \n
check(pb.returncode == 0 and b"\r[##############################] 100.0% 12/12 frames" in pb.stderr and b"ETA" in pb.stderr,
      f"--progress bar: {pb.stderr!r}")
ds = xd.open_dataset(ref)
check(len(ds) == 12 and ds.missing == [] and len(ds.shards) == 4, f"12 frames in 4 shards ({len(ds)}, {ds.missing})")
check(ds.verify() == [], "every shard matches its SHA-256 (hashlib)")
check(ds.channels == ["bone", "brain"], "channel names")
for e in ds.shards:
    check(sha(ds.shard_path(e)) == e["sha256"], f"shard {e['shard']}: sha256 of the file")
    listing = subprocess.run(["tar", "-tvf", ds.shard_path(e)], capture_output=True, text=True)
    check(listing.returncode == 0 and len(listing.stdout.splitlines()) == 3 * 5, f"GNU tar lists shard {e['shard']}")
    with tarfile.open(ds.shard_path(e)) as tf:
        names = tf.getnames()
    want = [f"{k:012d}.{x}" for k in range(e["first_frame"], e["first_frame"] + 3)
            for x in ("lineint.npy", "intensity.npy", "labels.npy", "seg.npy", "json")]
    check(names == want, f"shard {e['shard']} members in order: {names[:3]}...")
n = 0
for f in ds:
    m = f["meta"]
    L, lab, seg, inten = f["lineint"], f["labels"], f["seg"], f["intensity"]
    check(L.dtype == np.float32 and L.shape == (128, 128), "lineint float32 (128, 128)")
    check(lab.shape == (2, 128, 128) and seg.dtype == np.uint8, "labels (2, rows, cols), seg uint8")
    check(f["frame"] == n and m["frame"] == n and m["key"] == f"{n:012d}", "frames in order")
    check(int(m["seed"], 16) == xd.frame_seed(4242, n), "the documented per-frame seed")
    check(np.array_equal(xd.seg_bits(seg, 2), lab > 0), "seg bit k == channel k > 0")
    want_i = np.minimum(np.floor(65535.0 * np.exp(-L.astype(np.float64)) + 0.5), 65535).astype(np.uint16)
    check(np.array_equal(inten, want_i), "intensity = round(65535 exp(-L))")
    check(L.min() >= 0 and L.max() > 1 and lab[0].max() > 5, "the head is in view, with bone")
    P = np.array(m["geometry"]["P"])
    g = m["geometry"]
    uv, depth = xd.project(P, [g["det_center"]])
    check(np.allclose(uv[0], g["principal_point"], atol=1e-6), "P sends the detector centre to the principal point")
    uve, _ = xd.project(g["P_pixel_edge"], [g["det_center"]])
    check(np.allclose(uve[0], np.array(g["principal_point"]) + 0.5, atol=1e-6), "P_pixel_edge: centres at +0.5")
    for lm in m["landmarks"]:
        uv, depth = xd.project(P, [lm["world_mm"]])
        check(np.allclose(uv[0], lm["uv"], atol=1e-6) and abs(depth[0] - lm["depth_mm"]) < 1e-6, "landmark uv = P X")
        inside = 0 <= uv[0][0] + 0.5 <= 128 and 0 <= uv[0][1] + 0.5 <= 128
        check(lm["visible"] == inside, f"landmark {lm['name']} visibility")
    check(m["landmarks"][1]["visible"] is False, "a landmark 900 mm up is out of view")
    check(m["imaging"]["chain"] is None and m["pose"]["sod_mm"] == 810, "imaging parameters recorded")
    n += 1
check(n == 12, "12 frames iterated")

# --- byte-identical reruns, sharding, Slurm and Kubernetes variables ------------------------

print("== reproducible, sharded, merged")
# other writers and batches: the frames, not the scheduling, decide the bytes
d2, _, again, rc, err = make("again", extra=("--writers", "3", "--batch", "2", "--io", "direct"))
check(rc == 0, f"second run: {err}")
for rel in ["spec.json", "dataset.json", "manifest-00000-of-00001.jsonl"] + [
        f"shards/shard-{i:06d}.{x}" for i in range(4) for x in ("tar", "json")]:
    check(sha(os.path.join(ref, rel)) == sha(os.path.join(again, rel)), f"{rel}: byte-identical on a rerun")

d3 = fresh("tasks")
p3 = write_spec(d3, SPEC)
out3 = os.path.join(d3, "out")
rc0, _, e0 = run(p3, "--out", out3, "--shard", "0/3", *SMALL)
rc1, _, e1 = run(p3, "--out", out3, *SMALL, env={"SLURM_ARRAY_TASK_ID": "11", "SLURM_ARRAY_TASK_MIN": "10",
                                                "SLURM_ARRAY_TASK_COUNT": "3"})
rc2, _, e2 = run(p3, "--out", out3, *SMALL, env={"JOB_COMPLETION_INDEX": "2", "XTWIN_SHARD_COUNT": "3"})
check(rc0 == rc1 == rc2 == 0, f"three tasks: {e0}{e1}{e2}")
mans = sorted(glob.glob(os.path.join(out3, "manifest-*-of-00003.jsonl")))
check(len(mans) == 3, f"three task manifests: {mans}")
lines = sorted(ln for p in mans for ln in open(p).read().splitlines())
with open(os.path.join(ref, "manifest-00000-of-00001.jsonl")) as f:
    ref_lines = sorted(f.read().splitlines())
check(lines == ref_lines, "the tasks' manifests concatenate to the single run's")
with open(os.path.join(out3, "manifest-00001-of-00003.jsonl")) as f:
    check([json.loads(ln)["shard"] for ln in f] == [1], "task 1 of 3 made shard 1 (s % N == I)")
for i in range(4):
    check(sha(os.path.join(out3, f"shards/shard-{i:06d}.tar")) == sha(os.path.join(ref, f"shards/shard-{i:06d}.tar")),
          f"shard {i} of the tasks == the single run's")

# Four tasks at once into one directory (each writes spec.json and dataset.json too).
dc = fresh("concurrent")
pc = write_spec(dc, SPEC)
outc = os.path.join(dc, "out")
procs = [subprocess.Popen([XTWIN, "dataset", pc, "--out", outc, "--shard", f"{i}/4", "--threads", "1", "--progress",
                           "none"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
outs = [p.communicate(timeout=300) for p in procs]
check(all(p.returncode == 0 for p in procs), f"four concurrent tasks: {[o[1] for o in outs if o[1].strip()]}")
for i in range(4):
    rel = f"shards/shard-{i:06d}.tar"
    check(os.path.exists(os.path.join(outc, rel)) and sha(os.path.join(outc, rel)) == sha(os.path.join(ref, rel)),
          f"concurrent tasks: {rel}")
check(not [f for f in files(outc) if "partial" in f or f.startswith(".")], f"concurrent: no temporaries {files(outc)}")

# --- resume after SIGKILL -------------------------------------------------------------------

print("== killed and resumed")
big = dict(SPEC, frames=40, output={"shard_frames": 2})
dref = fresh("resume_ref")
pref = write_spec(dref, big)
rc, _, err = run(pref, "--out", os.path.join(dref, "out"), *SMALL)
check(rc == 0, f"resume reference: {err}")
dk = fresh("resume")
pk = write_spec(dk, big)
outk = os.path.join(dk, "out")
proc = subprocess.Popen([XTWIN, "dataset", pk, "--out", outk, "--threads", "1", "--writers", "1", "--progress", "none"],
                        stderr=subprocess.PIPE, stdout=subprocess.PIPE)
deadline = time.time() + 120
while time.time() < deadline and len(glob.glob(os.path.join(outk, "shards", "shard-*.json"))) < 3:
    time.sleep(0.02)
time.sleep(0.05)
proc.send_signal(signal.SIGKILL)
proc.wait()
done_before = sorted(glob.glob(os.path.join(outk, "shards", "shard-*.json")))
check(3 <= len(done_before) < 20, f"killed part-way ({len(done_before)} of 20 shards had finished)")
for p in glob.glob(os.path.join(outk, "shards", "shard-*.tar")):
    rel = os.path.relpath(p, outk)
    check(sha(p) == sha(os.path.join(dref, "out", rel)), f"{rel}: a visible shard after the kill is whole")
inodes = {p: os.stat(p.replace(".json", ".tar")).st_ino for p in done_before}
rc, _, err = run(pk, "--out", outk, *SMALL)
check(rc == 0, f"resumed run: {err}")
check(f"{len(done_before)} of 20 shards already complete" in err or len(done_before) == 20, f"resume said so: {err}")
for p, ino in inodes.items():
    check(os.stat(p.replace(".json", ".tar")).st_ino == ino, f"{os.path.basename(p)}: not rewritten on resume")
check(not [f for f in files(outk) if "partial" in f or "probe" in f], f"no temporaries left: {files(outk)}")
for rel in [f"shards/shard-{i:06d}.tar" for i in range(20)] + ["manifest-00000-of-00001.jsonl"]:
    check(sha(os.path.join(outk, rel)) == sha(os.path.join(dref, "out", rel)), f"{rel}: resumed == uninterrupted")

# --verify: a corrupted shard is found (reader) and remade (xtwin)
victim = os.path.join(outk, "shards", "shard-000004.tar")
with open(victim, "r+b") as f:
    f.seek(5000)
    b = f.read(1)
    f.seek(5000)
    f.write(bytes([b[0] ^ 0xFF]))
probs = xd.open_dataset(outk).verify()
check(len(probs) == 1 and "shard 4" in probs[0], f"the reader finds the corrupted shard: {probs}")
rc, _, err = run(pk, "--out", outk, *SMALL)
check(rc == 0 and "all 20 shards are complete" in err, "without --verify a rerun trusts the manifest")
rc, _, err = run(pk, "--out", outk, "--verify", *SMALL)
check(rc == 0 and "19 of 20 shards already complete" in err, f"--verify remakes the one shard: {err}")
check(sha(victim) == sha(os.path.join(dref, "out", "shards", "shard-000004.tar")), "the remade shard is right")

# --- other layouts and samplers -------------------------------------------------------------

print("== folder layout, views, arcs")
folder = dict(SPEC, output={"shard_frames": 3, "format": "folder"})
df, _, outf, rc, err = make("folder", folder)
check(rc == 0, f"folder run: {err}")
dsf = xd.open_dataset(outf)
check(dsf.verify() == [] and len(dsf) == 12, "folder shards verify")
for a, b in zip(xd.open_dataset(ref), dsf):
    check(a["key"] == b["key"] and np.array_equal(a["lineint"], b["lineint"]) and np.array_equal(a["labels"], b["labels"]),
          f"frame {a['key']}: folder == tar")
check(os.path.isfile(os.path.join(outf, "shards", "shard-000000", "000000000000.lineint.npy")), "one file per member")
sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=os.path.join(outf, "shards", "shard-000001"),
                      capture_output=True, text=True)
check(sums.returncode == 0, f"sha256sum -c SHA256SUMS: {sums.stdout}{sums.stderr}")
member = os.path.join(outf, "shards", "shard-000002", "000000000007.labels.npy")
good = open(member, "rb").read()
open(member, "wb").write(good[:-1] + bytes([good[-1] ^ 1]))
rc, _, err = run(write_spec(df, folder), "--out", outf, "--verify", *SMALL)
check(rc == 0 and "3 of 4 shards already complete" in err and open(member, "rb").read() == good,
      f"--verify remakes a folder shard with a changed member: {err}")

views = dict(SPEC, frames=6, poses={"sampler": "views", "views": ["AP", "LAO 30", "RAO 30 CRAN 20"]},
             labels=None, landmarks=None, write={"intensity": False})
views = {k: v for k, v in views.items() if v is not None}
dv, _, outv, rc, err = make("views", views)
check(rc == 0, f"views run: {err}")
got = [(f["meta"]["view"], f["meta"]["pose"]["primary_deg"], f["meta"]["pose"]["secondary_deg"])
       for f in xd.open_dataset(outv)]
check(got == [("AP", 0, 0), ("LAO 30", 30, 0), ("RAO 30 CRAN 20", -30, 20)] * 2, f"views cycle: {got}")

arc = dict(views, frames=None, poses={"sampler": "arc", "views": 5, "runs": 2, "start_deg": -100, "span_deg": 200})
arc = {k: v for k, v in arc.items() if v is not None}
da, _, outa, rc, err = make("arc", arc)
check(rc == 0, f"arc run: {err}")
fa = list(xd.open_dataset(outa))
check([f["meta"]["pose"]["primary_deg"] for f in fa] == [-100, -50, 0, 50, 100] * 2, "a 200-degree arc of 5 views, twice")
check([f["meta"]["run"] for f in fa] == [0] * 5 + [1] * 5, "runs")
check(len({json.dumps(f["meta"]["models"][0]["translate_mm"]) for f in fa[:5]}) == 1, "one patient pose per run")

# --- dry run, help --------------------------------------------------------------------------

print("== dry run, help")
dd = fresh("dry")
pd = write_spec(dd, SPEC)
rc, so, err = run(pd, "--dry-run", "--out", os.path.join(dd, "never"), "--threads", "1")
check(rc == 0, f"dry run: {err}")
check("12 in 4 shards of 3" in so and "to write:" in so and "expected time:" in so, f"dry run says: {so}")
check(not os.path.exists(os.path.join(dd, "never")), "the dry run creates nothing")
rc, so, err = run("--help")
src = open(os.path.join(SRC, "tools", "xt_dataset_cmd.c")).read()
table = re.findall(r'^\s*\{"([a-z-]+)", XT_OPT_', src, re.M)
check(rc == 0 and len(table) >= 10 and all(f"--{o}" in so for o in table), "--help lists every option of the table")

# --- bad input ------------------------------------------------------------------------------

print("== bad input")
db = fresh("bad")
bad = write_spec(db, dict(SPEC, poses={"primary_deg": [90, -90]}), "bad.json")
rc, _, err = run(bad, "--out", os.path.join(db, "o"))
one_line_error(rc, err, 2, r"^xtwin dataset: bad\.json: poses\.primary_deg: \[90, -90\]: lo > hi$", "bad range")
check(not os.path.exists(os.path.join(db, "o")), "a bad spec creates nothing")
rc, _, err = run(os.path.join(db, "none.json"), "--out", os.path.join(db, "o"))
one_line_error(rc, err, 1, r"none\.json", "missing spec")
miss_spec = {k: v for k, v in SPEC.items() if k not in ("labels", "landmarks", "write")}
miss = write_spec(db, dict(miss_spec, models=[{"name": "ct", "file": "nope.nii.gz"}]), "miss.json")
rc, _, err = run(miss, "--out", os.path.join(db, "o2"))
one_line_error(rc, err, 1, r'miss\.json: models\[0\]\.file: ".*nope\.nii\.gz": No such file or directory', "missing model")
rc, _, err = run(spec_path, "--out", os.path.join(db, "o3"), "--devices", "1")
one_line_error(rc, err, 2, r"--devices: applies to the cuda backend", "--devices on cpu")
rc, _, err = run(spec_path, "--out", os.path.join(db, "o3"), "--shard", "3/2")
one_line_error(rc, err, 2, r"--shard: \"3/2\"", "--shard 3/2")
rc, _, err = run(spec_path, "--out", os.path.join(db, "o3"), env={"SLURM_ARRAY_TASK_ID": "4"})
one_line_error(rc, err, 2, r"SLURM_ARRAY_TASK_ID=4", "Slurm id without a count")
rc, _, err = run(spec_path, "--out", os.path.join(db, "o3"), env={"JOB_COMPLETION_INDEX": "1"})
one_line_error(rc, err, 2, r"JOB_COMPLETION_INDEX=1: give the task count", "k8s index without a count")
rc, _, err = run(spec_path)
one_line_error(rc, err, 2, r"--out: required", "no --out")
other = write_spec(db, dict(SPEC, seed=1), "other.json")
rc, _, err = run(other, "--out", ref, *SMALL)
one_line_error(rc, err, 1, r'holds a dataset of another spec \(spec\.json differs\)', "another spec into the same --out")
check(xd.open_dataset(ref).verify() == [], "the existing dataset is untouched")

# Unwritable output directory (as root, without the capability that overrides permissions).
du = fresh("ro")
ro = os.path.join(du, "locked")
os.makedirs(ro)
os.chmod(ro, 0o555)
cmd = [XTWIN, "dataset", spec_path, "--out", os.path.join(ro, "out")]
if os.geteuid() == 0:
    cmd = ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search", *cmd] if shutil.which(
        "setpriv") else None
if cmd:
    p = subprocess.run(cmd, capture_output=True, text=True)
    one_line_error(p.returncode, p.stderr, 1, r'--out: cannot create directory ".*locked/out": Permission denied',
                   "unwritable directory")
else:
    print("  SKIP unwritable directory: running as root without setpriv")
os.chmod(ro, 0o755)

# A full disk: a small tmpfs (mounted here, or in a user namespace), filled part-way.
dfull = fresh("full")
mnt = os.path.join(dfull, "mnt")
os.makedirs(mnt)
full_spec = write_spec(dfull, dict(SPEC, frames=30, output={"shard_frames": 3}))
one_shard = os.path.getsize(os.path.join(ref, "shards", "shard-000000.tar"))
size_k = (one_shard * 5 // 2 + 64 * 1024) // 1024  # room for two shards and the small files, not three
args = [XTWIN, "dataset", full_spec, "--out", os.path.join(mnt, "ds"), "--threads", "1", "--writers", "1",
        "--progress", "none"]
script = f'mount -t tmpfs -o size={size_k}k tmpfs "{mnt}" || exit 99; ' + " ".join(f'"{a}"' for a in args) + \
    f'; rc=$?; {sys.executable} -c "import sys; sys.path.insert(0, \'{os.path.join(SRC, "api", "python")}\'); ' \
    f'import xtwin_dataset as xd; d = xd.open_dataset(\'{os.path.join(mnt, "ds")}\'); ' \
    f'print(\'SHARDS\', len(d.shards), \'PROBLEMS\', len(d.verify()))"; ls -A "{mnt}/ds/shards"; umount "{mnt}"; exit $rc'
ran = None
for wrapper in ([["sh", "-c", script]] if os.geteuid() == 0 else []) + [["unshare", "-rm", "sh", "-c", script]]:
    p = subprocess.run(wrapper, capture_output=True, text=True, timeout=300,
                       env={k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "JOB_"))})
    if p.returncode != 99:
        ran = p
        break
if ran is None:
    print("  SKIP full disk: cannot mount a tmpfs here (not root, no user namespaces)")
else:
    errs = [ln for ln in ran.stderr.splitlines() if ln.startswith("xtwin dataset:")]
    check(ran.returncode == 1, f"full disk: exit {ran.returncode}: {ran.stderr}")
    check(len(errs) == 1 and "No space left on device" in errs[0], f"full disk: one line naming ENOSPC: {errs}")
    m = re.search(r"SHARDS (\d+) PROBLEMS (\d+)", ran.stdout)
    check(m is not None and int(m.group(1)) >= 1 and int(m.group(2)) == 0,
          f"full disk: the finished shards are intact: {ran.stdout}")
    check("partial" not in ran.stdout, f"full disk: no partial files: {ran.stdout}")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
