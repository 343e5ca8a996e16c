#!/usr/bin/env python3
"""The device's configured latencies as the server reproduces them (issue 24, target: within
+-0.5 ms, the server's own timestamps). N pedal presses at fd20-256 (15 fps, the mode's readout
time): for each, the first frame's actual exposure time (t_exposure_ns, when the pose was latched)
minus the press (t_press_ns) minus the configured prepare (and first-frame) time: how late the pacer made the first exposure
after the device's deadline.

    python3 bench/server/latency_bench.py --server PATH [--backend cpu|cuda] [--presses 20]

Prints the error distribution (min, median, p99, max in ms) and a JSON line. Benchmark only: no
pass/fail beyond the process running.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "server"))
import test_device as td  # noqa: E402


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--presses", type=int, default=20)
    a = ap.parse_args()
    td.SERVER_ARGS = ["--backend", a.backend, "--threads", "2", "--phantom-dim", "128", "--phantom-spacing", "2",
                      "--mode", "fd20-256", "--fps", "15", "--no-autostart"]
    tmp = tempfile.mkdtemp(prefix="xt-latency-")
    srv = td.Server(os.path.abspath(a.server), tmp)
    err_first = []
    try:
        st = td.Stream(srv.ws)
        st.until(lambda: st.hello, "the hello")
        lat = srv.ok("GET", "/v1/device")["latency"]["fluoro"]
        prep = lat["prepare_ms"] + lat["first_frame_ms"]
        for _ in range(a.presses):
            st.take()
            d = srv.ok("POST", "/v1/device/fluoro")
            tp = d["t_press_ns"]
            mine = lambda: [f for f in st.frames if td.u64(f, td.OFF_EXPOSURE) >= tp]  # not the last press's
            st.until(lambda: len(mine()) >= 2, "two frames")
            srv.ok("POST", "/v1/device/release")
            st.event("lih")
            first = min(td.u64(f, td.OFF_EXPOSURE) for f in mine())
            st.take()
            err_first.append((first - tp) / 1e6 - prep)
            time.sleep(0.05)
        st.ws.s.close()
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    r = {"presses": len(err_first), "prepare_ms": prep, "first_exposure_error_ms": {
        "min": min(err_first), "p50": pct(err_first, 0.5), "p99": pct(err_first, 0.99), "max": max(err_first)}}
    print("press -> first exposure: configured %.1f ms; error min %.3f, p50 %.3f, p99 %.3f, max %.3f ms over %d presses"
          % (prep, r["first_exposure_error_ms"]["min"], r["first_exposure_error_ms"]["p50"],
             r["first_exposure_error_ms"]["p99"], r["first_exposure_error_ms"]["max"], len(err_first)))
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
