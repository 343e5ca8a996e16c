#!/usr/bin/python3
"""Contact sheets of a golden set, for reviewing it by eye (standard library only).

    /usr/bin/python3 tests/golden/preview.py tests/golden/cpu /tmp/golden-preview

writes render.png, stream.png and dataset.png into the second folder: every image of the set
(render: the .png intensity, _raw.png, _proc.png; stream: each frame message; dataset: each frame's
lineint, raw, processed and label channels), each tile 128 x 128, histogram-equalised (dark = low
values; the statistics printed are the file's own values), in the order printed with each tile's
min / max / mean. Not a test: README.md says what was checked on these sheets."""
import io
import os
import struct
import sys
import tarfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from compare import png_pixels, npy_header  # noqa: E402

TILE = 128


def from_npy(b):
    start, shape, fmt, size = npy_header(b)
    n = 1
    for d in shape:
        n *= d
    vals = list(struct.unpack_from("<%d%s" % (n, fmt), b, start))
    if len(shape) == 3:  # channels: one image each
        k = shape[1] * shape[2]
        return [(shape[2], shape[1], vals[i * k:(i + 1) * k]) for i in range(shape[0])]
    return [(shape[1], shape[0], vals)]


def from_stream(b):
    rows, cols, fmt = struct.unpack_from("<III", b, 72)
    n = rows * cols
    return (cols, rows, list(struct.unpack_from("<%d%s" % (n, "f" if fmt == 2 else "H"), b, 576)))


def tile(img):
    w, h, v = img
    s = sorted(v)
    # histogram equalisation: a value's rank, so the head's interior shows as well as its outline
    rank, n = {}, len(s)
    for i, x in enumerate(s):
        rank.setdefault(x, i)
    out = bytearray(TILE * TILE)
    for r in range(TILE):
        for c in range(TILE):
            x = v[(r * h // TILE) * w + c * w // TILE]
            out[r * TILE + c] = min(255, rank[x] * 256 // n)
    return out, "%dx%d min %g max %g mean %.4g" % (w, h, s[0], s[-1], sum(v) / len(v))


def sheet(tiles, path, per_row=6):
    rows = (len(tiles) + per_row - 1) // per_row
    W, H = per_row * (TILE + 4), rows * (TILE + 4)
    px = bytearray(W * H)
    for i, (t, _) in enumerate(tiles):
        x0, y0 = (i % per_row) * (TILE + 4), (i // per_row) * (TILE + 4)
        for r in range(TILE):
            px[(y0 + r) * W + x0:(y0 + r) * W + x0 + TILE] = t[r * TILE:(r + 1) * TILE]
    raw = b"".join(b"\0" + bytes(px[y * W:(y + 1) * W]) for y in range(H))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 0, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def main():
    top, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    groups = {"render": [], "stream": [], "dataset": []}
    rd = os.path.join(top, "render")
    for n in sorted(os.listdir(rd)):
        if n.endswith(".png"):
            groups["render"].append((n, png_pixels(open(os.path.join(rd, n), "rb").read())))
    sd = os.path.join(top, "stream")
    for n in sorted(os.listdir(sd)):
        if n.endswith(".bin"):
            groups["stream"].append((n, from_stream(open(os.path.join(sd, n), "rb").read())))
    dd = os.path.join(top, "dataset", "shards")
    for n in sorted(os.listdir(dd)):
        if n.endswith(".tar"):
            t = tarfile.open(os.path.join(dd, n))
            for m in t.getmembers():
                if m.name.endswith(".npy") and not m.name.endswith("seg.npy"):
                    for k, img in enumerate(from_npy(t.extractfile(m).read())):
                        groups["dataset"].append(("%s[%d]" % (m.name, k), img))
    for g, items in groups.items():
        tiles = []
        print("%s.png:" % g)
        for i, (name, img) in enumerate(items):
            t, what = tile(img)
            tiles.append((t, name))
            print("  %2d %-45s %s" % (i, name, what))
        sheet(tiles, os.path.join(out, g + ".png"), per_row=6 if g != "stream" else 8)


if __name__ == "__main__":
    main()
