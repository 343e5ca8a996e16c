#!/usr/bin/python3
"""Tests of the dataset reader api/python/xtwin_dataset.py against files it did not write:
a dataset assembled here with Python's tarfile and numpy.save following docs/dataset.md (tar and
folder shards, manifests of two tasks), then damaged in each way the reader must report
(a changed byte, a missing shard, a line of another dataset, two different lines for one shard),
and the helpers (seg_bits, project, frame_seed) against values worked out by hand.
A dataset written by xtwin itself is read in test_dataset.py.

usage: test_dataset_reader.py XTWIN SOURCE_DIR SCRATCH_DIR    exit 0 pass, 1 fail, 77 skip"""
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile

try:
    import numpy as np
except ImportError:
    print("skip: python3-numpy is not installed")
    sys.exit(77)

SRC, SCRATCH = sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(SRC, "api", "python"))
import xtwin_dataset as xd  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("  FAIL:", what)
    return cond


def npy(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


SPEC_SHA = "ab" * 32
ROWS, COLS, K = 4, 5, 3


def frame(i):
    rng = np.random.default_rng(i)
    L = rng.random((ROWS, COLS), dtype=np.float32)
    lab = (rng.random((K, ROWS, COLS)) > 0.5).astype(np.float32) * 2.5
    seg = sum((lab[k] > 0).astype(np.uint8) << k for k in range(K)).astype(np.uint8)
    meta = {"key": f"{i:012d}", "frame": i, "geometry": {"P": np.eye(3, 4).tolist()}}
    return [("lineint.npy", npy(L)), ("labels.npy", npy(lab)), ("seg.npy", npy(seg)),
            ("json", json.dumps(meta).encode())], L, lab


def build(root, fmt):
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "shards"))
    info = {"format": "xtwin-dataset", "format_version": 1, "spec_sha256": SPEC_SHA, "frames": 7, "shard_frames": 3,
            "shards": 3, "shard_format": fmt, "channels": ["a", "b", "c"]}
    json.dump(info, open(os.path.join(root, "dataset.json"), "w"))
    json.dump({"seed": 1}, open(os.path.join(root, "spec.json"), "w"))
    truth, lines = {}, []
    for s in range(3):
        first, n = 3 * s, min(3, 7 - 3 * s)
        if fmt == "tar":
            path = os.path.join(root, "shards", f"shard-{s:06d}.tar")
            with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
                for i in range(first, first + n):
                    parts, L, lab = frame(i)
                    truth[i] = (L, lab)
                    for ext, data in parts:
                        ti = tarfile.TarInfo(f"{i:012d}.{ext}")
                        ti.size = len(data)
                        tf.addfile(ti, io.BytesIO(data))
            digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
            rel = f"shards/shard-{s:06d}.tar"
        else:
            d = os.path.join(root, "shards", f"shard-{s:06d}")
            os.makedirs(d)
            sums = ""
            for i in range(first, first + n):
                parts, L, lab = frame(i)
                truth[i] = (L, lab)
                for ext, data in parts:
                    name = f"{i:012d}.{ext}"
                    open(os.path.join(d, name), "wb").write(data)
                    sums += f"{hashlib.sha256(data).hexdigest()}  {name}\n"
            open(os.path.join(d, "SHA256SUMS"), "w").write(sums)
            digest = hashlib.sha256(sums.encode()).hexdigest()
            rel = f"shards/shard-{s:06d}"
        lines.append(json.dumps({"shard": s, "path": rel, "format": fmt, "first_frame": first, "frames": n,
                                 "bytes": 0, "sha256": digest, "spec_sha256": SPEC_SHA}, sort_keys=True))
    # two tasks' manifests (shards 0, 2 and shard 1), as --shard I/2 writes them
    open(os.path.join(root, "manifest-00000-of-00002.jsonl"), "w").write(lines[0] + "\n" + lines[2] + "\n")
    open(os.path.join(root, "manifest-00001-of-00002.jsonl"), "w").write(lines[1] + "\n")
    return truth, lines


for fmt in ("tar", "folder"):
    print(f"== {fmt}")
    root = os.path.join(SCRATCH, fmt)
    truth, lines = build(root, fmt)
    ds = xd.open_dataset(root)
    check(len(ds) == 7 and ds.missing == [] and ds.channels == ["a", "b", "c"], f"{fmt}: 7 frames, no gaps")
    check(ds.verify() == [], f"{fmt}: verifies")
    got = list(ds.frames(verify=True))
    check([f["frame"] for f in got] == list(range(7)), f"{fmt}: frames in order")
    for f in got:
        L, lab = truth[f["frame"]]
        check(np.array_equal(f["lineint"], L) and f["lineint"].dtype == np.float32, f"{fmt}: lineint {f['key']}")
        check(np.array_equal(f["labels"], lab), f"{fmt}: labels {f['key']}")
        check(np.array_equal(xd.seg_bits(f["seg"], K), lab > 0), f"{fmt}: seg bits {f['key']}")
        check(f["meta"]["key"] == f["key"], f"{fmt}: meta")
    check([f["frame"] for f in ds.frames(shards=[1])] == [3, 4, 5], f"{fmt}: one shard")

    # damage: one byte
    if fmt == "tar":
        victim = os.path.join(root, "shards", "shard-000001.tar")
        off = 1200
    else:
        victim = os.path.join(root, "shards", "shard-000001", "000000000004.labels.npy")
        off = 100
    raw = bytearray(open(victim, "rb").read())
    raw[off] ^= 1
    open(victim, "wb").write(raw)
    probs = xd.open_dataset(root).verify()
    check(len(probs) == 1 and probs[0].startswith("shard 1:"), f"{fmt}: a flipped bit is found: {probs}")
    try:
        list(xd.open_dataset(root).frames(verify=True))
        check(False, f"{fmt}: frames(verify=True) reads a damaged shard")
    except IOError:
        pass
    # a missing shard: no manifest line
    open(os.path.join(root, "manifest-00001-of-00002.jsonl"), "w").write("")
    ds = xd.open_dataset(root)
    check(ds.missing == [1] and len(ds) == 4, f"{fmt}: shard 1 reported missing ({ds.missing})")
    # a line of another dataset, and two different lines for one shard
    bad = json.loads(lines[1])
    bad["spec_sha256"] = "cd" * 32
    open(os.path.join(root, "manifest-00001-of-00002.jsonl"), "w").write(json.dumps(bad) + "\n")
    try:
        xd.open_dataset(root)
        check(False, f"{fmt}: a line of another dataset is accepted")
    except ValueError as e:
        check("another dataset" in str(e), f"{fmt}: {e}")
    two = json.loads(lines[0])
    two["sha256"] = "00" * 32
    open(os.path.join(root, "manifest-00001-of-00002.jsonl"), "w").write(json.dumps(two) + "\n")
    try:
        xd.open_dataset(root)
        check(False, f"{fmt}: two lines for shard 0 accepted")
    except ValueError as e:
        check("two different manifest lines" in str(e), f"{fmt}: {e}")

print("== helpers")
# seg_bits on uint64 masks: bit 63 too
seg = np.array([[1 << 63 | 1, 2]], dtype=np.uint64)
b = xd.seg_bits(seg, 64)
check(b.shape == (64, 1, 2) and b[63, 0, 0] and b[0, 0, 0] and b[1, 0, 1] and b.sum() == 3, "seg_bits on 64 channels")
# project: a pinhole with focal 10, principal point (2, 3)
P = [[10, 0, 2, 0], [0, 10, 3, 0], [0, 0, 1, 0]]
uv, depth = xd.project(P, [[1, 2, 5], [0, 0, 2]])
check(np.allclose(uv, [[4, 7], [2, 3]]) and np.allclose(depth, [5, 2]), f"project: {uv} {depth}")
# frame_seed: splitmix64's published first output for state 0 is 0xE220A8397B1DCDAF, i.e. the
# finaliser of 0x9E3779B97F4A7C15: seed 0, index 0.
check(xd.frame_seed(0, 0) == 0xE220A8397B1DCDAF, f"frame_seed(0, 0) = {xd.frame_seed(0, 0):#x}")
check(xd.frame_seed(2**64 - 0x9E3779B97F4A7C15, 0) == xd.frame_seed(0, -1) == 0, "modulo 2^64")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
