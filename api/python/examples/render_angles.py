#!/usr/bin/python3
"""Renders the current scene at a few C-arm angles through REST and saves each as .npy with its
3x4 projection matrix (the geometry an AI pipeline needs beside the pixels).

    /usr/bin/python3 api/python/examples/render_angles.py --url http://127.0.0.1:8710 \\
        --angles -90,-45,0,45,90 --mode fd20-256 --out out/angles
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import xtwin  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8710")
    p.add_argument("--token")
    p.add_argument("--insecure", action="store_true", help="https: accept a self-signed certificate")
    p.add_argument("--angles", default="-90,-45,0,45,90", help="primary angles, degrees (LAO +)")
    p.add_argument("--secondary", type=float, default=0.0, help="secondary angle, degrees (CRAN +)")
    p.add_argument("--mode", help="detector mode (default: the server's current one)")
    p.add_argument("--pixel-format", choices=("uint16", "float32"))
    p.add_argument("--out", default="out/angles", help="file prefix")
    a = p.parse_args()
    c = xtwin.Client(a.url, token=a.token, verify=not a.insecure)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    for ang in (float(x) for x in a.angles.split(",")):
        r = c.render(primary_deg=ang, secondary_deg=a.secondary, mode=a.mode, pixel_format=a.pixel_format)
        name = "%s_%+06.1f" % (a.out, ang)
        np.save(name + ".npy", r.image)
        np.save(name + "_P.npy", r.P)
        print("primary %+6.1f: %s %s min %g max %g mean %.1f, render %.1f ms -> %s.npy" % (
            ang, r.image.shape, r.image.dtype, r.image.min(), r.image.max(), r.image.mean(), r.render_ms or 0, name))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except xtwin.XtwinError as e:
        print("render_angles: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(1)
