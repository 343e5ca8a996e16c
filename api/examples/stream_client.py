#!/usr/bin/python3
"""Minimal xtwin stream client (Debian's python3-websockets; numpy optional).

    /usr/bin/python3 api/examples/stream_client.py ws://127.0.0.1:8711/v1/stream
    /usr/bin/python3 api/examples/stream_client.py ws://127.0.0.1:8711/v1/stream --count 30 --sweep
    /usr/bin/python3 api/examples/stream_client.py wss://host:8711/v1/stream --token SECRET --insecure
    /usr/bin/python3 api/examples/stream_client.py ws://127.0.0.1:8711/v1/stream --planes a,b --codec zstd

Prints one line per frame: counter, the pose sequence number it carries, size, exposure-to-arrival
latency, frames dropped for this client, and the mean pixel value. --sweep sends a pose update
per frame (primary angle sweeping) and prints when each one shows up. --planes chooses the planes
of a biplane server (a, b or a,b; default a), --codec asks for compressed 16-bit frames (zstd needs
python3-zstandard or python3-zstd, lz4 python3-lz4). The header layout is api/stream.md (C:
api/xt_stream.h); parse_header() below is the reference Python reader.
"""
import argparse
import asyncio
import json
import ssl
import struct
import sys
import time

HEADER = struct.Struct("<IHHQQQQQQQQIIIIQ8d12d2d24sQ")       # version 1: 304 bytes
CHAIN = struct.Struct("<IIQQ8dII")                          # version 2 appends at 304: 96 bytes
CHAIN_FIELDS = ("frame_kind", "bits_stored", "chain_seed", "chain_params_hash", "kv", "mas", "filter_al_mm",
                "filter_cu_mm", "mean_energy_kev", "kerma_ugy_per_mas", "window", "level", "binning", "chain_flags")
# version 3 appends at 400: exposure settings, dose, dose-rate control (176 bytes)
EXPOSURE = struct.Struct("<3d4d2d2dIIddddQddddII")
EXPOSURE_FIELDS = ("ma", "pulse_ms", "focal_spot_mm", "shutter", "wedge", "wedge_t", "grid_tp", "protocol",
                   "exposure_flags", "k_irp_mgy", "kap_gycm2", "k_irp_total_mgy", "kap_total_gycm2", "dose_frames",
                   "d_irp_mm", "drc_measured_ngy", "drc_target_ngy", "drc_curve_s", "drc_flags", "fault_flags")
KIND_MONO, KIND_RAW, KIND_PROCESSED = 0, 1, 2
HEADER_FIELDS = ("magic", "version", "header_size", "frame_counter", "pose_seq", "t_pose_ns",
                 "t_exposure_sched_ns", "t_exposure_ns", "t_render_done_ns", "t_sent_ns",
                 "frames_dropped", "rows", "cols", "pixel_format", "flags", "payload_bytes")
# version 5 appends at 752: plane, timing, cycle, t_cycle_ns (biplane), codec, wire_bytes (48 bytes)
V5 = struct.Struct("<IIQQIIQIf")
V5_FIELDS = ("plane", "timing", "cycle", "t_cycle_ns", "codec", "saturated_px", "wire_bytes", "contrast_seq",
             "iodine_mg_ml_max")
CODECS = {0: "none", 1: "zstd", 2: "lz4"}
MAGIC = 0x46575458  # "XTWF"
PIX_U16, PIX_F32 = 1, 2
assert HEADER.size == 304 and HEADER.size + CHAIN.size == 400 and HEADER.size + CHAIN.size + EXPOSURE.size == 576


def parse_header(msg):
    """Returns (header dict, pixel bytes) of one binary stream message."""
    v = HEADER.unpack_from(msg, 0)
    h = dict(zip(HEADER_FIELDS, v[:16]))
    if h["magic"] != MAGIC:
        raise ValueError("not an xtwin frame (magic %#x)" % h["magic"])
    h["pose"] = dict(zip(("primary_deg", "secondary_deg", "detector_rot_deg", "sod_mm", "sid_mm"), v[16:21]))
    h["pose"]["table_mm"] = list(v[21:24])
    h["P"] = [list(v[24 + 4 * r:28 + 4 * r]) for r in range(3)]
    h["pitch_mm"] = list(v[36:38])
    h["mode"] = v[38].split(b"\0", 1)[0].decode()
    h["period_ns"] = v[39]
    if h["version"] >= 2 and h["header_size"] >= HEADER.size + CHAIN.size:
        h.update(zip(CHAIN_FIELDS, CHAIN.unpack_from(msg, HEADER.size)))
    if h["version"] >= 3 and h["header_size"] >= 576:
        v3 = EXPOSURE.unpack_from(msg, 400)
        h.update(zip(EXPOSURE_FIELDS[:3], v3[:3]))
        h["shutter"], h["wedge"] = list(v3[3:7]), list(v3[7:9])
        h.update(zip(EXPOSURE_FIELDS[5:], v3[9:]))
    if h["version"] >= 5 and h["header_size"] >= 800:
        h.update(zip(V5_FIELDS, V5.unpack_from(msg, 752)))
    hs, n = h["header_size"], h["payload_bytes"]
    if h.get("codec", 0) == 0:
        px = memoryview(msg)[hs:hs + n]
    else:  # compressed by the server for this client: the same pixel bytes once decoded
        px = decompress(CODECS.get(h["codec"], str(h["codec"])), bytes(memoryview(msg)[hs:hs + h["wire_bytes"]]), n)
        if len(px) != n:
            raise ValueError("frame %d: %d bytes decoded, the header says %d" % (h["frame_counter"], len(px), n))
    return h, px


def decompress(codec, data, size):
    """A zstd frame or an LZ4 block back into its size bytes (api/stream.md, "Compression")."""
    if codec == "zstd":
        try:
            import zstandard
            return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
        except ImportError:
            try:
                import zstd
                return zstd.decompress(data)
            except ImportError:
                raise ImportError("zstd frames need the Python module zstandard (Debian: python3-zstandard) "
                                  "or zstd (python3-zstd)") from None
    if codec == "lz4":
        try:
            import lz4.block
        except ImportError:
            raise ImportError("lz4 frames need the Python module lz4 (Debian: python3-lz4)") from None
        return lz4.block.decompress(data, uncompressed_size=size)
    raise ValueError("unknown codec %r" % codec)


def mean_pixel(h, px):
    try:
        import numpy as np
        a = np.frombuffer(px, dtype="<u2" if h["pixel_format"] == PIX_U16 else "<f4")
        return float(a.mean())
    except ImportError:
        fmt = "<%d%s" % (h["rows"] * h["cols"], "H" if h["pixel_format"] == PIX_U16 else "f")
        a = struct.unpack(fmt, px)
        return sum(a) / len(a)


async def run(args):
    import websockets
    if args.codec != "none":
        import importlib
        import importlib.util
        try:
            importlib.import_module({"zstd": "zstandard", "lz4": "lz4.block"}[args.codec])
        except ImportError:
            if args.codec == "lz4" or importlib.util.find_spec("zstd") is None:
                raise ImportError("--codec %s needs %s" % (args.codec, "python3-lz4" if args.codec == "lz4"
                                                           else "python3-zstandard or python3-zstd")) from None
    query = "planes=%s&codec=%s" % (args.planes, args.codec)
    args.url += ("&" if "?" in args.url else "?") + query
    kw = {"max_size": 64 << 20}
    if args.token:
        kw["additional_headers" if hasattr(websockets, "asyncio") else "extra_headers"] = {
            "Authorization": "Bearer " + args.token}
    if args.url.startswith("wss:"):
        ctx = ssl.create_default_context()
        if args.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        kw["ssl"] = ctx
    async with websockets.connect(args.url, **kw) as ws:
        n, seq, sent_at = 0, 0, {}
        if args.processed:
            await ws.send(json.dumps({"type": "frames", "frames": "processed"}))
        while args.count <= 0 or n < args.count:
            msg = await ws.recv()
            now = time.monotonic_ns()
            if isinstance(msg, str):
                j = json.loads(msg)
                if j.get("type") == "hello":
                    a = j["state"]["acquisition"]
                    print("connected: %s, %s %dx%d at %g fps (%s, %s)" % (j["server"], a["mode"], a["cols"], a["rows"],
                          a["fps"], a["run_mode"], "running" if a["running"] else "stopped"))
                elif not j.get("ok", True):
                    print("error:", j.get("error"))
                continue
            h, px = parse_header(msg)
            n += 1
            extra = ""
            if h["pose_seq"] in sent_at:
                extra = "  pose %d shown %.1f ms after it was sent" % (h["pose_seq"], (now - sent_at.pop(h["pose_seq"])) / 1e6)
            if "plane" in h:
                extra = "  plane %s  %s %d bytes" % ("AB"[h["plane"]] if h["plane"] < 2 else h["plane"],
                                                   CODECS.get(h["codec"], "?"), h["wire_bytes"]) + extra
            print("frame %6d  pose_seq %4d  %dx%d %s  latency %6.1f ms  dropped %d  mean %.1f%s" % (
                h["frame_counter"], h["pose_seq"], h["cols"], h["rows"], h["mode"],
                (now - h["t_exposure_ns"]) / 1e6, h["frames_dropped"], mean_pixel(h, px), extra), flush=True)
            if args.sweep:
                seq = max(seq, h["pose_seq"]) + 1
                sent_at[seq] = time.monotonic_ns()
                await ws.send(json.dumps({"type": "pose", "seq": seq,
                                          "pose": {"primary_deg": (seq * 3) % 180 - 90}}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url", nargs="?", default="ws://127.0.0.1:8711/v1/stream")
    p.add_argument("--count", type=int, default=0, help="frames to receive (0: until interrupted)")
    p.add_argument("--token", help="bearer token (server started with --token)")
    p.add_argument("--insecure", action="store_true", help="wss: accept a self-signed certificate")
    p.add_argument("--sweep", action="store_true", help="send a pose update after every frame")
    p.add_argument("--processed", action="store_true", help="with the imaging chain on: the processed frames")
    p.add_argument("--planes", default="a", help="planes of a biplane server: a, b or a,b (default a)")
    p.add_argument("--codec", default="none", choices=("none", "zstd", "lz4"),
                   help="16-bit frames compressed by the server (default none)")
    args = p.parse_args()
    try:
        asyncio.run(run(args))
    except KeyboardInterrupt:
        pass
    except Exception as e:  # a closed server, a refused token: one line, not a trace
        print("stream_client: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
