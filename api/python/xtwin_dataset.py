"""Reader for datasets written by `xtwin dataset` (docs/dataset.md): numpy arrays and metadata per
frame, from WebDataset-style tar shards or the folder layout, with the shards' SHA-256 checked
against the manifest. Standalone: Python 3 and numpy (Debian's python3-numpy), nothing else.

    import xtwin_dataset as xd
    ds = xd.open_dataset("/data/ds")            # dataset.json + every manifest line
    print(len(ds), ds.channels, ds.missing)     # frames in complete shards, channel names, gaps
    for f in ds:                                # frames in index order
        f["lineint"]      # float32 (rows, cols): line integrals
        f["labels"]       # float32 (channels, rows, cols): path lengths (mm) or line integrals
        f["seg"]          # uint8..uint64 (rows, cols): bit k = channel k crossed
        f["meta"]["geometry"]["P"]   # 3x4 projection matrix, world mm -> pixels
        f["lineint_b"], f["meta"]["plane_b"]["geometry"]["P"]  # plane B of the instant (biplane specs)
    problems = ds.verify()                      # [] when every shard matches its SHA-256

Shards are also plain WebDataset shards: `webdataset.WebDataset(urls).decode()` reads them with
keys "lineint.npy", "labels.npy", "seg.npy", "json".
"""

import glob
import hashlib
import io
import json
import os
import tarfile

import numpy as np

__all__ = ["open_dataset", "Dataset", "read_shard", "frame_seed", "seg_bits", "project"]

FORMAT = "xtwin-dataset"
_MASK64 = (1 << 64) - 1


def frame_seed(seed, index):
    """The per-frame seed as the generator derives it: splitmix64's finaliser of
    seed + 0x9E3779B97F4A7C15 * (index + 1), modulo 2**64."""
    z = (seed + 0x9E3779B97F4A7C15 * (index + 1)) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def seg_bits(seg, nchannels):
    """The segmentation bitmask as booleans, shape (nchannels, rows, cols)."""
    seg = np.asarray(seg).astype(np.uint64)
    return np.stack([(seg >> np.uint64(k)) & np.uint64(1) for k in range(nchannels)]).astype(bool)


def project(P, points):
    """World points (n, 3) in mm through a 3x4 P: (n, 2) pixel (col, row) and (n,) depth in mm."""
    P = np.asarray(P, dtype=np.float64)
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    h = pts @ P[:, :3].T + P[:, 3]
    return h[:, :2] / h[:, 2:3], h[:, 2]


def _decode(name, data):
    if name.endswith(".npy"):
        return np.load(io.BytesIO(data), allow_pickle=False)
    if name.endswith(".json") or name == "json":
        return json.loads(data.decode("utf-8"))
    return data


def _sample(key, parts):
    out = {"key": key, "frame": int(key)}
    for ext, data in parts:
        value = _decode(ext, data)
        if ext == "json":
            out["meta"] = value
        else:
            out[ext[:-4] if ext.endswith(".npy") else ext] = value
    return out


def _split(name):
    base = os.path.basename(name)
    key, _, ext = base.partition(".")
    return key, ext


def read_shard(path, fmt="tar"):
    """Yields the frames of one shard (a .tar file, or a shard folder with fmt="folder") in order."""
    if fmt == "folder":
        names = sorted(n for n in os.listdir(path) if n != "SHA256SUMS" and not n.startswith("."))
        items = []
        for n in names:
            with open(os.path.join(path, n), "rb") as f:
                items.append((n, f.read()))
    else:
        items = None
    key, parts = None, []

    def members():
        if items is not None:
            yield from items
            return
        with tarfile.open(path, "r:") as tf:
            for m in tf:
                if not m.isfile():
                    continue
                yield m.name, tf.extractfile(m).read()

    for name, data in members():
        k, ext = _split(name)
        if k != key and parts:
            yield _sample(key, parts)
            parts = []
        key = k
        parts.append((ext, data))
    if parts:
        yield _sample(key, parts)


def _sha256_file(path, chunk=1 << 22):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


class Dataset:
    """A dataset directory: dataset.json, spec.json, shards/, manifest-*.jsonl."""

    def __init__(self, root):
        self.root = root
        with open(os.path.join(root, "dataset.json")) as f:
            self.info = json.load(f)
        if self.info.get("format") != FORMAT:
            raise ValueError(f"{root}: not an xtwin dataset (dataset.json format {self.info.get('format')!r})")
        with open(os.path.join(root, "spec.json")) as f:
            self.spec = json.load(f)
        # Manifest lines: the tasks' manifests (concatenations) and each finished shard's own line.
        lines = []
        for p in sorted(glob.glob(os.path.join(root, "manifest*.jsonl"))):
            with open(p) as f:
                lines += [(p, ln) for ln in f.read().splitlines() if ln.strip()]
        for p in sorted(glob.glob(os.path.join(root, "shards", "shard-*.json"))):
            with open(p) as f:
                lines += [(p, ln) for ln in f.read().splitlines() if ln.strip()]
        by_shard = {}
        for p, ln in lines:
            e = json.loads(ln)
            if e.get("spec_sha256") != self.info["spec_sha256"]:
                raise ValueError(f"{p}: a line of another dataset (spec_sha256 {e.get('spec_sha256')})")
            old = by_shard.get(e["shard"])
            if old is not None and old != e:
                raise ValueError(f"{p}: shard {e['shard']} has two different manifest lines")
            by_shard[e["shard"]] = e
        self.shards = [by_shard[k] for k in sorted(by_shard)]
        self.missing = [i for i in range(self.info["shards"]) if i not in by_shard]

    @property
    def channels(self):
        return list(self.info.get("channels", []))

    def __len__(self):
        return sum(e["frames"] for e in self.shards)

    def shard_path(self, entry):
        return os.path.join(self.root, entry["path"])

    def frames(self, shards=None, verify=False):
        """Frames of the complete shards (or of the given shard indices) in index order."""
        wanted = None if shards is None else set(shards)
        for e in self.shards:
            if wanted is not None and e["shard"] not in wanted:
                continue
            if verify:
                problem = self._check(e)
                if problem:
                    raise IOError(problem)
            yield from read_shard(self.shard_path(e), e["format"])

    __iter__ = frames

    def _check(self, e):
        path = self.shard_path(e)
        target = path if e["format"] == "tar" else os.path.join(path, "SHA256SUMS")
        if not os.path.exists(target):
            return f"shard {e['shard']}: {target} is missing"
        got = _sha256_file(target)
        if got != e["sha256"]:
            return f"shard {e['shard']}: sha256 {got} != manifest {e['sha256']}"
        if e["format"] == "folder":
            with open(target) as f:
                for ln in f.read().splitlines():
                    digest, _, name = ln.partition("  ")
                    if _sha256_file(os.path.join(path, name)) != digest:
                        return f"shard {e['shard']}: {name} does not match SHA256SUMS"
        return None

    def verify(self):
        """Checks every complete shard against its manifest line; returns the problems found."""
        return [p for p in (self._check(e) for e in self.shards) if p]


def open_dataset(root):
    return Dataset(root)
