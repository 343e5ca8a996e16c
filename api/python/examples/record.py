#!/usr/bin/python3
"""Records frames from the stream into one .npz: the images (N, rows, cols), the poses (N, 8:
primary, secondary, detector rotation, SOD, SID, table x, y, z), the projection matrices (N, 3, 4),
frame counters, pose sequence numbers and the server's exposure timestamps.

    /usr/bin/python3 api/python/examples/record.py --url http://127.0.0.1:8710 --count 50 --out out/run.npz
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
    p.add_argument("--stream-url")
    p.add_argument("--token")
    p.add_argument("--insecure", action="store_true")
    p.add_argument("--count", type=int, default=50)
    p.add_argument("--out", default="out/run.npz")
    a = p.parse_args()
    c = xtwin.Client(a.url, token=a.token, verify=not a.insecure, stream_url=a.stream_url)
    images, poses, Ps, counters, seqs, t_exp, dropped = [], [], [], [], [], [], 0
    with c.stream() as s:
        for f in s.frames(count=a.count, timeout=30):
            images.append(np.array(f.image))
            q = f.pose
            poses.append([q["primary_deg"], q["secondary_deg"], q["detector_rot_deg"], q["sod_mm"], q["sid_mm"]]
                         + q["table_mm"])
            Ps.append(f.P)
            counters.append(f.counter)
            seqs.append(f.pose_seq)
            t_exp.append(f.t_exposure_ns)
            dropped = f.frames_dropped
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    np.savez_compressed(a.out, images=np.stack(images), poses=np.array(poses), P=np.stack(Ps),
                        frame_counter=np.array(counters, dtype=np.uint64), pose_seq=np.array(seqs, dtype=np.uint64),
                        t_exposure_ns=np.array(t_exp, dtype=np.uint64))
    span = (t_exp[-1] - t_exp[0]) / 1e9 if len(t_exp) > 1 else 0
    print("recorded %d frames %s (%s) over %.2f s of exposures, %d dropped -> %s" % (
        len(images), images[0].shape, images[0].dtype, span, dropped, a.out))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (xtwin.XtwinError, TimeoutError) as e:
        print("record: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(1)
