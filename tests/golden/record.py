#!/usr/bin/python3
"""Records the golden outputs of every front end that makes a frame (issue 23, point 6).

    /usr/bin/python3 tests/golden/record.py --xtwin build/tools/xtwin --server build/server/xtwin-server \
        --backend cpu --out tests/golden/cpu

writes into OUT (which must not exist, or be empty):

  index.json       what was asked: every render's arguments, the dataset spec, the stream's steps
  inputs/          model files made here: a Gaussian mixture (.gmm.json) and a NanoVDB grid (.nvdb)
  render/          `xtwin render --chain` (and one mono render): .npy, .png, _raw.png, _proc.png, .json
  dataset/         `xtwin dataset` of a small spec: spec.json, dataset.json, shards, manifests
  stream/          `xtwin-server` in lockstep, chain on: every binary frame message (header + pixels)
                   of a raw and a processed client, and their text messages

Every command runs with its working directory inside OUT and relative paths, so no output names
an absolute path. Standard library only (the GPU machine has no numpy and no python3-websockets):
the stream client below is a small RFC 6455 client. compare.py re-records with this module into a
temporary folder and compares; README.md says what each golden is and what was reviewed.

Exit 0 recorded; 1 a command failed (its output is printed); 2 usage."""
import argparse
import base64
import ctypes
import hashlib
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

# ---- what is recorded ---------------------------------------------------------------------------
# Small and fast: the head phantom at 64^3 x 3 mm, fd20-128 (one case at fd20-256), fixed seeds.
# The chain's gain is its default: a resampled mode's pixel reads the mean of its native pixels'
# codes (docs/imaging.md §4), so the coarse pixels read on a native pixel's scale and air does not
# saturate the 14-bit ADC; the first case keeps every chain default on purpose.
HEAD = ["--phantom-size", "64", "--phantom-spacing", "3"]
GOLDEN_SEED = "2323"

RENDERS = [
    ("r01_head_ap_chain_defaults",
     ["--phantom", "head"] + HEAD + ["--mode", "fd20-128", "--chain"]),
    ("r02_labels_lao30_cran15_70kv",
     ["--phantom", "head-labels"] + HEAD + ["--mode", "fd20-128", "--primary", "30", "--secondary", "15",
      "--chain", "--kv", "70", "--mas", "0.05", "--filter-cu-mm", "0.2",
      "--seed", GOLDEN_SEED, "--frame", "7"]),
    ("r03_labels_rao90_scatter_grid_bin2",
     ["--phantom", "head-labels"] + HEAD + ["--mode", "fd20-256", "--primary", "-90", "--detector-rot", "10",
      "--sod", "750", "--sid", "1100", "--table", "0,10,-20",
      "--chain", "--scatter", "1", "--grid", "1", "--binning", "2",
      "--seed", GOLDEN_SEED]),
    # three frames of one command: lag, the recursive filter, the dose-rate loop and the dose
    # totals carry from frame to frame
    ("r04_labels_sweep_drc",
     ["--phantom", "head-labels"] + HEAD + ["--mode", "fd20-128", "--angles", "-45,0,45", "--secondary", "-20",
      "--chain", "--drc", "1", "--seed", GOLDEN_SEED, "--frame", "100"]),
    ("r05_gmm_lao30_cran15",
     ["--volume", "../inputs/blobs.gmm.json", "--mode", "fd20-128", "--primary", "30", "--secondary", "15",
      "--chain", "--seed", GOLDEN_SEED]),
    ("r06_nvdb_labels_rao90",
     ["--volume", "../inputs/head-labels.nvdb", "--mode", "fd20-128", "--primary", "-90",
      "--chain", "--kv", "100", "--edge-gain", "0", "--seed", GOLDEN_SEED]),
    # the mono path (no chain): .npy, .png, .json only
    ("r07_head_mono_lao90_caud30",
     ["--phantom", "head"] + HEAD + ["--mode", "fd20-128", "--primary", "90", "--secondary", "-30"]),
]

# A hand-written mixture (docs/models.md, ".gmm.json"): a skull-sized soft-tissue blob, a bone
# shell-ish blob, a contrast-filled vessel segment and a small bone nodule.
GMM = {"name": "golden blobs", "cutoff_sigma": 3.5, "gaussians": [
    {"center": [0, 0, 0], "scale": [22, 28, 26], "rho": 0.02, "material": "soft_tissue"},
    {"center": [0, 0, 0], "scale": [25, 31, 29], "quat": [0.99, 0, 0.1, 0], "rho": 0.004, "material": "bone"},
    {"center": [15, -10, 20], "scale": [4, 6, 16], "quat": [0.92, 0, 0, 0.38], "rho": 0.03,
     "material": "iodine_contrast"},
    {"center": [-20, 5, -15], "scale": 5, "rho": 0.05, "material": "bone"}]}

NVDB = ["nvdb-convert", "--phantom", "head-labels", "--phantom-size", "48", "--phantom-spacing", "4",
        "--quant", "fp8", "--zip", "--out", "inputs/head-labels.nvdb"]


def dataset_spec(backend):
    return {
        "format": "xtwin-dataset-spec", "version": 1,
        "description": "golden set of issue 23: three views of the labelled head with perturbations, chain on",
        "seed": int(GOLDEN_SEED), "frames": 3, "backend": backend,
        "detector": {"modes": ["fd20-128"]},
        "models": [{"name": "head", "phantom": "head-labels", "size": 64, "spacing_mm": 3,
                    "perturb": {"translate_mm": [5, 5, 5], "rotate_deg": [2, 2, 5]}}],
        "poses": {"sampler": "views", "views": ["AP", "LAO 30 CRAN 15", "RAO 90"], "jitter_deg": 2,
                  "sid_mm": [1100, 1200], "table_mm": [0, [-10, 10], 0]},
        "labels": {"quantity": "path_length_mm",
                   "channels": [{"name": "bone", "model": "head", "labels": ["bone"]},
                                {"name": "soft", "model": "head", "labels": ["soft_tissue"]}]},
        "landmarks": [{"name": "centre", "model": "head", "position_mm": [0, 0, 0]},
                      {"name": "vertex", "model": "head", "position_mm": [0, 0, 80]}],
        "chain": {"kv": [60, 90], "dose_ngy": [20, 80], "filter_cu_mm": 0.2},
        "write": {"lineint": True, "intensity": False, "raw": True, "processed": True, "labels": True,
                  "segmentation": True, "landmarks": True},
        "output": {"format": "tar", "shard_frames": 2},
    }


DATASET_ARGS = ["--threads", "2", "--writers", "1", "--progress", "none"]

# --devices 1: with several GPUs the server rendered lockstep frames round robin on one worker per
# GPU, each with its own chain state (lag, recursive filter), so frame k's lag came from frame
# k - n (README.md, "Findings"; fixed: chain frames now all render on worker 0). Kept: the
# recorded argv is part of index.json.
SERVER_ARGS = ["--devices", "1", "--threads", "2", "--phantom-dim", "64", "--phantom-spacing", "3", "--mode", "fd20-128",
               "--run-mode", "lockstep", "--chain", "--fps", "15"]  # --fps: the default is measured since issue 27

# The stream's script: the raw client (R) sends every command; the processed client (P) only chose
# its frames. ("acq", {...}) and ("pose", {...}) wait for their ack; ("trigger",) waits for the ack
# and for one frame on each client.
STREAM_STEPS = [
    ("acq", {"chain": {"seed": int(GOLDEN_SEED)}}),
    ("pose", {"primary_deg": 0, "secondary_deg": 0}), ("trigger",),
    ("pose", {"primary_deg": 30, "secondary_deg": 15}), ("trigger",),
    ("pose", {"primary_deg": -90, "secondary_deg": 0}), ("trigger",),
    ("acq", {"chain": {"kv": 70, "mas": 0.05, "filter_cu_mm": 0.2, "grid": 1, "scatter": 1, "binning": 2}}),
    ("pose", {"primary_deg": -30, "secondary_deg": -20, "table_mm": [0, 10, -20]}), ("trigger",),
    ("acq", {"chain": {"binning": 1, "scatter": 0, "drc": 1}}), ("trigger",), ("trigger",),
    ("acq", {"chain": {"enabled": False}, "pixel_format": "uint16"}), ("trigger",),
    ("acq", {"pixel_format": "float32"}), ("pose", {"primary_deg": 45, "secondary_deg": 0}), ("trigger",),
]

TIMEOUT = 120  # seconds for any one command or frame (ASan builds are slow)


class Failed(Exception):
    pass


# ---- commands ------------------------------------------------------------------------------------

def run(argv, cwd):
    p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
    if p.returncode != 0:
        raise Failed("%s exited %d in %s:\n%s%s" % (" ".join(argv), p.returncode, cwd, p.stdout, p.stderr))
    return p


def record_inputs(xtwin, out):
    os.makedirs(os.path.join(out, "inputs"))
    with open(os.path.join(out, "inputs", "blobs.gmm.json"), "w") as f:
        json.dump(GMM, f, indent=1)
        f.write("\n")
    run([xtwin] + NVDB, out)


def record_render(xtwin, backend, out):
    d = os.path.join(out, "render")
    os.makedirs(d)
    for name, args in RENDERS:
        run([xtwin, "render"] + args + ["--backend", backend, "--threads", "2", "--out", name], d)


def record_dataset(xtwin, backend, out):
    with open(os.path.join(out, "inputs", "dataset-spec.json"), "w") as f:
        json.dump(dataset_spec(backend), f, indent=1)
        f.write("\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JOB_COMPLETION", "XTWIN_SHARD"))}
    p = subprocess.run([xtwin, "dataset", "inputs/dataset-spec.json", "--out", "dataset", "--backend", backend]
                       + DATASET_ARGS, cwd=out, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    if p.returncode != 0:
        raise Failed("xtwin dataset exited %d:\n%s%s" % (p.returncode, p.stdout, p.stderr))


# ---- a small WebSocket client (RFC 6455), standard library only --------------------------------

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WS:
    def __init__(self, port, path="/v1/stream"):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        key = base64.b64encode(os.urandom(16))
        self.s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, port, key.decode())).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.s.recv(4096)
            if not chunk:
                raise Failed("stream: connection closed during the handshake")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        if not lines[0].startswith(b"HTTP/1.1 101"):
            raise Failed("stream: handshake refused: %r" % lines[0])
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
        fields = {l.split(b":", 1)[0].strip().lower(): l.split(b":", 1)[1].strip() for l in lines[1:] if b":" in l}
        if fields.get(b"sec-websocket-accept") != accept:
            raise Failed("stream: bad Sec-WebSocket-Accept")

    def _read(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.s], [], [], left)[0]:
                raise TimeoutError("stream: no message in %d s" % TIMEOUT)
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise Failed("stream: the server closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _send(self, opcode, payload):
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.s.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, obj):
        self._send(0x1, json.dumps(obj).encode())

    def recv(self, timeout=TIMEOUT):
        """The next message: (True, text) or (False, bytes)."""
        deadline = time.monotonic() + timeout
        parts, kind = [], None
        while True:
            b0, b1 = self._read(2, deadline)
            op, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2, deadline))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8, deadline))[0]
            mask = self._read(4, deadline) if b1 & 0x80 else None
            data = self._read(n, deadline)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if op == 0x9:
                self._send(0xA, data)
                continue
            if op == 0xA:
                continue
            if op == 0x8:
                raise Failed("stream: the server closed the stream: %r" % data)
            if op in (0x1, 0x2):
                kind, parts = op, [data]
            else:
                parts.append(data)
            if b0 & 0x80:
                msg = b"".join(parts)
                return (True, msg.decode()) if kind == 0x1 else (False, msg)

    def close(self):
        try:
            self._send(0x8, struct.pack(">H", 1000))
        except OSError:
            pass
        self.s.close()


def _die_with_parent():
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Client:
    """One stream client: its text messages and its frames, each in arrival order (the order of a
    text relative to a frame is not recorded: an ack and a frame are sent independently)."""

    def __init__(self, port, name, folder):
        self.ws, self.name, self.folder = WS(port), name, folder
        self.texts, self.nframes = [], 0

    def until(self, want_text=None, frames=0, hello=False):
        """Reads until a text with want_text's id (or the hello) arrived, and `frames` more frames."""
        got_text, target = want_text is None and not hello, self.nframes + frames
        while not got_text or self.nframes < target:
            is_text, msg = self.ws.recv()
            if is_text:
                self.texts.append(msg)
                j = json.loads(msg)
                if j.get("type") == "ack" and not j.get("ok"):
                    raise Failed("stream: %s: refused: %s" % (self.name, msg))
                if (want_text is not None and j.get("id") == want_text) or (hello and j.get("type") == "hello"):
                    got_text = True
            else:
                self.save(msg)

    def save(self, msg):
        with open(os.path.join(self.folder, "%s-%02d.bin" % (self.name, self.nframes)), "wb") as f:
            f.write(msg)
        self.nframes += 1

    def drain(self, seconds):
        """Anything still arriving (there should be nothing: one frame per trigger)."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            try:
                is_text, msg = self.ws.recv(timeout=left)
            except TimeoutError:
                return
            if is_text:
                self.texts.append(msg)
            else:
                self.save(msg)

    def write_texts(self):
        with open(os.path.join(self.folder, "%s-texts.jsonl" % self.name), "w") as f:
            for t in self.texts:
                f.write(t.rstrip("\n") + "\n")


def record_stream(server, backend, out):
    folder = os.path.join(out, "stream")
    os.makedirs(folder)
    tmp = tempfile.mkdtemp(prefix="xtwin-golden-server-")
    ports = os.path.join(tmp, "ports.json")
    log = open(os.path.join(tmp, "server.log"), "w+")
    proc = subprocess.Popen([server, "--backend", backend, "--rest-port", "0", "--ws-port", "0", "--ports-file", ports]
                            + SERVER_ARGS, cwd=tmp, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
    clients = []
    try:
        deadline, port = time.monotonic() + TIMEOUT, None
        while port is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise Failed("xtwin-server did not start")
            try:
                with open(ports) as f:
                    port = json.load(f)["ws"]
            except (OSError, ValueError, KeyError):  # not there yet, or being written
                time.sleep(0.02)
        raw = Client(port, "raw", folder)
        clients.append(raw)
        raw.until(hello=True)  # both clients connected before anything else happens
        proc_c = Client(port, "processed", folder)
        clients.append(proc_c)
        proc_c.until(hello=True)
        proc_c.ws.send({"type": "frames", "frames": "processed", "id": "frames"})
        proc_c.until("frames")
        seq = 0
        for i, step in enumerate(STREAM_STEPS):
            sid = "s%02d" % i
            if step[0] == "acq":
                raw.ws.send({"type": "acquisition", "id": sid, "acquisition": step[1]})
                raw.until(sid)
            elif step[0] == "pose":
                seq += 1
                raw.ws.send({"type": "pose", "id": sid, "seq": seq, "pose": step[1]})
                raw.until(sid)
            else:
                raw.ws.send({"type": "trigger", "id": sid})
                raw.until(sid, frames=1)
                proc_c.until(frames=1)
        for c in clients:
            c.drain(0.3)
            c.write_texts()
        for c in clients:
            c.ws.close()
        clients = []
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(TIMEOUT)
        if rc != 0:
            raise Failed("xtwin-server exited %d" % rc)
    except (Failed, OSError, TimeoutError, ValueError) as e:
        log.seek(0)
        raise Failed("stream: %s\nserver log:\n%s" % (e, log.read()[-4000:]))
    finally:
        for c in clients:
            c.ws.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


# ---- the whole set -------------------------------------------------------------------------------

PARTS = ("render", "dataset", "stream")


def index(backend):
    return {
        "format": "xtwin-golden", "version": 1, "backend": backend,
        "note": "what tests/golden/record.py asked for; tests/golden/README.md describes each golden",
        "inputs": {"blobs.gmm.json": GMM, "head-labels.nvdb": ["xtwin"] + NVDB},
        "render": [{"name": n, "argv": ["xtwin", "render"] + a + ["--backend", backend, "--threads", "2", "--out", n]}
                   for n, a in RENDERS],
        "dataset": {"spec": "inputs/dataset-spec.json", "argv": ["xtwin", "dataset", "inputs/dataset-spec.json",
                                                                  "--out", "dataset", "--backend", backend] + DATASET_ARGS},
        "stream": {"server_argv": ["xtwin-server", "--backend", backend] + SERVER_ARGS,
                   "clients": {"raw": "sends every command", "processed": "sent {\"type\": \"frames\", \"frames\": \"processed\"}"},
                   "steps": [list(s) for s in STREAM_STEPS]},
    }


def record(xtwin, server, backend, out, parts=PARTS):
    if os.path.exists(out) and os.listdir(out):
        raise Failed("%s exists and is not empty" % out)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index(backend), f, indent=1)
        f.write("\n")
    record_inputs(xtwin, out)
    if "render" in parts:
        record_render(xtwin, backend, out)
    if "dataset" in parts:
        record_dataset(xtwin, backend, out)
    if "stream" in parts:
        record_stream(server, backend, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--xtwin", required=True, help="the xtwin binary")
    ap.add_argument("--server", required=True, help="the xtwin-server binary")
    ap.add_argument("--backend", choices=("cpu", "cuda"), required=True)
    ap.add_argument("--out", required=True, help="folder to write (must not exist or be empty)")
    a = ap.parse_args()
    try:
        record(os.path.abspath(a.xtwin), os.path.abspath(a.server), a.backend, a.out)
    except (Failed, subprocess.TimeoutExpired) as e:
        print("record.py: %s" % e, file=sys.stderr)
        return 1
    print("recorded %s goldens into %s" % (a.backend, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
