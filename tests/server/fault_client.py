#!/usr/bin/python3
"""A stream client for the fault tests (test_faults.py), run as its own process so that the test
can SIGKILL it, stop it reading, or run it in another network namespace.

    fault_client.py URL --seconds S        read frames for S seconds, print a JSON summary
    fault_client.py URL --forever          read until killed (prints "ready" after the first frame)
    fault_client.py URL --stall            complete the handshake, read one frame, then never read again

The summary: frames, counter gaps, the last header's frames_dropped, and how the connection ended.
"""
import argparse
import asyncio
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "api", "examples"))
from stream_client import parse_header  # noqa: E402

import websockets  # noqa: E402


async def run(a):
    out = {"frames": 0, "gaps": 0, "dropped": 0, "end": "time", "first": None, "last": None}
    async with websockets.connect(a.url, max_size=256 << 20, open_timeout=60, ping_interval=None,
                                  max_queue=4 if a.stall else 32) as ws:
        loop = asyncio.get_running_loop()
        t_end = loop.time() + a.seconds
        try:
            while a.forever or loop.time() < t_end:
                msg = await asyncio.wait_for(ws.recv(), 60 if a.forever else max(0.01, t_end - loop.time()))
                if isinstance(msg, str):
                    continue
                h, _ = parse_header(msg)
                if out["last"] is not None:
                    out["gaps"] += h["frame_counter"] - out["last"] - 1
                else:
                    out["first"] = h["frame_counter"]
                out["last"] = h["frame_counter"]
                out["dropped"] = h["frames_dropped"]
                out["frames"] += 1
                if out["frames"] == 1 and (a.forever or a.stall):
                    print("ready", flush=True)
                if a.stall:
                    # never read again: the transport's buffers fill and the server sees a stalled peer
                    ws.transport.pause_reading()
                    await asyncio.sleep(3600)
        except asyncio.TimeoutError:
            pass
        except websockets.exceptions.ConnectionClosed as e:
            out["end"] = "closed %s" % (e.rcvd.code if e.rcvd else None)
    print(json.dumps(out), flush=True)


def main():
    import ctypes
    import signal
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with the test
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--forever", action="store_true")
    p.add_argument("--stall", action="store_true")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
