#!/usr/bin/env python3
"""POST /v1/render runs on a worker of its own (issue 22, point 6), with its own projector: its
frames must still be the stream's frames. Starts xtwin-server in lockstep with float32 line
integrals, takes one stream frame per pose (a stdlib WebSocket client, tests/golden/record.py's)
and a REST render of the same pose and mode as .npy, and compares the pixels bit for bit, and the
reply's X-Xtwin-Geometry (pose, P, pitch, mode) with the stream header's, exactly.

    python3 tests/server/rest_matches_stream.py --server PATH [--backend cpu|cuda] [--mode M]

Standard library only, so that it also runs on the GPU machine (scripts/gpu-check), where the
REST worker's projector is a second one on device 0. Prints the REST render times (the first one
uploads the models to that projector on CUDA). Exit 0 identical, 1 a difference, 77 when the
backend is not usable here.
"""
import argparse
import http.client
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "golden"))
from record import WS  # noqa: E402

HEADER_SIZE_OFFSET = 6  # api/xt_stream.h: uint16 header_size after magic and version
POSES = [{"primary_deg": 0, "secondary_deg": 0}, {"primary_deg": 30, "secondary_deg": 15},
         {"primary_deg": -90, "secondary_deg": 0}]


def rest(port, method, path, body=None, accept=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if accept:
        headers["Accept"] = accept
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    r = c.getresponse()
    data = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, data


def npy_payload(data):
    if data[:6] != b"\x93NUMPY":
        raise ValueError("not an .npy")
    hl = struct.unpack("<H", data[8:10])[0]
    return data[10 + hl:]


def until_text(ws, want_id):
    while True:
        is_text, msg = ws.recv()
        if is_text and json.loads(msg).get("id") == want_id:
            return json.loads(msg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--mode", default="fd20-128")
    a = ap.parse_args()
    a.server = os.path.abspath(a.server)
    tmp = tempfile.mkdtemp(prefix="xtwin-rest-stream-")
    ports = os.path.join(tmp, "ports.json")
    log = open(os.path.join(tmp, "server.log"), "w+")
    args = [a.server, "--backend", a.backend, "--devices", "1", "--rest-port", "0", "--ws-port", "0",
            "--ports-file", ports, "--mode", a.mode, "--run-mode", "lockstep", "--pixel-format", "float32"]
    if a.backend == "cpu":
        args += ["--phantom-dim", "64", "--phantom-spacing", "3"]
    proc = subprocess.Popen(args, cwd=tmp, stdout=log, stderr=subprocess.STDOUT)
    ws = None
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                log.seek(0)
                text = log.read()
                if "--backend cuda" in text or "no usable" in text.lower():
                    print("SKIP rest_matches_stream: %s" % text.strip().splitlines()[-1])
                    return 77
                print("FAIL: xtwin-server exited at start:\n" + text[-2000:])
                return 1
            try:
                with open(ports) as f:
                    p = json.load(f)
                break
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    print("FAIL: xtwin-server did not start")
                    return 1
                time.sleep(0.05)
        ws = WS(p["ws"])
        times, bad = [], []
        for i, pose in enumerate(POSES):
            ws.send({"type": "pose", "id": "p%d" % i, "pose": pose})
            until_text(ws, "p%d" % i)
            ws.send({"type": "trigger", "id": "t%d" % i})
            frame = None
            while frame is None:
                is_text, msg = ws.recv()
                if not is_text:
                    frame = msg
            hs = struct.unpack("<H", frame[HEADER_SIZE_OFFSET:HEADER_SIZE_OFFSET + 2])[0]
            st, hdrs, body = rest(p["rest"], "POST", "/v1/render", {"pose": pose}, accept="application/x-npy")
            if st != 200:
                print("FAIL: POST /v1/render %r: %d %s" % (pose, st, body[:300]))
                return 1
            times.append(float(hdrs.get("x-xtwin-render-ms", "nan")))
            if npy_payload(body) != frame[hs:]:
                bad.append(pose)
            # the reply's geometry and the stream header state the frame from the same record fields
            geo = json.loads(hdrs.get("x-xtwin-geometry", "{}"))
            h_pose = struct.unpack_from("<8d", frame, 96)
            h_P = struct.unpack_from("<12d", frame, 160)
            h_pitch = struct.unpack_from("<2d", frame, 256)
            h_mode = frame[272:296].split(b"\0")[0].decode()
            g_pose = geo.get("pose", {})
            g_pose = [g_pose.get(k) for k in ("primary_deg", "secondary_deg", "detector_rot_deg", "sod_mm", "sid_mm")] + \
                list(g_pose.get("table_mm", []))
            g_P = [v for row in geo.get("P", []) for v in row]
            if (list(h_pose) != g_pose or list(h_P) != g_P or list(h_pitch) != geo.get("pitch_mm")
                    or h_mode != geo.get("mode")):
                print("FAIL: X-Xtwin-Geometry %r disagrees with the stream header (pose %r, P %r, pitch %r, mode %r)"
                      % (geo, h_pose, h_P, h_pitch, h_mode))
                return 1
        print("REST render ms (first uploads the models on CUDA): %s" % ", ".join("%.3f" % t for t in times))
        if bad:
            print("FAIL: REST render differs from the stream's frame at %r" % bad)
            return 1
        print("rest_matches_stream: %d poses, REST renders bit-identical to the stream's (%s, %s)"
              % (len(POSES), a.backend, a.mode))
        print("1 passed, 0 failed")
        return 0
    finally:
        if ws:
            ws.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
