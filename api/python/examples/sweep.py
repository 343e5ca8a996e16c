#!/usr/bin/python3
"""Sweeps the C-arm through primary angles over the stream and prints, for each step, the frame
that first shows it and the pose-to-frame latency measured here (send -> frame received).

    /usr/bin/python3 api/python/examples/sweep.py --url http://127.0.0.1:8710 --from -60 --to 60 --step 10
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import xtwin  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8710", help="REST base (the stream port comes from /v1/info)")
    p.add_argument("--stream-url", help="ws(s):// URL of the stream when not on the REST host (proxy, container)")
    p.add_argument("--token")
    p.add_argument("--insecure", action="store_true", help="https/wss: accept a self-signed certificate")
    p.add_argument("--from", dest="start", type=float, default=-60.0)
    p.add_argument("--to", dest="stop", type=float, default=60.0)
    p.add_argument("--step", type=float, default=10.0)
    a = p.parse_args()
    c = xtwin.Client(a.url, token=a.token, verify=not a.insecure, stream_url=a.stream_url)
    acq = c.acquisition()
    if not acq["running"] or acq["run_mode"] != "free":
        print("note: acquisition is %s/%s; starting a free run" % (acq["run_mode"], "running" if acq["running"] else "stopped"))
        c.acquisition(run_mode="free")
        c.start()
    lat = []
    with c.stream() as s:
        ang = a.start
        while ang <= a.stop + 1e-9:
            t0 = time.monotonic_ns()
            seq = s.set_pose(primary_deg=ang)
            f = s.wait_for_pose(seq, timeout=10)
            ms = (time.monotonic_ns() - t0) / 1e6
            lat.append(ms)
            print("primary %+6.1f  seq %4d  frame %6d  pose->frame %6.1f ms  mean %.1f  dropped %d" % (
                f.pose["primary_deg"], f.pose_seq, f.counter, ms, float(f.image.mean()), f.frames_dropped))
            ang += a.step
    lat.sort()
    print("pose->frame over %d steps: median %.1f ms, max %.1f ms" % (len(lat), lat[len(lat) // 2], lat[-1]))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (xtwin.XtwinError, TimeoutError) as e:
        print("sweep: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(1)
