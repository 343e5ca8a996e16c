#!/usr/bin/env python3
"""Virtual time (issue 24, point 8): --clock virtual gives the frames of real time, as fast as the
backend renders and the stream sends them.

    python3 tests/server/test_virtual_clock.py --server PATH

Runs the same free-running acquisition twice, on the real and on the virtual clock: the CPU
backend, fd20-128 at 5 fps with the imaging chain's lag, recursive filter and dose-rate control on
and fixed seeds; one stream client connects, starts the run and takes 12 frames. On the virtual
clock the exposures are exactly on their deadlines (t_exposure = t_sched = t0 + k T, T = 200 ms),
a frame is ready and sent at its exposure's time (a render takes no virtual time), and none is
dropped. Both runs' frames must be byte-identical but for the times and the per-client counters
(header bytes 24-71): the same exposures, loop, doses and pixels -- up to the real run's first
gap, if a loaded machine made it skip an exposure. No timing assertions on the real clock. Exit 0 passed, 1 failed.
"""
import argparse
import os
import shutil
import signal
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_multi_device import Client, Failed, launch, u64, TIMEOUT, OFF_COUNTER, OFF_DROPPED  # noqa: E402

ARGS = ["--backend", "cpu", "--threads", "2", "--phantom-dim", "64", "--phantom-spacing", "3", "--mode", "fd20-128",
        "--fps", "5", "--chain", "--no-autostart"]
CHAIN = {"seed": 4711, "panel_seed": 20, "lag": 1, "temporal_alpha": 0.5, "drc": 1}
N = 12
T_NS = 200000000
MASK = (24, 72)


def masked(m):
    m = bytes(m[:MASK[0]]) + bytes(MASK[1] - MASK[0]) + bytes(m[MASK[1]:])
    # t_cycle_ns (768, version 5): the pulse cycle's start, a time like the others
    return m[:768] + bytes(8) + m[776:]


def run(server, tmp, clock):
    proc, p, out = launch(server, tmp, clock, ["--clock", clock] + ARGS)
    c = None
    try:
        c = Client(p["ws"], clock)
        c.until(hello=True)
        c.ws.send({"type": "acquisition", "acquisition": {"chain": CHAIN}, "id": "a"})
        c.until("a")
        c.ws.send({"type": "start", "id": "s"})
        c.until("s")
        got = c.take(N)
        c.ws.close()
        c = None
        proc.send_signal(signal.SIGTERM)
        if proc.wait(TIMEOUT) != 0:
            raise Failed("xtwin-server exited %d" % proc.returncode)
        return got
    except (Failed, OSError, TimeoutError, ValueError, KeyError) as e:
        out.seek(0)
        raise Failed("%s clock: %s: %s\nserver log:\n%s" % (clock, type(e).__name__, e, out.read()[-3000:]))
    finally:
        if c:
            c.ws.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()


def times(m):
    return struct.unpack_from("<QQQQQ", m, 24)  # t_pose, t_sched, t_exposure, t_render_done, t_sent


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    a = ap.parse_args()
    server = os.path.abspath(a.server)
    tmp = tempfile.mkdtemp(prefix="xtwin-virtual-")
    try:
        virt = run(server, tmp, "virtual")
        counters = [u64(m, OFF_COUNTER) for m in virt]
        if counters != list(range(counters[0], counters[0] + N)):
            raise Failed("virtual: frame counters %s: one was lost" % counters)
        if any(u64(m, OFF_DROPPED) for m in virt):
            raise Failed("virtual: frames_dropped %s" % [u64(m, OFF_DROPPED) for m in virt])
        t0 = times(virt[0])[1]
        for k, m in enumerate(virt):
            t_pose, t_sched, t_exp, t_done, t_sent = times(m)
            if t_sched != t0 + k * T_NS or t_exp != t_sched:
                raise Failed("virtual: frame %d exposed at %d, scheduled %d, want both %d"
                             % (k, t_exp - t0, t_sched - t0, k * T_NS))
            if t_done != t_exp or t_sent < t_done or t_pose > t_exp:
                raise Failed("virtual: frame %d: pose %d, done %d, sent %d (exposure %d)"
                             % (k, t_pose - t0, t_done - t0, t_sent - t0, t_exp - t0))
        # The real run's frames, up to its first gap: an exposure the real clock replaced in the queue
        # (its worker still busy, as on a loaded machine) never reached the dose-rate loop, so frames
        # after it took another path; the frames before it must be the virtual run's.
        real = {}
        for m in run(server, tmp, "real"):
            c = u64(m, OFF_COUNTER)
            if real and c != max(real) + 1:
                break
            real[c] = m
        same = 0
        for m in virt:
            r = real.get(u64(m, OFF_COUNTER))
            if r is None:
                continue
            if masked(r) != masked(m):
                i = next(i for i in range(min(len(r), len(m))) if masked(r)[i] != masked(m)[i])
                raise Failed("frame %d differs between the real and the virtual clock at byte %d"
                             % (u64(m, OFF_COUNTER), i))
            same += 1
        if same < 1:
            raise Failed("no frame of the real run to compare")
        if len({bytes(m[864:]) for m in virt}) < 2:
            raise Failed("every frame alike: the comparison proves nothing")
    except Failed as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_virtual_clock: %d frames on the virtual clock exactly on their deadlines, none dropped, %d of them "
          "byte-identical to the real clock's but for the times" % (N, same))
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
