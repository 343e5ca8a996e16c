#!/usr/bin/python3
"""`xtwin dataset` never overwrites what it did not write (issue 22, point 5), with the real binary.

A directory holds "our" dataset once its dataset.json is there (written before anything in
shards/). Checked here, each against the file system itself (bytes, listings, inotify events):
 - --out exists, holds no dataset, and a user's file sits where a file of the run would go (a shard,
   its manifest line, a temporary, a task manifest, spec.json, dataset.json; folder shards too):
   refused with one stderr line naming that path, exit 1; the file is byte-identical afterwards and
   nothing at all was added to --out;
 - shards/ a symbolic link (to a folder outside --out, or inside it), in a new directory or in one
   holding our dataset: refused, nothing written through it;
 - a symbolic link in place of a shard, its manifest line, a task manifest, spec.json or
   dataset.json (dangling, or to a file outside): refused, its target untouched and not created;
 - our own dataset still resumes (a shard removed is remade, the rest not rewritten), a rerun into a
   complete one does nothing, and tasks started together into one new directory (several rounds)
   all succeed with the single run's bytes;
 - nothing outside --out is written: inotify on its parent sees only --out itself created, for a
   run and for a dry run (whose disk probe writes inside --out, or nowhere).

usage: test_dataset_owner.py XTWIN SOURCE_DIR SCRATCH_DIR     exit 0 pass, 1 fail"""
import ctypes
import ctypes.util
import glob
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys

XTWIN, SRC, SCRATCH = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("  FAIL:", what)
    return cond


def run(*args, timeout=300):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JOB_COMPLETION", "XTWIN_SHARD"))}
    p = subprocess.run([XTWIN, "dataset", *args], capture_output=True, text=True, timeout=timeout, env=e)
    return p.returncode, p.stdout, p.stderr


def fresh(name):
    d = os.path.join(SCRATCH, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def write_spec(d, spec, name="spec-in.json"):
    p = os.path.join(d, name)
    with open(p, "w") as f:
        json.dump(spec, f)
    return p


def sha(p):
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def content(p):
    try:
        with open(p, "rb") as f:
            return f.read()
    except OSError as e:
        return e.strerror


def tree(d):
    """Every entry under d (links not followed) with what it is: the oracle for "nothing added"."""
    out = {}
    for root, dirs, fs in os.walk(d):
        for n in dirs + fs:
            p = os.path.join(root, n)
            st = os.lstat(p)
            kind = "link:" + os.readlink(p) if os.path.islink(p) else "dir" if os.path.isdir(p) else sha(p)
            out[os.path.relpath(p, d)] = kind
    return out


def refused(rc, err, path, what):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    ok = check(rc == 1, f"{what}: exit {rc}, want 1 ({err.strip()})")
    ok &= check(len(lines) == 1, f"{what}: {len(lines)} stderr lines: {err!r}")
    ok &= check(bool(lines) and path in lines[0] and lines[0].startswith("xtwin dataset: "),
                f"{what}: the line names {path}: {err.strip()!r}")
    return ok


SPEC = {
    "seed": 7, "frames": 4, "backend": "cpu", "detector": {"modes": ["fd20-128"]},
    "models": [{"name": "head", "phantom": "head", "size": 24, "spacing_mm": 8}],
    "output": {"shard_frames": 2},
}
FOLDER = dict(SPEC, output={"shard_frames": 2, "format": "folder"})
ARGS = ["--threads", "1", "--progress", "none"]

base = fresh("owner")
spec_path = write_spec(base, SPEC)
folder_path = write_spec(base, FOLDER, "folder-in.json")

# The reference: a run into a new directory.
ref = os.path.join(base, "ref")
rc, _, err = run(spec_path, "--out", ref, *ARGS)
check(rc == 0, f"reference run: {err}")
ref_files = tree(ref)
check(sorted(ref_files) == ["dataset.json", "manifest-00000-of-00001.jsonl", "shards", "shards/shard-000000.json",
                            "shards/shard-000000.tar", "shards/shard-000001.json", "shards/shard-000001.tar",
                            "spec.json"], f"what a run writes: {sorted(ref_files)}")

# --- a user's file where a file of ours would go, in a directory without a dataset ------------

print("== user files are never replaced")
USER = b"a user's own file, not a shard\n"
cases = [
    (spec_path, "shards/shard-000000.tar"),
    (spec_path, "shards/shard-000001.tar"),
    (spec_path, "shards/shard-000000.json"),
    (spec_path, "shards/.shard-000000.tar.partial"),
    (spec_path, "manifest-00000-of-00001.jsonl"),
    (spec_path, "spec.json"),
    (spec_path, "dataset.json"),
    (folder_path, "shards/shard-000000/000000000000.lineint.npy"),
    (folder_path, "shards/.shard-000001.partial/SHA256SUMS"),
]
for i, (sp, rel) in enumerate(cases):
    out = os.path.join(fresh(f"user{i}"), "out")
    os.makedirs(os.path.dirname(os.path.join(out, rel)), exist_ok=True)
    with open(os.path.join(out, rel), "wb") as f:
        f.write(USER)
    before = tree(out)
    rc, _, err = run(sp, "--out", out, *ARGS)
    shown = rel.split("/shard-000000/")[0] + "/shard-000000" if "/shard-000000/" in rel else \
        rel.split("/.shard-000001.partial/")[0] + "/.shard-000001.partial" if ".partial/" in rel else rel
    refused(rc, err, os.path.join(out, shown) if rel not in ("spec.json", "dataset.json") else rel, f"user's {rel}")
    check(content(os.path.join(out, rel)) == USER, f"user's {rel}: byte-identical afterwards")
    check(tree(out) == before, f"user's {rel}: nothing added to --out: {sorted(set(tree(out)) - set(before))}")

# A user's files of other names in shards/ are no obstacle, and stay as they are.
out = os.path.join(fresh("user_other"), "out")
os.makedirs(os.path.join(out, "shards"))
with open(os.path.join(out, "shards", "README"), "wb") as f:
    f.write(USER)
rc, _, err = run(spec_path, "--out", out, *ARGS)
check(rc == 0 and content(os.path.join(out, "shards", "README")) == USER, f"an unrelated file: {err}")
check(content(os.path.join(out, "shards", "shard-000001.tar")) == content(os.path.join(ref, "shards", "shard-000001.tar")),
      "an unrelated file: the shards are the reference's")

# --- symbolic links -------------------------------------------------------------------------

print("== symbolic links are refused")
elsewhere = os.path.join(base, "elsewhere")


def outside_target():
    shutil.rmtree(elsewhere, ignore_errors=True)
    os.makedirs(elsewhere)
    return elsewhere


for kind in ("outside", "inside"):
    for ours in (False, True):
        d = fresh(f"link_{kind}_{int(ours)}")
        out = os.path.join(d, "out")
        if ours:
            shutil.copytree(ref, out)
            shutil.rmtree(os.path.join(out, "shards"))
        else:
            os.makedirs(out)
        target = outside_target() if kind == "outside" else os.path.join(out, "real")
        os.makedirs(target, exist_ok=True)
        os.symlink(target, os.path.join(out, "shards"))
        before, tbefore = tree(out), tree(target)
        rc, _, err = run(spec_path, "--out", out, *ARGS)
        what = f"shards/ a link to a folder {kind} --out ({'our dataset' if ours else 'no dataset'})"
        refused(rc, err, os.path.join(out, "shards"), what)
        check(tree(target) == tbefore, f"{what}: nothing written through it: {tree(target)}")
        check(tree(out) == before, f"{what}: nothing added to --out")

# A link in place of a file of ours, in our own dataset (one shard to remake) and in a new one.
for rel in ("shards/shard-000001.tar", "shards/shard-000001.json", "manifest-00000-of-00001.jsonl", "spec.json",
            "dataset.json"):
    for dangling in (True, False):
        for ours in (True, False):
            d = fresh("link_file")
            out = os.path.join(d, "out")
            if ours:
                shutil.copytree(ref, out)
                for r in ("shards/shard-000001.tar", "shards/shard-000001.json"):
                    os.unlink(os.path.join(out, r))
                if os.path.exists(os.path.join(out, rel)):
                    os.unlink(os.path.join(out, rel))
            else:
                os.makedirs(os.path.join(out, "shards"))
            tdir = outside_target()
            target = os.path.join(tdir, "target")
            if not dangling:
                with open(target, "wb") as f:
                    f.write(USER)
            os.symlink(target, os.path.join(out, rel))
            before = tree(out)
            rc, _, err = run(spec_path, "--out", out, *ARGS)
            what = f"{rel} a {'dangling ' if dangling else ''}link ({'our dataset' if ours else 'no dataset'})"
            refused(rc, err, rel if rel in ("spec.json", "dataset.json") and not ours else os.path.join(out, rel), what)
            if dangling:
                check(not os.path.lexists(target), f"{what}: its target was not created")
            else:
                check(content(target) == USER, f"{what}: its target is untouched")
            check(os.listdir(tdir) == ([] if dangling else ["target"]), f"{what}: nothing else outside --out")
            check(tree(out) == before, f"{what}: --out as it was: {sorted(set(tree(out)) ^ set(before))}")

# --- our own datasets: resume, rerun, tasks at once -------------------------------------------

print("== our datasets resume, rerun and run in parallel")
out = os.path.join(fresh("resume"), "out")
shutil.copytree(ref, out)
ino0 = os.stat(os.path.join(out, "shards", "shard-000000.tar")).st_ino
os.unlink(os.path.join(out, "shards", "shard-000001.json"))  # as a run killed before the line was written
rc, _, err = run(spec_path, "--out", out, *ARGS)
check(rc == 0 and "1 of 2 shards already complete" in err, f"resume: {err}")
check(tree(out) == ref_files, "resume: the dataset is the reference's")
check(os.path.exists(os.path.join(out, "shards", "shard-000000.tar")) and
      os.stat(os.path.join(out, "shards", "shard-000000.tar")).st_ino == ino0, "resume: a complete shard stays")
rc, _, err = run(spec_path, "--out", out, *ARGS)
check(rc == 0 and "all 2 shards are complete" in err and tree(out) == ref_files, f"rerun into a complete one: {err}")
rc, _, err = run(spec_path, "--out", out, "--verify", *ARGS)
check(rc == 0 and tree(out) == ref_files, f"--verify on our dataset: {err}")

many = dict(SPEC, frames=16, output={"shard_frames": 1})
many_path = write_spec(base, many, "many-in.json")
mref = os.path.join(base, "many_ref")
rc, _, err = run(many_path, "--out", mref, *ARGS)
check(rc == 0, f"16-shard reference: {err}")
for rnd in range(4):
    d = fresh("parallel")
    out = os.path.join(d, "out")
    if rnd % 2:
        os.makedirs(out)  # an empty directory is as good as a new one
    procs = [subprocess.Popen([XTWIN, "dataset", many_path, "--out", out, "--shard", f"{i}/8", "--threads", "1",
                               "--writers", "1", "--progress", "none"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(8)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    check(all(p.returncode == 0 for p in procs), f"round {rnd}: 8 tasks at once: {[e for e in errs if e.strip()]}")
    for i in range(16):
        rel = f"shards/shard-{i:06d}.tar"
        check(content(os.path.join(out, rel)) == content(os.path.join(mref, rel)),
              f"round {rnd}: {rel} == the single run's")
    lines = sorted(ln for p in glob.glob(os.path.join(out, "manifest-*-of-00008.jsonl")) for ln in open(p))
    check(lines == sorted(open(os.path.join(mref, "manifest-00000-of-00001.jsonl"))), f"round {rnd}: manifests")
    check(not [n for n in tree(out) if os.path.basename(n).startswith(".")], f"round {rnd}: no temporaries")

# --- nothing outside --out ------------------------------------------------------------------

print("== nothing outside --out")
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
IN_CREATE, IN_MOVED_TO, IN_MODIFY, IN_CLOSE_WRITE, IN_NONBLOCK = 0x100, 0x80, 0x2, 0x8, 0o4000


def events(fd):
    names = []
    buf = ctypes.create_string_buffer(65536)
    while True:
        n = libc.read(fd, buf, len(buf))
        if n <= 0:
            return names
        off = 0
        while off < n:
            _, mask, _, ln = struct.unpack_from("iIII", buf.raw, off)
            name = buf.raw[off + 16:off + 16 + ln].rstrip(b"\0").decode()
            names.append((name, mask))
            off += 16 + ln


for label, args, existing in (("a run", [], False), ("a dry run, --out missing", ["--dry-run"], False),
                              ("a dry run, --out existing", ["--dry-run"], True)):
    d = fresh("parent")
    out = os.path.join(d, "out")
    if existing:
        os.makedirs(out)
    fd = libc.inotify_init1(IN_NONBLOCK)
    if not check(fd >= 0 and libc.inotify_add_watch(fd, d.encode(), IN_CREATE | IN_MOVED_TO | IN_MODIFY |
                                                    IN_CLOSE_WRITE) >= 0, "inotify"):
        break
    rc, so, err = run(spec_path, "--out", out, *ARGS, *args)
    got = events(fd)
    os.close(fd)
    check(rc == 0, f"{label}: {err}")
    check(all(n == "out" for n, _ in got), f"{label}: writes outside --out: {got}")
    check(sorted(os.listdir(d)) == ([] if args and not existing else ["out"]), f"{label}: {os.listdir(d)}")
    if args:
        check(tree(out) == {} if existing else not os.path.exists(out), f"{label}: writes nothing: {so}")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
