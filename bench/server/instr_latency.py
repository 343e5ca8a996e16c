#!/usr/bin/env python3
"""Shape update -> the first frame showing it (issue 26's target: at most one frame period + 5 ms).

    python3 bench/server/instr_latency.py --server PATH [--backend cuda] [--mode fd20-1024] [--fps 30]
                                          [--updates 120] [--chain] [--out FILE.json]

Starts xtwin-server on the default scene (the thorax and its guidewire), one stream client, and
gives the guidewire a new shape (PUT /v1/instruments/guidewire/shape, alternately 20 mm left and
right of the midline) at random moments, 40 to 160 ms apart. The first frame to show an update is
the first whose t_exposure_ns is later than the update's t_ns (the server's clock; that every such
frame shows it is test_server_instruments' claim). Per update: t_render_done - t_ns (the frame is
ready) and t_sent - t_ns (handed to the client's socket), as percentiles, against the period + 5 ms.
"""
import argparse
import http.client
import json
import math
import os
import random
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "golden"))
from record import WS  # noqa: E402


def put(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("PUT", "/v1/instruments/guidewire/shape", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    j = json.loads(r.read())
    c.close()
    if r.status != 200:
        raise RuntimeError("PUT shape: %d %r" % (r.status, j))
    return j


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))] if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--mode", default="fd20-1024")
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--updates", type=int, default=120)
    ap.add_argument("--chain", action="store_true", help="the imaging chain on (raw frames)")
    ap.add_argument("--out")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="xtwin-instr-lat-")
    ports = os.path.join(tmp, "ports.json")
    args = [a.server, "--rest-port", "0", "--ws-port", "0", "--ports-file", ports, "--backend", a.backend, "--mode",
            a.mode, "--fps", str(a.fps), "--no-autostart", "--max-body", "1048576"] + (["--chain"] if a.chain else [])
    log = open(os.path.join(tmp, "server.log"), "w+")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        t0 = time.monotonic()
        while not os.path.exists(ports):
            if proc.poll() is not None or time.monotonic() - t0 > 120:
                log.seek(0)
                raise RuntimeError("server did not start:\n" + log.read()[-2000:])
            time.sleep(0.1)
        time.sleep(0.1)
        p = json.load(open(ports))
        ws = WS(p["ws"])
        ws.send({"type": "start", "id": "s"})
        frames, updates = [], []

        def pump(timeout):
            end = time.monotonic() + timeout
            while True:
                left = end - time.monotonic()
                if not ws.buf and (left <= 0 or not select.select([ws.s], [], [], left)[0]):
                    return
                is_text, m = ws.recv(30)
                if not is_text:
                    # t_exposure, t_render_done, t_sent (api/xt_stream.h offsets 40, 48, 56); kind at 304
                    frames.append(struct.unpack_from("<QQQ", m, 40) + struct.unpack_from("<I", m, 304))

        pump(1.0)
        rnd = random.Random(26)
        for k in range(a.updates):
            x = 20.0 if k % 2 else -20.0
            pts = [[x + 3.0 * math.sin(0.1 * i), 0.0, 80.0 - 1.0 * i] for i in range(161)]
            j = put(p["rest"], {"points": pts})
            updates.append(j["t_ns"])
            pump(rnd.uniform(0.04, 0.16))
        pump(1.0)
        ws.close()
        kind0 = frames[0][3] if frames else 0
        fr = sorted(f for f in frames if f[3] == kind0)
        ready, sent = [], []
        for t in updates:
            first = next((f for f in fr if f[0] > t), None)
            if first:
                ready.append((first[1] - t) * 1e-6)
                sent.append((first[2] - t) * 1e-6)
        period = 1e3 / a.fps
        res = {"mode": a.mode, "backend": a.backend, "fps": a.fps, "chain": a.chain, "updates": len(updates),
               "judged": len(ready), "frames": len(fr), "target_ms": period + 5.0,
               "render_done_ms": {"p50": pct(ready, 0.5), "p95": pct(ready, 0.95), "p99": pct(ready, 0.99),
                                  "max": max(ready) if ready else None},
               "sent_ms": {"p50": pct(sent, 0.5), "p95": pct(sent, 0.95), "p99": pct(sent, 0.99),
                           "max": max(sent) if sent else None}}
        res["ok"] = bool(ready) and res["sent_ms"]["max"] <= res["target_ms"]
        print(json.dumps(res, indent=1))
        if a.out:
            json.dump(res, open(a.out, "w"), indent=1)
        return 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
