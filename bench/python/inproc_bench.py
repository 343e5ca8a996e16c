#!/usr/bin/python3
"""xtwin in process: what Python costs over the C call (issue 30's targets; docs/BENCHMARKS.md).

    PYTHONPATH=<build>/python /usr/bin/python3 bench/python/inproc_bench.py cpu [--calls 200]
    PYTHONPATH=<build>/python /usr/bin/python3 bench/python/inproc_bench.py gpu [--reps 5]

cpu: Scene.render of one frame per call, timed from Python (time.perf_counter around the call),
     against the same call's time inside C (Scene.last_render_ns: xt_acq_expose_batch, what a C
     front end calls). What Python adds: argument parsing, the poses -> geometries, the output
     array, the GIL. Target: <= 1 ms per call. Several sizes, so that the added cost shows as a
     constant rather than a share.
gpu: a batch of 1000 random poses of xtwin bench's scene (a) (the bench head, labels; primary
     +-180, secondary +-40, table +-10 mm, as (d)) rendered from Python, frames per second: into
     host memory (Scene.render) and into device memory exported through DLPack
     (Scene.render_dlpack), at the thesis detector (1024^2, (d)'s own) and at 512^2 (the same field,
     twice the pitch). Compare with `xtwin bench --scenes d` on the same machine (target: within
     10 % of its rate).
"""
import argparse
import statistics
import sys
import time

import numpy as np

from xtwin import inproc


def cpu(args):
    scene = inproc.Scene(threads=args.threads)
    scene.add_phantom(dims=(64, 64, 64), spacing_mm=3.0)
    print("CPU: Scene.render, one frame per call, %d calls after 10 warm-up calls, threads %d" % (args.calls,
                                                                                                args.threads))
    print("%-12s %12s %12s %12s %12s" % ("detector", "python ms", "C call ms", "added ms", "added p90"))
    rng = np.random.default_rng(1)
    for cols in (8, 32, 128):
        mode = {"cols": cols, "rows": cols, "pitch_mm": 296.0 / cols}
        py, c, added = [], [], []
        for i in range(args.calls + 10):
            pose = [[rng.uniform(-90, 90), rng.uniform(-30, 30), 0.0]]
            t0 = time.perf_counter()
            scene.render(poses=pose, mode=mode)
            t = time.perf_counter() - t0
            if i >= 10:
                py.append(t * 1e3)
                c.append(scene.last_render_ns * 1e-6)
                added.append(py[-1] - c[-1])
        added.sort()
        print("%-12s %12.4f %12.4f %12.4f %12.4f" % ("%dx%d" % (cols, cols), statistics.median(py), statistics.median(c),
                                                      statistics.median(added), added[int(0.9 * len(added))]))


def gpu(args):
    if not inproc.cuda_available():
        print("gpu: no usable CUDA device (or a build without CUDA)")
        return 1
    scene = inproc.Scene(backend="cuda")
    scene.add_phantom("bench-head", labels=True)
    rng = np.random.default_rng(42)
    n = args.n
    poses = inproc.poses(primary=rng.uniform(-180, 180, n), secondary=rng.uniform(-40, 40, n),
                         table=rng.uniform(-10, 10, (n, 3)))
    thesis = [m for m in inproc.modes() if m["name"] == "thesis"][0]
    modes = [("thesis 1024^2", "thesis"),
             ("512^2", {"cols": 512, "rows": 512, "pitch_mm": 2 * thesis["pitch_u_mm"], "sod_mm": thesis["sod_mm"],
                        "sid_mm": thesis["sid_mm"]})]
    print("GPU: %d random poses of scene (a) per call, best and median of %d calls after a warm-up" % (n, args.reps))
    for label, mode in modes:
        p = poses
        for what in ("render (host)", "render_dlpack (device)"):
            times = []
            for r in range(args.reps + 1):
                t0 = time.perf_counter()
                if what.startswith("render (host)"):
                    scene.render(poses=p, mode=mode)
                else:
                    cap = scene.render_dlpack(poses=p, mode=mode)
                    del cap  # freed: the device memory goes back
                if r:
                    times.append(time.perf_counter() - t0)
            best, med = min(times), statistics.median(times)
            print("  %-14s %-24s best %8.2f ms  median %8.2f ms -> %9.0f frames/s (median)" % (
                label, what, best * 1e3, med * 1e3, n / med))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["cpu", "gpu"])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n", type=int, default=1000)
    args = ap.parse_args()
    return cpu(args) or 0 if args.what == "cpu" else gpu(args)


if __name__ == "__main__":
    sys.exit(main())
