#!/usr/bin/env python3
"""Instrument shapes over the API (issue 26): a shape given before an exposure shows in that exposure.

    python3 tests/server/test_instruments.py --server PATH

A CPU server at fd20-128, 30 fps, float32 line integrals, no phantom, two instruments loaded at start
from .instr.json files: "cath", a 6 mm tube lying across the field at z = 0, and "wire2", a
guidewire standing along z at x = +40 mm that is never moved (several instruments at once). While the
stream runs, "cath" is moved about every 17 ms (60 Hz) between z = +40 mm and z = -40 mm, half the
updates by PUT /v1/instruments/cath.instr.json/shape and half by the stream's "shape" message, each answered
with its version and the server's time of publication. Every frame is then judged from server
timestamps alone: it must show the shape of the last update published before its t_exposure_ns
(the initial one when none was), told from its pixels (the row where the left half's line
integrals peak), and "wire2" must be in it. Bad updates get one-line 4xx errors. Exit 0 passed,
1 failed.
"""
import argparse
import http.client
import json
import os
import random
import select
import shutil
import signal
import struct
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_multi_device import Failed, launch, u64, TIMEOUT  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "golden"))
from record import WS  # noqa: E402

HEADER = 864
OFF_T_EXPOSURE = 40
N = 128
Z = {"A": 40.0, "B": -40.0, "C": 0.0}


def line_at(z, n=41):
    return [[-60.0 + 120.0 * i / (n - 1), 0.0, z] for i in range(n)]


def rest(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    c.request(method, path, json.dumps(body) if body is not None else None,
              {"Content-Type": "application/json"} if body is not None else {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


def shown(frame):
    """Which of A (top), C (middle), B (bottom) the frame shows: the row where the left half peaks."""
    px = struct.unpack_from("<%df" % (N * N), frame, HEADER)
    rows = [sum(abs(px[r * N + c]) for c in range(N // 2 - 8)) for r in range(N)]
    r = max(range(N), key=lambda k: rows[k])
    if rows[r] <= 0:
        return None
    # rows grow towards the feet (docs/geometry.md): +z is up in the image
    return "A" if r < 0.4 * N else ("B" if r > 0.6 * N else "C")


def wire2_seen(frame):
    px = struct.unpack_from("<%df" % (N * N), frame, HEADER)
    return sum(abs(px[r * N + c]) for r in range(N // 4, 3 * N // 4) for c in range(N // 2 + 8, N)) > 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="xtwin-instr-")
    ok = False
    proc = out = ws = None
    try:
        with open(os.path.join(tmp, "cath.instr.json"), "w") as f:
            json.dump({"medium": "air", "max_points": 256,
                       "sections": [{"r_out_mm": 3.0, "wall": "catheter_polymer_w"}], "points": line_at(0.0)}, f)
        with open(os.path.join(tmp, "wire2.instr.json"), "w") as f:
            json.dump({"device": "guidewire", "medium": "air", "max_points": 64,
                       "points": [[40.0, 0.0, 50.0 - 2.0 * i] for i in range(51)]}, f)
        proc, p, out = launch(a.server, tmp, "instr", [
            "--backend", "cpu", "--threads", "2", "--phantom", "none", "--mode", "fd20-128", "--fps", "30",
            "--pixel-format", "float32", "--no-autostart", "--model-root", tmp,
            "--model", os.path.join(tmp, "cath.instr.json"), "--model", os.path.join(tmp, "wire2.instr.json")])
        st, j = rest(p["rest"], "GET", "/v1/instruments")
        names = sorted(i["name"] for i in j["instruments"])
        if st != 200 or names != ["cath.instr.json", "wire2.instr.json"]:
            raise Failed("GET /v1/instruments: %d %r" % (st, j))
        # bad updates: one line, 4xx, nothing published
        for path, body, want in (("/v1/instruments/nope/shape", {"points": line_at(0)}, 404),
                                 ("/v1/instruments/cath.instr.json/shape", {"points": [[0, 0, 0], [1, 0]]}, 400),
                                 ("/v1/instruments/cath.instr.json/shape", {"points": line_at(0, 300)}, 413),
                                 ("/v1/instruments/cath.instr.json/shape", {"points": [[0, 0, 0], [5, 0, 0], [5, 5, 0]]}, 400),
                                 ("/v1/instruments/cath.instr.json/shape", {"pts": []}, 400)):
            st, j = rest(p["rest"], "PUT", path, body)
            msg = (j or {}).get("error", {}).get("message", "")
            if st != want or not msg or "\n" in msg:
                raise Failed("PUT %s %r: %d %r (want %d, one line)" % (path, body, st, j, want))
        ws = WS(p["ws"])
        frames, updates, pending = [], [], {}

        def pump(timeout):
            """Reads what the stream has within timeout: frames kept, shape acks recorded."""
            end = time.monotonic() + timeout
            while True:
                left = end - time.monotonic()
                if not ws.buf and (left <= 0 or not select.select([ws.s], [], [], left)[0]):
                    return
                is_text, m = ws.recv(TIMEOUT)
                if not is_text:
                    frames.append(m)
                    continue
                j = json.loads(m)
                if j.get("type") == "ack" and j.get("id") in pending:
                    if not j.get("ok"):
                        raise Failed("shape refused on the stream: %s" % m)
                    updates.append((j["t_ns"], j["version"], pending.pop(j["id"])))

        ws.send({"type": "start", "id": "start"})
        pump(0.3)
        k, t_next = 0, time.monotonic()
        t_stop = t_next + 30.0  # a slow (sanitised, loaded) server gets longer to show enough frames
        # A or B drawn per update: alternating at 60 Hz against 30 fps can phase-lock (every frame's
        # last update the same parity: 1 A, 224 B seen on a loaded machine)
        rng = random.Random(26)
        while time.monotonic() < t_stop:
            t_end = t_next + 2.0
            while time.monotonic() < t_end:
                which = "A" if rng.random() < 0.5 else "B"
                if k % 4 < 2:  # REST for two, then the stream for two: each way gives both shapes
                    st, j = rest(p["rest"], "PUT", "/v1/instruments/cath.instr.json/shape", {"points": line_at(Z[which])})
                    if st != 200:
                        raise Failed("PUT shape: %d %r" % (st, j))
                    updates.append((j["t_ns"], j["version"], which))
                else:
                    pending["s%d" % k] = which
                    ws.send({"type": "shape", "name": "cath.instr.json", "points": line_at(Z[which]), "id": "s%d" % k})
                k += 1
                t_next += 1.0 / 60.0
                pump(max(0.0, t_next - time.monotonic()))
            shows = [shown(fr) for fr in frames]
            if shows.count("A") >= 3 and shows.count("B") >= 3:
                break
        pump(0.5)
        ws.send({"type": "stop", "id": "stop"})
        pump(0.5)
        if pending:
            raise Failed("shape messages without an ack: %r" % sorted(pending))
        updates.sort()
        versions = [v for _, v, _ in updates]
        if versions != sorted(versions) or len(set(versions)) != len(versions):
            raise Failed("versions not in the order of their times: %r" % versions)
        seen = {"A": 0, "B": 0, "C": 0}
        for fr in frames:
            t = u64(fr, OFF_T_EXPOSURE)
            before = [w for tn, _, w in updates if tn < t]
            want = before[-1] if before else "C"
            got = shown(fr)
            if got != want:
                raise Failed("frame %d (t_exposure %d) shows %s, the last shape given before it is %s (%d updates "
                             "before it)" % (u64(fr, 8), t, got, want, len(before)))
            if not wire2_seen(fr):
                raise Failed("frame %d: wire2 missing" % u64(fr, 8))
            seen[got] += 1
        if seen["A"] < 3 or seen["B"] < 3:
            raise Failed("too few frames to judge: %r of %d frames, %d updates" % (seen, len(frames), len(updates)))
        print("ok: %d frames (%r), %d shape updates (REST and stream)" % (len(frames), seen, len(updates)))
        ws.close()
        ws = None
        proc.send_signal(signal.SIGTERM)
        if proc.wait(TIMEOUT) != 0:
            raise Failed("xtwin-server exited %d" % proc.returncode)
        ok = True
    except (Failed, OSError, TimeoutError, ValueError, KeyError) as e:
        log = ""
        if out:
            out.seek(0)
            log = out.read()[-3000:]
        print("FAIL: %s: %s\nserver log:\n%s" % (type(e).__name__, e, log))
    finally:
        if ws:
            ws.close()
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        if out:
            out.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
