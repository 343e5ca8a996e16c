#!/usr/bin/env python3
"""Chain frames do not depend on the number of render workers: the imaging chain's states (lag,
the recursive temporal filter, the DSA mask) and the plane's dose-rate loop carry from frame to
frame, so every chain frame renders on one worker, in order; and every lockstep trigger is answered,
in order, whatever the number of workers (lockstep frames render on one worker too; free-run mono
frames go round robin).

    python3 tests/server/test_multi_device.py --server PATH

Starts xtwin-server on the CPU backend (where --devices N > 1 makes N CPU render workers sharing
the cores: the multi-device path without a GPU) in lockstep with the chain on (lag, temporal
filter, dose-rate control, fixed seeds), once each with --devices 1, 2 and 3. In each run a raw
and a processed client record: chain frames one trigger at a time, then a burst of chain triggers
queued before their frames come, then with the chain off mono frames one trigger at a time and a
burst of mono triggers (on two workers they would finish out of order, and the stream drops a frame
older than one it sent), and a volley of mono triggers sent back to back. Every frame message (header and pixels; the header's
wall-clock times masked) must be byte-identical to --devices 1's, and come in counter order with
no frame dropped. No timing assertions: lockstep triggers and the server's own frame counters.
Standard library only (record.py's WebSocket client). Exit 0 passed, 1 failed.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "golden"))
from record import WS  # noqa: E402

SERVER_ARGS = ["--threads", "2", "--phantom-dim", "64", "--phantom-spacing", "3", "--mode", "fd20-128",
               "--run-mode", "lockstep", "--chain"]
# lag and the recursive filter on (their defaults, stated), dose-rate control on, fixed seeds
CHAIN = {"seed": 2323, "panel_seed": 20, "lag": 1, "temporal_alpha": 0.5, "drc": 1}
CHAIN_POSES = [{"primary_deg": a, "secondary_deg": b} for a, b in ((0, 0), (30, 15), (-90, 0), (-30, -20), (60, 10),
                                                                  (0, 25))]
VOLLEY = 24  # triggers back to back, the last part
BURST_POSES = [{"primary_deg": a, "secondary_deg": 5} for a in (-60, 0, 60)]
MONO_POSES = [{"primary_deg": a, "secondary_deg": 0} for a in (10, 45, -45, 90)]
DEVICES = (1, 2, 3)
TIMEOUT = 120  # seconds for any one message (ASan builds on a busy machine)

# api/xt_stream.h
HEADER_SIZE, OFF_COUNTER, OFF_DROPPED, OFF_KIND = 864, 8, 64, 304
MASK = (24, 64)  # t_pose_ns, t_exposure_sched_ns, t_exposure_ns, t_render_done_ns, t_sent_ns
KIND_MONO, KIND_RAW, KIND_PROCESSED = 0, 1, 2


class Failed(Exception):
    pass


def u64(msg, off):
    return struct.unpack_from("<Q", msg, off)[0]


def kind(msg):
    return struct.unpack_from("<I", msg, OFF_KIND)[0]


def masked(msg):
    m = msg[:MASK[0]] + bytes(MASK[1] - MASK[0]) + msg[MASK[1]:]
    # t_cycle_ns (768, version 5): the pulse cycle's start, a time like the others
    return m[:768] + bytes(8) + m[776:]


class Client:
    def __init__(self, port, name):
        self.ws, self.name, self.frames = WS(port), name, []

    def until(self, want_id=None, frames=0, hello=False):
        """Reads until the text with want_id (or the hello) came and `frames` more frames."""
        got, target, reply = want_id is None and not hello, len(self.frames) + frames, None
        while not got or len(self.frames) < target:
            is_text, msg = self.ws.recv(TIMEOUT)
            if not is_text:
                self.frames.append(msg)
                continue
            j = json.loads(msg)
            if j.get("type") == "ack" and not j.get("ok"):
                raise Failed("%s: refused: %s" % (self.name, msg))
            if (want_id is not None and j.get("id") == want_id) or (hello and j.get("type") == "hello"):
                got, reply = True, j
        return reply

    def take(self, n):
        """The first n frames received (reading more if needed), removed."""
        self.until(frames=max(0, n - len(self.frames)))
        out, self.frames = self.frames[:n], self.frames[n:]
        return out


def launch(server, tmp, name, args, exited_ok=False):
    """xtwin-server on free ports (args after the port flags), its output in tmp/server-NAME.log:
    (proc, {"rest", "ws"}, the open log). A server that exits at start fails, unless exited_ok:
    then (proc, None, its output)."""
    ports = os.path.join(tmp, "ports-%s.json" % name)
    if os.path.exists(ports):
        os.remove(ports)  # an earlier run's, under the same name
    log = open(os.path.join(tmp, "server-%s.log" % name), "w+")
    proc = subprocess.Popen([server, "--rest-port", "0", "--ws-port", "0", "--ports-file", ports] + list(args),
                            cwd=tmp, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + TIMEOUT
    while True:
        if proc.poll() is not None:
            log.seek(0)
            if exited_ok:
                return proc, None, log.read()
            raise Failed("xtwin-server exited %d at start: %s" % (proc.returncode, log.read()[-2000:]))
        try:
            with open(ports) as f:
                return proc, json.load(f), log
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                proc.kill()
                raise Failed("xtwin-server did not start")
            time.sleep(0.02)


def info(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    c.request("GET", "/v1/info")
    r = c.getresponse()
    body = r.read()
    c.close()
    if r.status != 200:
        raise Failed("GET /v1/info: %d" % r.status)
    return json.loads(body)


def first_diff(a, b):
    if len(a) != len(b):
        return "length %d vs %d" % (len(a), len(b))
    i = next(i for i in range(len(a)) if a[i] != b[i])
    if i >= HEADER_SIZE:
        return "first differing byte %d (pixels)" % i
    return "first differing byte %d (header); pixels %s" % (i, "identical" if a[HEADER_SIZE:] == b[HEADER_SIZE:]
                                                              else "differ too")


def check(part, frames, want, kinds, ref):
    """Counters in order, nothing dropped, the frame kind; byte-identical to ref's (if given)."""
    got = [u64(m, OFF_COUNTER) for m in frames]
    if got != want:
        raise Failed("%s: frame counters %s in arrival order, want %s" % (part, got, want))
    if any(u64(m, OFF_DROPPED) for m in frames):
        raise Failed("%s: frames_dropped %s" % (part, [u64(m, OFF_DROPPED) for m in frames]))
    if any(kind(m) != kinds for m in frames):
        raise Failed("%s: frame_kind %s, want %d" % (part, [kind(m) for m in frames], kinds))
    out = [masked(m) for m in frames]
    for i, (x, y) in enumerate(zip(ref or [], out)):
        if x != y:
            raise Failed("%s: frame %d (counter %d) differs from --devices 1's: %s"
                         % (part, i, got[i], first_diff(x, y)))
    return out


def session(server, devices, tmp, ref, backend="cpu"):
    """One server run; its frames (masked) by part, each checked against ref's (None: the reference)."""
    proc, p, log = launch(server, tmp, str(devices), ["--devices", str(devices), "--backend", backend] + SERVER_ARGS)
    clients, out, ref = [], {}, ref or {}
    try:
        workers = info(p["rest"]).get("render_workers")
        if workers != devices:
            raise Failed("GET /v1/info: render_workers %r, want %d" % (workers, devices))
        raw = Client(p["ws"], "raw")
        clients.append(raw)
        raw.until(hello=True)
        pc = Client(p["ws"], "processed")
        clients.append(pc)
        pc.until(hello=True)
        pc.ws.send({"type": "frames", "frames": "processed", "id": "f"})
        pc.until("f")
        n = [0]

        def cmd(obj):
            n[0] += 1
            obj = dict(obj, id="c%d" % n[0])
            raw.ws.send(obj)
            return raw.until(obj["id"])

        def triggers(poses, wait_each):
            """A pose and a trigger for each; waits for each frame before the next trigger (or not:
            a burst, every trigger queued before the frames come). The triggers' frame counters."""
            want = []
            for pose in poses:
                cmd({"type": "pose", "pose": pose})
                want.append(cmd({"type": "trigger"})["frame"])
                if wait_each:
                    raw.until(frames=len(want) - len(raw.frames))
                    pc.until(frames=len(want) - len(pc.frames))
            return want

        def volley(count):
            """count triggers sent back to back, no reply awaited in between: on several workers
            their frames would finish out of order. The triggers' frame counters."""
            ids = []
            for _ in range(count):
                n[0] += 1
                ids.append("c%d" % n[0])
                raw.ws.send({"type": "trigger", "id": ids[-1]})
            return [raw.until(i)["frame"] for i in ids]

        def part(name, poses, wait_each, chain):
            want = volley(poses) if isinstance(poses, int) else triggers(poses, wait_each)
            for c, k in ((raw, KIND_RAW if chain else KIND_MONO), (pc, KIND_PROCESSED if chain else KIND_MONO)):
                key = "%s %s" % (name, c.name)
                out[key] = check("--devices %d: %s frames" % (devices, key), c.take(len(want)), want, k, ref.get(key))

        cmd({"type": "acquisition", "acquisition": {"chain": CHAIN}})
        part("chain", CHAIN_POSES, True, True)
        part("chain burst", BURST_POSES, False, True)
        cmd({"type": "acquisition", "acquisition": {"chain": {"enabled": False}}})
        part("mono", MONO_POSES, True, False)
        part("mono burst", BURST_POSES + MONO_POSES, False, False)
        part("mono volley", VOLLEY, False, False)
        for c in clients:
            c.ws.close()
        clients = []
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(TIMEOUT)
        if rc != 0:
            raise Failed("xtwin-server exited %d" % rc)
        return out
    except (Failed, OSError, TimeoutError, ValueError, KeyError) as e:
        log.seek(0)
        raise Failed("--devices %d: %s: %s\nserver log:\n%s" % (devices, type(e).__name__, e, log.read()[-3000:]))
    finally:
        for c in clients:
            c.ws.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--backend", default="cpu", help="cuda: one worker per GPU (--devices up to --gpus)")
    ap.add_argument("--gpus", type=int, default=0, help="with --backend cuda: the GPUs there are (1: skipped)")
    a = ap.parse_args()
    devices = DEVICES
    if a.backend == "cuda":
        if a.gpus < 2:
            print("SKIP test_multi_device: --backend cuda needs --gpus 2 or more")
            return 77
        devices = tuple(range(1, min(a.gpus, 3) + 1))
    server = os.path.abspath(a.server)
    tmp = tempfile.mkdtemp(prefix="xtwin-multi-device-")
    t0 = time.monotonic()
    ref = None
    try:
        for d in devices:
            out = session(server, d, tmp, ref, a.backend)
            ref = ref or out
    except Failed as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_multi_device: --devices %s: %d chain frames one at a time and %d in a burst (raw and processed), %d "
          "mono frames one at a time, %d in a burst and %d in a volley: byte-identical, in order, none lost (%.1f s)"
          % (",".join(map(str, devices)), len(CHAIN_POSES), len(BURST_POSES), len(MONO_POSES),
             len(BURST_POSES) + len(MONO_POSES), VOLLEY, time.monotonic() - t0))
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
