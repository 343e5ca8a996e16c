#!/usr/bin/python3
"""Statistics of the differences between two golden recordings, for reviewing a re-recording whose
pixels are meant to change (compare.py stops at each file's first difference). Standard library only.

    /usr/bin/python3 tests/golden/diffstats.py OLD NEW [--offset 1000]

For every file that differs (after compare.py's masks):
  - raw frames (render *_raw.png, dataset raw.npy, stream frames of kind 1): the pixels at the ADC's
    full scale in each, and over the pixels unsaturated in both and at least 200 codes above the
    offset in OLD, the ratio (new - offset) / (old - offset) (mean and spread) and the residual
    new - (offset + ratio (old - offset)): a change of gain shows as one ratio with a residual of
    the noise that changed;
  - processed frames (*_proc.png, processed.npy, stream frames of kind 2): mean and largest
    difference, how many pixels moved by more than 2 codes, both ranges;
  - stream frames: the header fields that differ (compare.py's names);
  - anything else: compare.py's explanation of its first difference.
Exit 0 (it reports; judging is the reviewer's)."""
import argparse
import io
import math
import os
import struct
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import compare as C  # noqa: E402

FULL = 16383


def npy_values(b):
    start, shape, fmt, size = C.npy_header(b)
    n = 1
    for d in shape:
        n *= d
    return list(struct.unpack_from("<%d%s" % (n, fmt), b, start))


def stream_values(b):
    hs = struct.unpack_from("<H", b, 6)[0]
    rows, cols, fmt = struct.unpack_from("<III", b, 72)
    return list(struct.unpack_from("<%d%s" % (rows * cols, "f" if fmt == 2 else "H"), b, hs))


def raw_stats(a, b, off):
    sa, sb = sum(1 for x in a if x >= FULL), sum(1 for x in b if x >= FULL)
    pairs = [(x - off, y - off) for x, y in zip(a, b) if x - off >= 200 and x < FULL and y < FULL]
    head = "raw: %d -> %d pixels at full scale" % (sa, sb)
    if not pairs:
        return head + "; none unsaturated in both and 200 above the offset (old %d..%d, new %d..%d)" % (
            min(a), max(a), min(b), max(b))
    rat = [y / x for x, y in pairs]
    k = sum(rat) / len(rat)
    sr = math.sqrt(sum((r - k) ** 2 for r in rat) / len(rat))
    res = [y - k * x for x, y in pairs]
    m = sum(res) / len(res)
    sd = math.sqrt(sum((r - m) ** 2 for r in res) / len(res))
    return head + "; %d pixels: ratio %.5f (sd %.5f), residual mean %+.2f sd %.2f largest %.1f" % (
        len(pairs), k, sr, m, sd, max(abs(r) for r in res))


def proc_stats(a, b):
    d = [y - x for x, y in zip(a, b)]
    return "processed: mean difference %+.2f, mean |difference| %.2f, largest %d, %d of %d moved > 2; old %d..%d, new %d..%d" % (
        sum(d) / len(d), sum(abs(v) for v in d) / len(d), max(abs(v) for v in d), sum(1 for v in d if abs(v) > 2),
        len(d), min(a), max(a), min(b), max(b))


def report(old_dir, new_dir, off):
    for rel in sorted(set(C.files(old_dir)) | set(C.files(new_dir))):
        pa, pb = os.path.join(old_dir, rel), os.path.join(new_dir, rel)
        if not (os.path.exists(pa) and os.path.exists(pb)):
            print("%s: only in %s" % (rel, "OLD" if os.path.exists(pa) else "NEW"))
            continue
        a, b = open(pa, "rb").read(), open(pb, "rb").read()
        if C.masked(rel, a) == C.masked(rel, b):
            continue
        if rel.endswith("_raw.png"):
            print(rel, raw_stats(C.png_pixels(a)[2], C.png_pixels(b)[2], off))
        elif rel.endswith("_proc.png"):
            print(rel, proc_stats(C.png_pixels(a)[2], C.png_pixels(b)[2]))
        elif rel.endswith(".bin"):
            ma, mb = C.mask_stream(a), C.mask_stream(b)
            fields = [name for lo, n, name in C.HEADER_FIELDS if ma[lo:lo + n] != mb[lo:lo + n]]
            kind = struct.unpack_from("<I", a, 304)[0]
            va, vb = stream_values(a), stream_values(b)
            px = (raw_stats(va, vb, off) if kind == 1 else proc_stats(va, vb) if kind == 2
                  else "pixels identical" if va == vb else "pixels differ")
            print(rel, "header fields %s | %s" % (fields, px))
        elif rel.endswith(".tar"):
            ta, tb = tarfile.open(fileobj=io.BytesIO(a)), tarfile.open(fileobj=io.BytesIO(b))
            for x, y in zip(ta.getmembers(), tb.getmembers()):
                da, db = ta.extractfile(x).read(), tb.extractfile(y).read()
                if C.masked(x.name, da) == C.masked(x.name, db):
                    continue
                if x.name.endswith("raw.npy"):
                    print(rel, x.name, raw_stats(npy_values(da), npy_values(db), off))
                elif x.name.endswith("processed.npy"):
                    print(rel, x.name, proc_stats(npy_values(da), npy_values(db)))
                else:
                    print(rel, x.name, C.explain(x.name, C.masked(x.name, da), C.masked(x.name, db)))
        else:
            print(rel, C.explain(rel, C.masked(rel, a), C.masked(rel, b)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--offset", type=float, default=1000, help="the panel's mean dark offset (chain offset_adu)")
    a = ap.parse_args()
    report(a.old, a.new, a.offset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
