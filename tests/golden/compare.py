#!/usr/bin/python3
"""Re-records the golden set with the binaries under test and compares it, byte for byte, with the
stored goldens (issue 23, point 6). Standard library only.

    /usr/bin/python3 tests/golden/compare.py --backend cpu --xtwin build/tools/xtwin \
        --server build/server/xtwin-server [--golden tests/golden/cpu] [--keep DIR]
    /usr/bin/python3 tests/golden/compare.py --against A B     # two recordings, no binaries run

Only the fields of MASKS below are masked (README.md says why each is volatile); everything else,
every pixel and every byte of every file, must be identical. Files the goldens lack make the run
fail unless README.md's allow-list names them (they are then reported, not failed).

Exit 0 identical; 1 a difference (the first differing file, field or byte offset is printed for
each differing file) or a recording that failed; 77 skipped: --backend cuda without
tests/golden/cuda, or without a usable CUDA device (the binaries say so in one line)."""
import argparse
import fnmatch
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import record  # noqa: E402

# ---- what is masked ------------------------------------------------------------------------------
# JSON keys (in .json and .jsonl files, at any depth) whose values are replaced by "*" on both
# sides before the bytes are compared. Nothing else is masked.
MASKED_KEYS = ("created_utc", "xtwin_version", "render_ms", "chain_ms", "t_ns", "server")
# Stream frame messages: byte ranges of the header zeroed on both sides (api/stream.md).
# t_pose_ns, t_exposure_sched_ns, t_exposure_ns, t_render_done_ns, t_sent_ns; t_cycle_ns (version 5)
STREAM_MASK = [(24, 64), (768, 776)]

_SCALAR = r'(?:"(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|true|false|null)'
_MASK_RE = re.compile(r'("(?:%s)"\s*:\s*)%s' % ("|".join(MASKED_KEYS), _SCALAR))

# the stream header's fields, for messages (api/stream.md)
HEADER_FIELDS = [
    (0, 4, "magic"), (4, 2, "version"), (6, 2, "header_size"), (8, 8, "frame_counter"), (16, 8, "pose_seq"),
    (24, 8, "t_pose_ns"), (32, 8, "t_exposure_sched_ns"), (40, 8, "t_exposure_ns"), (48, 8, "t_render_done_ns"),
    (56, 8, "t_sent_ns"), (64, 8, "frames_dropped"), (72, 4, "rows"), (76, 4, "cols"), (80, 4, "pixel_format"),
    (84, 4, "flags"), (88, 8, "payload_bytes"), (96, 64, "pose[8]"), (160, 96, "P[12]"), (256, 16, "pitch_mm[2]"),
    (272, 24, "mode"), (296, 8, "period_ns"), (304, 4, "frame_kind"), (308, 4, "bits_stored"), (312, 8, "chain_seed"),
    (320, 8, "chain_params_hash"), (328, 8, "kv"), (336, 8, "mas"), (344, 8, "filter_al_mm"), (352, 8, "filter_cu_mm"),
    (360, 8, "mean_energy_kev"), (368, 8, "kerma_ugy_per_mas"), (376, 8, "window"), (384, 8, "level"),
    (392, 4, "binning"), (396, 4, "chain_flags"), (400, 8, "ma"), (408, 8, "pulse_ms"), (416, 8, "focal_spot_mm"),
    (424, 32, "shutter[4]"), (456, 16, "wedge[2]"), (472, 8, "wedge_t"), (480, 8, "grid_tp"), (488, 4, "protocol"),
    (492, 4, "exposure_flags"), (496, 8, "k_irp_mgy"), (504, 8, "kap_gycm2"), (512, 8, "k_irp_total_mgy"),
    (520, 8, "kap_total_gycm2"), (528, 8, "dose_frames"), (536, 8, "d_irp_mm"), (544, 8, "drc_measured_ngy"),
    (552, 8, "drc_target_ngy"), (560, 8, "drc_curve_s"), (568, 4, "drc_flags"), (572, 4, "fault_flags"),
    (576, 16, "detector"), (592, 16, "roi[4]"), (608, 8, "panel[2]"), (616, 8, "panel_pitch_mm"),
    (624, 8, "readout_binning"), (632, 8, "field_cm"), (640, 8, "dose_ratio"), (648, 8, "readout_ms"),
    (656, 96, "P_out[12]"), (752, 4, "plane"), (756, 4, "timing"), (760, 8, "cycle"), (768, 8, "t_cycle_ns"),
    (776, 4, "codec"), (780, 4, "saturated_px"), (784, 8, "wire_bytes"), (792, 4, "contrast_seq"),
    (796, 4, "iodine_mg_ml_max"), (800, 8, "motion_t_s"), (808, 8, "cardiac_phase"), (816, 8, "resp_phase"),
    (824, 8, "cardiac_scale"), (832, 8, "resp_mm"), (840, 4, "motion_flags"), (844, 4, "blur_samples"),
    (848, 8, "xform_version"), (856, 8, "reserved7")]


def mask_json_text(b):
    return _MASK_RE.sub(lambda m: m.group(1) + '"*"', b.decode("utf-8")).encode("utf-8")


def mask_stream(b):
    b = bytearray(b)
    for lo, hi in STREAM_MASK:
        b[lo:min(hi, len(b))] = bytes(min(hi, len(b)) - lo) if len(b) > lo else b""
    return bytes(b)


def masked(rel, b):
    if rel.endswith((".json", ".jsonl")):
        return mask_json_text(b)
    if rel.startswith("stream/") and rel.endswith(".bin"):
        return mask_stream(b)
    return b


# ---- where two files differ ---------------------------------------------------------------------

def first_offset(a, b):
    n = min(len(a), len(b))
    for i in range(0, n, 4096):
        if a[i:i + 4096] != b[i:i + 4096]:
            for k in range(i, min(i + 4096, n)):
                if a[k] != b[k]:
                    return k
    return n


def json_path_diff(a, b, path="$"):
    """The first path where two parsed JSON values differ, with both values (None: equal)."""
    if type(a) != type(b):
        return "%s: %r vs %r" % (path, a, b)
    if isinstance(a, dict):
        if list(a) != list(b):
            ka, kb = list(a), list(b)
            return "%s: keys %s vs %s" % (path, [k for k in ka if k not in b] or ka, [k for k in kb if k not in a] or kb)
        for k in a:
            d = json_path_diff(a[k], b[k], "%s.%s" % (path, k))
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return "%s: %d vs %d elements" % (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            d = json_path_diff(x, y, "%s[%d]" % (path, i))
            if d:
                return d
        return None
    return None if a == b else "%s: %r vs %r" % (path, a, b)


def explain_json(a, b):
    lines_a, lines_b = a.decode().split("\n"), b.decode().split("\n")
    try:
        if len(lines_a) > 1 and all(l.startswith("{") for l in lines_a if l):  # .jsonl: one object a line
            for n, (x, y) in enumerate(zip(lines_a, lines_b)):
                if x != y:
                    return "line %d: %s" % (n + 1, json_path_diff(json.loads(x), json.loads(y)) or "formatting")
            return "%d vs %d lines" % (len(lines_a), len(lines_b))
        return json_path_diff(json.loads(a), json.loads(b)) or "same values, different bytes (formatting, key order)"
    except ValueError as e:
        return "not JSON (%s)" % e


def npy_header(b):
    if b[:6] != b"\x93NUMPY":
        return None
    hl = struct.unpack("<H", b[8:10])[0]
    h = b[10:10 + hl].decode("latin-1")
    m = re.search(r"'descr': '([<>|])([a-z])(\d+)'", h)
    s = re.search(r"'shape': \(([^)]*)\)", h)
    if not m or not s:
        return None
    shape = tuple(int(x) for x in s.group(1).split(",") if x.strip())
    fmt = {"f": "f", "u": {1: "B", 2: "H", 4: "I", 8: "Q"}, "i": {1: "b", 2: "h", 4: "i", 8: "q"}}[m.group(2)]
    size = int(m.group(3))
    if isinstance(fmt, dict):
        fmt = fmt[size]
    elif fmt == "f":
        fmt = "f" if size == 4 else "d"
    return 10 + hl, shape, fmt, size


def explain_npy(a, b, off):
    ha, hb = npy_header(a), npy_header(b)
    if not ha or not hb or ha[:2] != hb[:2] or off < ha[0]:
        return "byte %d: in the NPY header or a different shape" % off
    start, shape, fmt, size = ha
    i = (off - start) // size
    idx, r = [], i
    for d in reversed(shape):
        idx.append(r % d)
        r //= d
    idx = tuple(reversed(idx))
    va = struct.unpack_from("<" + fmt, a, start + i * size)[0]
    vb = struct.unpack_from("<" + fmt, b, start + i * size)[0]
    ndiff = sum(1 for k in range(start, min(len(a), len(b)), size) if a[k:k + size] != b[k:k + size])
    return "byte %d: element %s: %r vs %r (%d elements differ)" % (off, idx, va, vb, ndiff)


def png_pixels(b):
    """16-bit (or 8-bit) grayscale, non-interlaced PNG -> (cols, rows, list of ints)."""
    pos, idat = 8, []
    w = h = depth = None
    while pos < len(b):
        n, t = struct.unpack(">I4s", b[pos:pos + 8])
        data = b[pos + 8:pos + 8 + n]
        if t == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", data)
            if ctype != 0 or interlace:
                return None
        elif t == b"IDAT":
            idat.append(data)
        pos += 12 + n
    raw = zlib.decompress(b"".join(idat))
    bpp = depth // 8
    stride = w * bpp
    out, prev = [], bytearray(stride)
    for r in range(h):
        f, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1:(r + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = prev[i]
            ul = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + left) & 255
            elif f == 2:
                line[i] = (line[i] + up) & 255
            elif f == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 255
            elif f == 4:
                p = left + up - ul
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - ul)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else ul)) & 255
        out.extend(struct.unpack(">%d%s" % (w, "H" if bpp == 2 else "B"), bytes(line)))
        prev = line
    return w, h, out


def explain_png(a, b, off):
    try:
        pa, pb = png_pixels(a), png_pixels(b)
    except (zlib.error, struct.error, ValueError) as e:
        return "byte %d (PNG not decoded: %s)" % (off, e)
    if not pa or not pb:
        return "byte %d" % off
    if pa[:2] != pb[:2]:
        return "byte %d: size %dx%d vs %dx%d" % ((off,) + pa[:2] + pb[:2])
    w = pa[0]
    diffs = [i for i, (x, y) in enumerate(zip(pa[2], pb[2])) if x != y]
    if not diffs:
        return "byte %d: the pixels are equal, the encoding (chunks, text, compression) differs" % off
    i = diffs[0]
    return "byte %d: pixel (row %d, col %d): %d vs %d (%d pixels differ)" % (off, i // w, i % w, pa[2][i], pb[2][i],
                                                                             len(diffs))


def explain_stream(a, b, off):
    if off < 576:
        for lo, n, name in HEADER_FIELDS:
            if lo <= off < lo + n:
                return "byte %d: header field %s" % (off, name)
    cols = struct.unpack_from("<I", a, 76)[0] if len(a) >= 80 else 0
    fmt = struct.unpack_from("<I", a, 80)[0] if len(a) >= 84 else 1
    size = 4 if fmt == 2 else 2
    i = (off - 576) // size
    if cols and len(a) >= 576 + (i + 1) * size and len(b) >= 576 + (i + 1) * size:
        c = "<f" if size == 4 else "<H"
        return "byte %d: pixel (row %d, col %d): %r vs %r" % (off, i // cols, i % cols, struct.unpack_from(c, a, 576 + i * size)[0],
                                                             struct.unpack_from(c, b, 576 + i * size)[0])
    return "byte %d: %d vs %d bytes" % (off, len(a), len(b))


def explain_tar(a, b, off):
    ta, tb = tarfile.open(fileobj=io.BytesIO(a)), tarfile.open(fileobj=io.BytesIO(b))
    ma, mb = ta.getmembers(), tb.getmembers()
    if [m.name for m in ma] != [m.name for m in mb]:
        return "byte %d: members %s vs %s" % (off, [m.name for m in ma], [m.name for m in mb])
    for x, y in zip(ma, mb):
        if x.offset <= off < x.offset_data:
            return "byte %d: the tar header of %s" % (off, x.name)
        if x.offset_data <= off < x.offset_data + x.size + 512:
            da, db = ta.extractfile(x).read(), tb.extractfile(y).read()
            return "member %s: %s" % (x.name, explain(x.name, da, db))
    return "byte %d" % off


def explain(rel, a, b):
    off = first_offset(a, b)
    if len(a) != len(b) and off == min(len(a), len(b)):
        return "%d vs %d bytes, equal up to the shorter" % (len(a), len(b))
    try:
        if rel.endswith((".json", ".jsonl")):
            return "byte %d: %s" % (off, explain_json(a, b))
        if rel.endswith(".npy"):
            return explain_npy(a, b, off)
        if rel.endswith(".png"):
            return explain_png(a, b, off)
        if rel.endswith(".tar"):
            return explain_tar(a, b, off)
        if rel.startswith("stream/") and rel.endswith(".bin"):
            return explain_stream(a, b, off)
    except Exception as e:  # the explanation is a courtesy; the difference itself stands
        return "byte %d (%s while explaining)" % (off, e)
    return "byte %d" % off


# ---- the comparison ------------------------------------------------------------------------------

def files(top):
    out = []
    for d, _, names in os.walk(top):
        for n in names:
            out.append(os.path.relpath(os.path.join(d, n), top))
    return sorted(out)


def allow_list():
    """Patterns of README.md's allow-list: files a recording may add (reported, not failed)."""
    pats, inside = [], False
    readme = os.path.join(HERE, "README.md")
    if not os.path.exists(readme):
        return pats
    with open(readme) as f:
        for line in f:
            if "<!-- golden-allow-extra -->" in line:
                inside = True
            elif "<!-- /golden-allow-extra -->" in line:
                inside = False
            elif inside:
                m = re.match(r"\s*-\s*`([^`]+)`", line)
                if m:
                    pats.append(m.group(1))
    return pats


def compare_trees(golden, fresh):
    """Prints every difference; returns the number of failures."""
    g, f = files(golden), files(fresh)
    gs, fs = set(g), set(f)
    bad = 0
    for rel in g:
        if rel not in fs:
            print("MISSING  %s: in the goldens, not recorded" % rel)
            bad += 1
    allowed = allow_list()
    for rel in f:
        if rel not in gs:
            if any(fnmatch.fnmatch(rel, p) for p in allowed):
                print("extra    %s: not in the goldens; allowed by README.md's allow-list" % rel)
            else:
                print("EXTRA    %s: recorded, not in the goldens (README.md's allow-list does not name it)" % rel)
                bad += 1
    # outputs before index.json, which differs whenever an argument does
    both = sorted((rel for rel in g if rel in fs), key=lambda r: (r == "index.json", r))
    same = 0
    for rel in both:
        a = masked(rel, open(os.path.join(golden, rel), "rb").read())
        b = masked(rel, open(os.path.join(fresh, rel), "rb").read())
        if a == b:
            same += 1
            continue
        bad += 1
        print("DIFFERS  %s: %s" % (rel, explain(rel, a, b)))
    print("%d of %d golden files identical%s" % (same, len(g), " (masked: %s; stream header bytes 24-63, 768-775)" % ", ".join(MASKED_KEYS)))
    return bad


NO_DEVICE = ("no CUDA support", "no usable CUDA device", "no CUDA device present")


def cuda_usable(xtwin, tmp):
    p = subprocess.run([xtwin, "render", "--backend", "cuda", "--phantom-size", "8", "--mode", "fd20-128", "--out",
                        os.path.join(tmp, "probe", "p")], capture_output=True, text=True, timeout=record.TIMEOUT)
    if p.returncode != 0 and any(s in p.stderr for s in NO_DEVICE):
        return p.stderr.strip()
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--xtwin", help="the xtwin binary under test")
    ap.add_argument("--server", help="the xtwin-server binary under test")
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--golden", help="the stored goldens (default: tests/golden/BACKEND)")
    ap.add_argument("--keep", help="record into this folder (kept) instead of a temporary one")
    ap.add_argument("--against", nargs=2, metavar=("A", "B"), help="compare two recordings; run nothing")
    a = ap.parse_args()
    if a.against:
        return 1 if compare_trees(*a.against) else 0
    if not a.xtwin or not a.server:
        ap.error("--xtwin and --server are required (or --against A B)")
    golden = a.golden or os.path.join(HERE, a.backend)
    if not os.path.isfile(os.path.join(golden, "index.json")):
        if a.backend == "cuda":
            print("SKIP: no cuda goldens in %s (recorded on the GPU machine: tests/golden/README.md)" % golden)
            return 77
        print("compare.py: no goldens in %s" % golden, file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="xtwin-golden-")
    try:
        xtwin, server = os.path.abspath(a.xtwin), os.path.abspath(a.server)
        if a.backend == "cuda":
            why = cuda_usable(xtwin, tmp)
            if why:
                print("SKIP: %s" % why)
                return 77
        fresh = a.keep or os.path.join(tmp, "fresh")
        try:
            record.record(xtwin, server, a.backend, fresh)
        except (record.Failed, subprocess.TimeoutExpired) as e:
            print("FAILED to record: %s" % e)
            return 1
        bad = compare_trees(golden, fresh)
        print("golden %s: %s" % (a.backend, "identical" if not bad else "%d difference(s)" % bad))
        return 1 if bad else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
