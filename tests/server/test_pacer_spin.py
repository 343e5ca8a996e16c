#!/usr/bin/python3
"""--pacer-spin-us (docs/server.md): the pacer polls the clock for the last N us before each
exposure, with the state's lock let go, instead of sleeping to the deadline.

  - a value over its limit (5000) is refused at start, the message naming the option;
  - a free run at 20 fps with --pacer-spin-us 3000 exposes (the server's own /metrics count the
    exposures and their jitter), and while it polls the REST API is served: the acquisition's rate
    changed to 10 fps takes (GET /v1/acquisition says so) and the exposures go on;
  - SIGTERM while it polls: the server exits 0 in time.
No timing is asserted (a loaded machine wakes threads late); that the polling makes exposures
punctual is measured by scripts/gpu-check's biplane runs (docs/BENCHMARKS.md).
Exit 0 pass, 1 fail."""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "api", "python"))
from xtwin.testing import Server  # noqa: E402

SCENE = ("--backend", "cpu", "--threads", "2", "--synthetic", "--phantom-dim", "32", "--mode", "fd20-128")


def exposures(srv):
    m = re.search(r"^xtwin_exposure_jitter_seconds_count (\S+)", srv.client.metrics(), re.M)
    return int(float(m.group(1))) if m else -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    a = ap.parse_args()
    a.server = os.path.abspath(a.server)
    fails = []

    def check(ok, what):
        print("%s %s" % ("ok  " if ok else "FAIL", what))
        if not ok:
            fails.append(what)

    r = subprocess.run([a.server, "--pacer-spin-us", "6000", "--rest-port", "0", "--ws-port", "0"] + list(SCENE),
                       capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "pacer_spin_us" in (r.stdout + r.stderr).replace("-", "_"),
          "--pacer-spin-us 6000 refused at start, naming the option (exit %d: %s)" % (
              r.returncode, (r.stdout + r.stderr).strip()[-200:]))

    srv = Server(a.server, "--fps", "20", "--pacer-spin-us", "3000", scene=SCENE)
    try:
        deadline = time.monotonic() + 30
        while exposures(srv) < 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        n0 = exposures(srv)
        check(n0 >= 20, "exposures while the pacer polls: %d counted" % n0)
        code, _, body = srv.client.request("PUT", "/v1/acquisition", {"fps": 10})
        check(code == 200, "PUT /v1/acquisition fps 10 while it polls: %d %s" % (code, body[:200]))
        code, _, body = srv.client.request("GET", "/v1/acquisition")
        check(code == 200 and json.loads(body).get("fps") == 10, "GET /v1/acquisition after: %d %s" % (code, body[:200]))
        deadline = time.monotonic() + 30
        while exposures(srv) < n0 + 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        check(exposures(srv) >= n0 + 5, "exposures after the change: %d, from %d" % (exposures(srv), n0))
    finally:
        rc = srv.stop(timeout=20)
    check(rc == 0, "SIGTERM while the pacer polls: exit %s" % rc)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
