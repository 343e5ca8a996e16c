#!/usr/bin/python3
"""Saves real frames for bench_codec: a CPU server with the imaging chain on, the raw and the
processed frame of two exposures, as the stream sends them (raw little-endian uint16, no header).

    /usr/bin/python3 bench/server/codec_frames.py build/server/xtwin-server MODE OUTDIR
    build/bench/bench_codec OUTDIR/*.u16
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "api", "python"))
from xtwin.stream import Stream  # noqa: E402


def main():
    server, mode, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    pf = os.path.join(out, "ports.json")
    if os.path.exists(pf):
        os.remove(pf)
    srv = subprocess.Popen([server, "--rest-port", "0", "--ws-port", "0", "--ports-file", pf, "--backend", "cpu",
                            "--mode", mode, "--fps", "1", "--chain"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not os.path.exists(pf):
            time.sleep(0.1)
        time.sleep(0.3)
        url = "ws://127.0.0.1:%d/v1/stream" % json.load(open(pf))["ws"]
        with Stream(url, open_timeout=60) as raw, Stream(url, open_timeout=60) as proc:
            proc.command({"type": "frames", "frames": "processed"})
            for i in range(2):
                for name, s in (("raw", raw), ("proc", proc)):
                    f = s.next_frame(300)
                    with open(os.path.join(out, "%s_%s_%d.u16" % (mode, name, i)), "wb") as fh:
                        fh.write(f.image.tobytes())
                    print("%s frame %d (%s) %dx%d" % (mode, f.counter, f.frame_kind, f.cols, f.rows), flush=True)
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    main()
