"""The binary frame message of the xtwin stream, decoded by the offsets api/stream.md documents
(C: api/xt_stream.h). Pixels start at header_size, so fields a later version appends before the
pixels are skipped, not misread; Frame.raw_header keeps the whole header for readers of them.
Compressed pixels (version 5: codec zstd or lz4, asked for by the client) are decompressed here,
so that a Frame's image is the same whatever the codec."""
import struct
import time

import numpy as np

MAGIC = 0x46575458  # the bytes "XTWF"
HEADER_SIZE_V1 = 304
HEADER_SIZE_V2 = 400  # version 2 appended the imaging chain's fields (frame_kind .. chain_flags)
HEADER_SIZE_V3 = 576  # version 3: exposure settings, dose, dose-rate control (ma .. drc_flags)
HEADER_SIZE_V4 = 752  # version 4: the readout: panel, region, binning, zoom field, P_out (detector .. P_out)
HEADER_SIZE_V5 = 800  # version 5: plane, timing, cycle, t_cycle_ns (biplane); codec, wire_bytes (transport)
HEADER_SIZE_V6 = 864  # version 6: motion: its time, the phases, what moved (motion_t_s .. xform_version)
PIX_U16, PIX_F32 = 1, 2
FLAG_LOCKSTEP = 1
PLANES = {0: "A", 1: "B"}
CODECS = {0: "none", 1: "zstd", 2: "lz4"}
CODEC_IDS = {v: k for k, v in CODECS.items()}
# Where each codec comes from on Debian 12: the module and its package (api/stream.md, "Compression").
CODEC_MODULES = {"zstd": (("zstandard", "python3-zstandard"), ("zstd", "python3-zstd")),
                 "lz4": (("lz4.block", "python3-lz4"),)}

# (name, offset, struct format) of every field: the table in api/stream.md. Fields at or beyond a
# message's header_size (an older server's shorter header) are decoded as None.
FIELDS = (
    ("magic", 0, "<I"),
    ("version", 4, "<H"),
    ("header_size", 6, "<H"),
    ("frame_counter", 8, "<Q"),
    ("pose_seq", 16, "<Q"),
    ("t_pose_ns", 24, "<Q"),
    ("t_exposure_sched_ns", 32, "<Q"),
    ("t_exposure_ns", 40, "<Q"),
    ("t_render_done_ns", 48, "<Q"),
    ("t_sent_ns", 56, "<Q"),
    ("frames_dropped", 64, "<Q"),
    ("rows", 72, "<I"),
    ("cols", 76, "<I"),
    ("pixel_format", 80, "<I"),
    ("flags", 84, "<I"),
    ("payload_bytes", 88, "<Q"),
    ("pose", 96, "<8d"),
    ("P", 160, "<12d"),
    ("pitch_mm", 256, "<2d"),
    ("mode", 272, "<24s"),
    ("period_ns", 296, "<Q"),
    ("frame_kind", 304, "<I"),
    ("bits_stored", 308, "<I"),
    ("chain_seed", 312, "<Q"),
    ("chain_params_hash", 320, "<Q"),
    ("kv", 328, "<d"),
    ("mas", 336, "<d"),
    ("filter_al_mm", 344, "<d"),
    ("filter_cu_mm", 352, "<d"),
    ("mean_energy_kev", 360, "<d"),
    ("kerma_ugy_per_mas", 368, "<d"),
    ("window", 376, "<d"),
    ("level", 384, "<d"),
    ("binning", 392, "<I"),
    ("chain_flags", 396, "<I"),
    ("ma", 400, "<d"),
    ("pulse_ms", 408, "<d"),
    ("focal_spot_mm", 416, "<d"),
    ("shutter", 424, "<4d"),
    ("wedge", 456, "<2d"),
    ("wedge_t", 472, "<d"),
    ("grid_tp", 480, "<d"),
    ("protocol", 488, "<I"),
    ("exposure_flags", 492, "<I"),
    ("k_irp_mgy", 496, "<d"),
    ("kap_gycm2", 504, "<d"),
    ("k_irp_total_mgy", 512, "<d"),
    ("kap_total_gycm2", 520, "<d"),
    ("dose_frames", 528, "<Q"),
    ("d_irp_mm", 536, "<d"),
    ("drc_measured_ngy", 544, "<d"),
    ("drc_target_ngy", 552, "<d"),
    ("drc_curve_s", 560, "<d"),
    ("drc_flags", 568, "<I"),
    ("fault_flags", 572, "<I"),
    ("detector", 576, "<16s"),
    ("roi", 592, "<4I"),
    ("panel", 608, "<2I"),
    ("panel_pitch_mm", 616, "<d"),
    ("readout_binning", 624, "<d"),
    ("field_cm", 632, "<d"),
    ("dose_ratio", 640, "<d"),
    ("readout_ms", 648, "<d"),
    ("P_out", 656, "<12d"),
    ("plane", 752, "<I"),
    ("timing", 756, "<I"),
    ("cycle", 760, "<Q"),
    ("t_cycle_ns", 768, "<Q"),
    ("codec", 776, "<I"),
    ("saturated_px", 780, "<I"),
    ("wire_bytes", 784, "<Q"),
    ("contrast_seq", 792, "<I"),
    ("iodine_mg_ml_max", 796, "<f"),
    ("motion_t_s", 800, "<d"),
    ("cardiac_phase", 808, "<d"),
    ("resp_phase", 816, "<d"),
    ("cardiac_scale", 824, "<d"),
    ("resp_mm", 832, "<d"),
    ("motion_flags", 840, "<I"),
    ("blur_samples", 844, "<I"),
    ("xform_version", 848, "<Q"),
)
MOTION_KEYS = ("motion_t_s", "cardiac_phase", "resp_phase", "cardiac_scale", "resp_mm", "motion_flags",
               "blur_samples", "xform_version")
FRAME_KINDS = {0: "mono", 1: "raw", 2: "processed"}
CHAIN_KEYS = ("chain_seed", "chain_params_hash", "kv", "mas", "filter_al_mm", "filter_cu_mm", "mean_energy_kev",
              "kerma_ugy_per_mas", "window", "level", "binning", "chain_flags",
              # version 3 (None from an older server): exposure, dose of the frame and the run, the loop
              "ma", "pulse_ms", "focal_spot_mm", "shutter", "wedge", "wedge_t", "grid_tp", "protocol",
              "exposure_flags", "k_irp_mgy", "kap_gycm2", "k_irp_total_mgy", "kap_total_gycm2", "dose_frames",
              "d_irp_mm", "drc_measured_ngy", "drc_target_ngy", "drc_curve_s", "drc_flags",
              # version 5, offset 780 (was reserved; None from an older server): the raw pixels at full scale
              "saturated_px")
POSE_KEYS = ("primary_deg", "secondary_deg", "detector_rot_deg", "sod_mm", "sid_mm")


class Frame:
    """One detector frame from the stream.

    image           numpy array (rows, cols): uint16 intensity or float32 line integral; a
                    read-only view of the received message (np.array(frame.image) to own a copy)
    pose            dict: primary_deg, secondary_deg, detector_rot_deg, sod_mm, sid_mm, table_mm
    P               numpy (3, 4) projection matrix, world mm (homogeneous) -> (col*w, row*w, w)
    counter, pose_seq, frames_dropped, flags, lockstep, mode, pixel_format ("uint16"/"float32"),
    pitch_mm (u, v), period_ns, version, header_size, raw_header (bytes)
    frame_kind      "mono" (chain off), "raw" (the panel's ADC codes) or "processed"; bits_stored;
                    chain: dict of the imaging chain's header fields (kv, mas, seed, ..., saturated_px:
                    the exposure's raw pixels at the ADC's full scale) or None
                    when the chain is off (both None from a version-1 server)
    readout         dict (version 4; None before): detector, panel (cols, rows), panel_pitch_mm,
                    roi_origin and roi_size (native pixels), binning (native per delivered pixel),
                    field_cm (0: not a zoom field), dose_ratio, readout_ms, P (3, 4) of the
                    delivered pixels (the chain's binning applied; P is the render grid's)
    plane           "A" (frontal; every single-plane frame) or "B" (lateral); timing (how the planes'
                    pulses were scheduled), cycle (the pulse cycle: the frames of both planes of one
                    cycle share it), t_cycle_ns (its start); all None before version 5
    codec           how the pixels came: "none", "zstd" or "lz4" (None before version 5);
                    wire_bytes the bytes they took on the wire (payload_bytes when "none"); image is
                    the decoded pixels either way
    motion          dict (version 6; None before): motion_t_s (the time the models were moved to, s
                    since the motion's start), cardiac_phase and resp_phase (0..1; -1 off),
                    cardiac_scale, resp_mm, motion_flags (1 API transform, 2 cardiac, 4 respiratory),
                    blur_samples, xform_version
    contrast        dict (offset 792; None before version 5): seq (the contrast state the exposure was
                    rendered with, GET /v1/contrast's seq; 0 no injection yet), iodine_mg_ml_max
    t_pose_ns, t_exposure_sched_ns, t_exposure_ns, t_render_done_ns, t_sent_ns: the server's
                    CLOCK_MONOTONIC; t_received_ns: time.monotonic_ns() when the client read it
    """

    __slots__ = ("image", "pose", "P", "counter", "pose_seq", "frames_dropped", "flags", "lockstep", "mode",
                 "pixel_format", "pitch_mm", "period_ns", "version", "header_size", "raw_header", "rows", "cols",
                 "t_pose_ns", "t_exposure_sched_ns", "t_exposure_ns", "t_render_done_ns", "t_sent_ns",
                 "t_received_ns", "frame_kind", "bits_stored", "chain", "readout", "plane", "timing", "cycle",
                 "t_cycle_ns", "codec", "wire_bytes", "motion", "contrast")

    def __repr__(self):
        return "<Frame %d pose_seq %d %s %dx%d %s>" % (self.counter, self.pose_seq, self.mode, self.cols, self.rows,
                                                      self.pixel_format)


def parse_header(msg):
    """The header fields of a binary stream message as a dict (pose, P, pitch_mm and mode decoded)."""
    mv = memoryview(msg)
    if len(mv) < HEADER_SIZE_V1:
        raise ValueError("stream message of %d bytes is shorter than the %d-byte header" % (len(mv), HEADER_SIZE_V1))
    h = {}
    hs = struct.unpack_from("<H", mv, 6)[0]
    for name, off, fmt in FIELDS:
        if off + struct.calcsize(fmt) > max(hs, HEADER_SIZE_V1):
            h[name] = None
            continue
        v = struct.unpack_from(fmt, mv, off)
        h[name] = v[0] if len(v) == 1 else v
    if h["magic"] != MAGIC:
        raise ValueError("not an xtwin frame (magic %#x)" % h["magic"])
    if h["header_size"] < HEADER_SIZE_V1:
        raise ValueError("header_size %d is below the version-1 size %d" % (h["header_size"], HEADER_SIZE_V1))
    pose = dict(zip(POSE_KEYS, h["pose"][:5]))
    pose["table_mm"] = list(h["pose"][5:8])
    h["pose"] = pose
    h["mode"] = h["mode"].split(b"\0", 1)[0].decode("utf-8", "replace")
    if h["detector"] is not None:
        h["detector"] = h["detector"].split(b"\0", 1)[0].decode("utf-8", "replace")
    return h


_decoders = {}


def decoder(codec):
    """The function (data, size) -> bytes that undoes a codec ("zstd", "lz4"); ImportError naming
    the Debian package when its Python module is missing."""
    if codec in _decoders:
        return _decoders[codec]
    if codec not in CODEC_MODULES:
        raise ValueError("unknown codec %r (none, zstd, lz4)" % codec)
    import importlib
    for module, _ in CODEC_MODULES[codec]:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        if module == "zstandard":
            d = mod.ZstdDecompressor()
            fn = lambda data, size: d.decompress(data, max_output_size=size)  # noqa: E731
        elif module == "zstd":
            fn = lambda data, size: mod.decompress(data)  # noqa: E731
        else:
            fn = lambda data, size: mod.decompress(data, uncompressed_size=size)  # noqa: E731
        _decoders[codec] = fn
        return fn
    raise ImportError("the %s codec needs the Python module %s (Debian: apt-get install %s)" % (
        codec, " or ".join(m for m, _ in CODEC_MODULES[codec]), " or ".join(p for _, p in CODEC_MODULES[codec])))


def check_codec(codec):
    """Raises ImportError (naming the package) unless this client can decode codec; None/"none" pass."""
    if codec not in (None, "none"):
        decoder(codec)


def payload(msg, h):
    """The pixel bytes of a message whose header is h: as sent (codec none) or decompressed."""
    hs, n = h["header_size"], h["payload_bytes"]
    codec = h.get("codec") or 0
    if codec == 0:
        if hs + n > len(msg):
            raise ValueError("frame %d: %d payload bytes in a %d-byte message" % (h["frame_counter"], n, len(msg)))
        return memoryview(msg)[hs:hs + n]
    if codec not in CODECS:
        raise ValueError("frame %d: unknown codec %d" % (h["frame_counter"], codec))
    w = h["wire_bytes"]
    if hs + w != len(msg):
        raise ValueError("frame %d: %d wire bytes after the header in a %d-byte message" % (
            h["frame_counter"], w, len(msg)))
    out = decoder(CODECS[codec])(bytes(memoryview(msg)[hs:]), n)
    if len(out) != n:
        raise ValueError("frame %d: %s gave %d bytes, the header says %d" % (h["frame_counter"], CODECS[codec],
                                                                           len(out), n))
    return out


def parse_frame(msg, t_received_ns=None):
    """A Frame from one binary stream message (bytes-like)."""
    h = parse_header(msg)
    if h["pixel_format"] not in (PIX_U16, PIX_F32):
        raise ValueError("unknown pixel_format %d" % h["pixel_format"])
    dtype = np.dtype("<u2") if h["pixel_format"] == PIX_U16 else np.dtype("<f4")
    n = h["rows"] * h["cols"]
    hs = h["header_size"]
    if h["payload_bytes"] != n * dtype.itemsize:
        raise ValueError("frame %d: %d payload bytes for %dx%d pixels in a %d-byte message" % (
            h["frame_counter"], h["payload_bytes"], h["rows"], h["cols"], len(msg)))
    px = payload(msg, h)
    f = Frame()
    f.image = np.frombuffer(px, dtype=dtype, count=n).reshape(h["rows"], h["cols"])
    f.pose = h["pose"]
    f.P = np.array(h["P"], dtype=np.float64).reshape(3, 4)
    f.counter = h["frame_counter"]
    f.pose_seq = h["pose_seq"]
    f.frames_dropped = h["frames_dropped"]
    f.flags = h["flags"]
    f.lockstep = bool(h["flags"] & FLAG_LOCKSTEP)
    f.mode = h["mode"]
    f.pixel_format = "uint16" if h["pixel_format"] == PIX_U16 else "float32"
    f.pitch_mm = tuple(h["pitch_mm"])
    f.period_ns = h["period_ns"]
    f.version = h["version"]
    f.header_size = hs
    f.raw_header = bytes(memoryview(msg)[:hs])
    f.rows, f.cols = h["rows"], h["cols"]
    f.frame_kind = None if h["frame_kind"] is None else FRAME_KINDS.get(h["frame_kind"], str(h["frame_kind"]))
    f.bits_stored = h["bits_stored"]
    f.chain = {k: h[k] for k in CHAIN_KEYS} if f.frame_kind in ("raw", "processed") else None
    # version 4 (None from an older server): how the panel was read out for this frame
    f.readout = None if h["detector"] is None else {
        "detector": h["detector"], "roi_origin": tuple(h["roi"][:2]), "roi_size": tuple(h["roi"][2:]),
        "panel": tuple(h["panel"]), "panel_pitch_mm": h["panel_pitch_mm"], "binning": h["readout_binning"],
        "field_cm": h["field_cm"], "dose_ratio": h["dose_ratio"], "readout_ms": h["readout_ms"],
        "P": np.array(h["P_out"], dtype=np.float64).reshape(3, 4)}
    # version 5 (None from an older server): the plane and its pulse cycle, and the transport
    f.plane = None if h["plane"] is None else PLANES.get(h["plane"], str(h["plane"]))
    f.timing, f.cycle, f.t_cycle_ns = h["timing"], h["cycle"], h["t_cycle_ns"]
    f.codec = None if h["codec"] is None else CODECS.get(h["codec"], str(h["codec"]))
    f.wire_bytes = h["wire_bytes"]
    f.motion = None if h["motion_t_s"] is None else {k: h[k] for k in MOTION_KEYS}
    # offset 792 (version 5's reserved slot; 0 without contrast): the injection state and the peak iodine
    f.contrast = None if h["contrast_seq"] is None else {"seq": h["contrast_seq"],
                                                         "iodine_mg_ml_max": h["iodine_mg_ml_max"]}
    for k in ("t_pose_ns", "t_exposure_sched_ns", "t_exposure_ns", "t_render_done_ns", "t_sent_ns"):
        setattr(f, k, h[k])
    f.t_received_ns = time.monotonic_ns() if t_received_ns is None else t_received_ns
    return f
