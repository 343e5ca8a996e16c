#!/usr/bin/env python3
"""Record and replay (issue 24, point 7): a session's frames come back bit for bit from its log.

    python3 tests/server/test_replay.py --server PATH --xtwin PATH

Starts xtwin-server on the CPU backend with two render workers and --session-log, and drives it
as a control application would: in lockstep with the imaging chain on (lag, the recursive filter
and dose-rate control carry state from frame to frame) a pose and a trigger at a time, then a
burst of triggers, then mono frames (which go to either worker), then a second run free-running
at 20 fps with the chain on and a pose change while it runs. Every frame message a client received
(raw, processed, mono) must equal the message `xtwin replay LOG` writes for its frame counter, byte
for byte but for the per-delivery times and counters (t_render_done_ns, t_sent_ns, frames_dropped:
bytes 48-71). The log must hold the session line, the commands in order, and one frame line per
exposure. A log cut in the middle of a line is refused with one line naming the file and line.
No timing assertions. Exit 0 passed, 1 failed.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_multi_device import Client, Failed, info, launch, u64, kind, TIMEOUT, OFF_COUNTER  # noqa: E402

SERVER_ARGS = ["--devices", "2", "--threads", "2", "--phantom-dim", "64", "--phantom-spacing", "3", "--mode",
               "fd20-128", "--run-mode", "lockstep", "--chain"]
CHAIN = {"seed": 777, "panel_seed": 20, "lag": 1, "temporal_alpha": 0.5, "drc": 1}
KIND_NAMES = {0: "mono", 1: "raw", 2: "processed"}
MASK = (48, 72)


def masked(m):
    m = bytes(m[:MASK[0]]) + bytes(MASK[1] - MASK[0]) + bytes(m[MASK[1]:])
    # t_cycle_ns (768, version 5): the pulse cycle's start, a time like the others
    return m[:768] + bytes(8) + m[776:]


def run_session(server, tmp, log_path):
    proc, p, out = launch(server, tmp, "session", ["--backend", "cpu", "--session-log", log_path] + SERVER_ARGS)
    clients, got = [], []
    try:
        if info(p["rest"]).get("render_workers") != 2:
            raise Failed("two render workers expected")
        raw, pc = Client(p["ws"], "raw"), Client(p["ws"], "processed")
        clients += [raw, pc]
        raw.until(hello=True)
        pc.until(hello=True)
        pc.ws.send({"type": "frames", "frames": "processed", "id": "f"})
        pc.until("f")
        n = [0]

        def cmd(obj):
            n[0] += 1
            obj = dict(obj, id="c%d" % n[0])
            raw.ws.send(obj)
            return raw.until(obj["id"])

        def trig(poses, wait_each, chain):
            want = []
            for pose in poses:
                cmd({"type": "pose", "pose": pose})
                want.append(cmd({"type": "trigger"})["frame"])
                if wait_each:
                    raw.until(frames=len(want) - len(raw.frames))
            got.extend(raw.take(len(want)))
            if chain:
                got.extend(pc.take(len(want)))
            else:
                pc.take(len(want))  # mono: the processed client gets the same message

        cmd({"type": "acquisition", "acquisition": {"chain": CHAIN}})
        trig([{"primary_deg": a, "secondary_deg": b} for a, b in ((0, 0), (30, 15), (-90, 0), (45, -10))], True, True)
        trig([{"primary_deg": a} for a in (-60, 0, 60)], False, True)
        cmd({"type": "acquisition", "acquisition": {"chain": {"enabled": False}}})
        trig([{"primary_deg": a, "secondary_deg": 5} for a in (10, -45, 90, 20)], False, False)
        # a second run, free-running, the chain on, a pose change while it runs
        cmd({"type": "stop"})
        cmd({"type": "acquisition", "acquisition": {"run_mode": "free", "fps": 20, "chain": {"enabled": True}}})
        raw.frames, pc.frames = [], []
        cmd({"type": "start"})
        got.extend(raw.take(4))
        cmd({"type": "pose", "pose": {"primary_deg": -20, "secondary_deg": 20}})
        got.extend(raw.take(4))
        got.extend(pc.take(6))
        cmd({"type": "stop"})
        for c in clients:
            c.ws.close()
        clients = []
        proc.send_signal(signal.SIGTERM)
        if proc.wait(TIMEOUT) != 0:
            raise Failed("xtwin-server exited %d" % proc.returncode)
        return got
    except (Failed, OSError, TimeoutError, ValueError, KeyError) as e:
        out.seek(0)
        raise Failed("%s: %s\nserver log:\n%s" % (type(e).__name__, e, out.read()[-3000:]))
    finally:
        for c in clients:
            c.ws.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()


def check_log(log_path):
    lines = [json.loads(l) for l in open(log_path)]
    if lines[0].get("type") != "session" or lines[0].get("backend") != "cpu" or lines[0].get("threads") != 1:  # two threads over two workers
        raise Failed("the log's first line is not the session's: %r" % lines[0])
    types = [l["type"] for l in lines]
    cmds = [l["command"] for l in lines if l["type"] == "command"]
    for want in ("acquisition", "pose", "trigger", "stop", "start"):
        if want not in cmds:
            raise Failed("no %s command in the log: %s" % (want, cmds))
    frames = [l for l in lines if l["type"] == "frame"]
    counters = [l["counter"] for l in frames]
    chain = [l["counter"] for l in frames if l["chain"]]  # one worker, in order; mono frames on either
    if chain != sorted(chain) or len(set(counters)) != len(counters):
        raise Failed("frame lines out of order: %s" % counters)
    if any(l["params"]["seed"] != "777" for l in frames):
        raise Failed("the run's seed is not in every frame line")
    return len(frames), types.count("command")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--xtwin", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="xtwin-replay-")
    t0 = time.monotonic()
    try:
        log_path = os.path.join(tmp, "session.jsonl")
        got = run_session(os.path.abspath(a.server), tmp, log_path)
        nframes, ncmds = check_log(log_path)
        out = os.path.join(tmp, "replay")
        r = subprocess.run([a.xtwin, "replay", log_path, "--out", out], capture_output=True, text=True,
                           timeout=TIMEOUT * 4)
        if r.returncode != 0:
            raise Failed("xtwin replay exited %d: %s" % (r.returncode, r.stderr))
        distinct = set()
        for m in got:
            c, k = u64(m, OFF_COUNTER), KIND_NAMES[kind(m)]
            files = glob.glob(os.path.join(out, "*-%06d-%s.bin" % (c, k)))
            if len(files) != 1:
                raise Failed("replay: no single file for frame %d (%s): %s" % (c, k, files))
            mine = open(files[0], "rb").read()
            if masked(mine) != masked(m):
                i = next((i for i in range(min(len(m), len(mine))) if masked(m)[i] != masked(mine)[i]), None)
                raise Failed("frame %d (%s): the replay differs (lengths %d, %d; first differing byte %s)"
                             % (c, k, len(m), len(mine), i))
            distinct.add(bytes(m[864:]))
        if len(distinct) < len(got) // 2:
            raise Failed("the frames compared are too alike to prove anything (%d distinct of %d)"
                         % (len(distinct), len(got)))
        # a log cut in the middle of a line
        cut = os.path.join(tmp, "cut.jsonl")
        text = open(log_path).read()
        open(cut, "w").write(text[:text.index("\n", len(text) // 2) + 40])
        r = subprocess.run([a.xtwin, "replay", cut, "--out", os.path.join(tmp, "cut")], capture_output=True,
                           text=True, timeout=TIMEOUT * 4)
        err = r.stderr.strip()
        if r.returncode != 1 or "\n" in err or "cut.jsonl:" not in err:
            raise Failed("a cut log: exit %d, %r" % (r.returncode, err))
    except Failed as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_replay: %d frame messages (raw, processed, mono; lockstep and free run, two workers) equal their "
          "replay from a log of %d exposures and %d commands (%.1f s)" % (len(got), nframes, ncmds,
                                                                            time.monotonic() - t0))
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
