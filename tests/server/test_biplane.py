#!/usr/bin/env python3
"""Biplane (issue 25, docs/biplane.md): plane A (frontal) and plane B (lateral) on one server.

    python3 tests/server/test_biplane.py --server PATH --xtwin PATH

Each check stands on something the server did not compute for it: the lateral stand's projection
matrix against the closed form of docs/geometry.md at LAO 90 (and plane A's at 0/0); the pulse
schedule from the server's own deadlines (t_exposure_sched_ns, t_cycle_ns, period_ns: exact
arithmetic, so no timing can make it fail); each plane's dose totals against its own frames'
headers and the total against their sum; plane B's pedal against its device's press time and
prepare latency; a biplane session log against its replay; the lateral stand's ranges and the refusals of a single-plane system. Frames come
from a stream client subscribed to both planes. Standard library only. Exit 0 passed, 1 failed.
"""
import argparse
import http.client
import json
import math
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_multi_device import Client, Failed, launch, u64, TIMEOUT  # noqa: E402

BASE = ["--threads", "2", "--phantom-dim", "48", "--phantom-spacing", "4", "--mode", "fd20-128", "--planes", "2",
        "--mode-b", "fd15-256", "--fps", "10"]
# api/xt_stream.h, version 5
OFF_SCHED, OFF_ROWS, OFF_COLS, OFF_P, OFF_PITCH, OFF_PERIOD = 32, 72, 76, 160, 256, 296
OFF_SEED, OFF_KIRP_TOTAL, OFF_KAP_TOTAL, OFF_DOSE_FRAMES, OFF_DETECTOR = 312, 512, 520, 528, 576
OFF_PLANE, OFF_TIMING, OFF_CYCLE, OFF_TCYCLE = 752, 756, 760, 768
SINGLE, INTERLEAVED, SIMULTANEOUS = 0, 1, 2


def check(cond, what):
    if not cond:
        raise Failed(what)


def u32(m, off):
    return struct.unpack_from("<I", m, off)[0]


def f64(m, off):
    return struct.unpack_from("<d", m, off)[0]


def call(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


def ok(port, method, path, body=None):
    st, j = call(port, method, path, body)
    check(st == 200, "%s %s: %d %r" % (method, path, st, j))
    return j


def project(P, x):
    w = [sum(P[r * 4 + c] * x[c] for c in range(3)) + P[r * 4 + 3] for r in range(3)]
    return w[0] / w[2], w[1] / w[2]


def closed_form(primary, x, sod, sid, pitch, c0, r0):
    """docs/geometry.md at 0/0 (source posterior, u = +x, v = -z) and at LAO 90 (source on the
    patient's right, u = +y, v = -z), written out by hand for these two poses only."""
    if primary == 0:
        w = sod - x[1]
        return c0 + sid * x[0] / (w * pitch), r0 - sid * x[2] / (w * pitch)
    w = x[0] + sod
    return c0 + sid * x[1] / (w * pitch), r0 - sid * x[2] / (w * pitch)


def splitmix(seed, plane):
    """docs/biplane.md: plane B's noise seed is plane A's through splitmix64's finaliser."""
    M = (1 << 64) - 1
    z = (seed + 0x9E3779B97F4A7C15 * plane) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return (z ^ (z >> 31)) & ((1 << 53) - 1)  # 53 bits: a JSON number


def frames_by_plane(frames):
    out = {0: [], 1: []}
    for m in frames:
        out[u32(m, OFF_PLANE)].append(m)
    return out


class Server:
    def __init__(self, server, tmp, name, args):
        self.proc, p, self.log = launch(server, tmp, name, args)
        self.rest, self.ws = p["rest"], p["ws"]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(TIMEOUT)
        check(rc == 0, "xtwin-server exited %d" % rc)

    def client(self, name):
        c = Client(self.ws, name)
        c.ws = type(c.ws)(self.ws, "/v1/stream?planes=a,b")  # both planes (default: plane A only)
        c.until(hello=True)
        c.ws.send({"type": "subscribe", "planes": ["A", "B"], "id": "sub"})
        c.until("sub")
        return c


def test_geometry(srv):
    """Plane B stands at its stand's default (LAO 90, lateral); both planes' P against the closed
    form; one trigger exposes both planes at one instant, in one cycle."""
    b = ok(srv.rest, "GET", "/v1/planes/b")
    check(b["plane"] == "B" and b["stand"]["name"] == "lateral", "plane B's stand: %r" % b.get("stand"))
    check(b["pose"]["primary_deg"] == 90 and b["pose"]["secondary_deg"] == 0, "plane B's default pose %r" % b["pose"])
    check(b["acquisition"]["mode"] == "fd15-256", "plane B's mode %r" % b["acquisition"]["mode"])
    c = srv.client("geometry")
    ok(srv.rest, "POST", "/v1/acquisition/trigger")
    got = frames_by_plane(c.take(2))
    check(len(got[0]) == 1 and len(got[1]) == 1, "one trigger: one frame of each plane")
    a_, b_ = got[0][0], got[1][0]
    check(bytes(b_[OFF_DETECTOR:OFF_DETECTOR + 4]) == b"fd15" and u32(b_, OFF_COLS) == 256, "plane B: fd15-256")
    check(u64(a_, OFF_CYCLE) == u64(b_, OFF_CYCLE) and u64(a_, OFF_SCHED) == u64(b_, OFF_SCHED),
          "a trigger's two frames: one cycle, one instant")
    check(u32(a_, OFF_TIMING) == SIMULTANEOUS, "a trigger of two planes is simultaneous")
    rnd = random.Random(25)
    for primary, m, pose in ((0, a_, ok(srv.rest, "GET", "/v1/pose")["pose"]), (90, b_, b["pose"])):
        P = struct.unpack_from("<12d", m, OFF_P)
        pitch = f64(m, OFF_PITCH)
        rows, cols = u32(m, OFF_ROWS), u32(m, OFF_COLS)
        for _ in range(20):
            x = [rnd.uniform(-80, 80) for _ in range(3)]
            got_px = project(P, x)
            want = closed_form(primary, x, pose["sod_mm"], pose["sid_mm"], pitch, (cols - 1) / 2, (rows - 1) / 2)
            check(math.hypot(got_px[0] - want[0], got_px[1] - want[1]) < 1e-6,
                  "plane %s: P maps %r to %r, the closed form to %r" % ("AB"[primary == 90], x, got_px, want))
    check(a_[864:] != b_[864:], "the lateral view differs from the frontal one")


def test_schedule(srv):
    """Free run at 10 fps: interleaved, plane B's pulse half a period after plane A's, in every
    cycle; then simultaneous; then plane B alone."""
    ok(srv.rest, "PUT", "/v1/acquisition", {"run_mode": "free", "fps": 10})
    c = srv.client("schedule")

    def cycles(n, timing):
        # a new client may first get the newest frame of each plane made before: a lockstep
        # trigger's (period 0) is none of this schedule's
        frames = [m for m in c.take(2 * n + 2) if u64(m, OFF_PERIOD)][-2 * n:]
        by_cycle = {}
        for m in frames:
            check(u32(m, OFF_TIMING) == timing, "timing %d, want %d" % (u32(m, OFF_TIMING), timing))
            T = u64(m, OFF_PERIOD)
            check(T == 100000000, "period %d" % T)
            off = u64(m, OFF_SCHED) - u64(m, OFF_TCYCLE)
            want = T // 2 if (u32(m, OFF_PLANE) == 1 and timing == INTERLEAVED) else 0
            check(off == want, "plane %d: exposure %d ns into its cycle, want %d" % (u32(m, OFF_PLANE), off, want))
            by_cycle.setdefault(u64(m, OFF_CYCLE), []).append(m)
        starts = sorted({u64(m, OFF_TCYCLE) for m in frames})
        for a, b in zip(starts, starts[1:]):
            check((b - a) % 100000000 == 0 and b > a, "cycle starts %d apart" % (b - a))
        for k, ms in by_cycle.items():
            check(len({u64(m, OFF_TCYCLE) for m in ms}) == 1, "cycle %d: one start" % k)
            check(len({u32(m, OFF_PLANE) for m in ms}) == len(ms), "cycle %d: a plane twice" % k)
        return frames

    c.frames.clear()
    cycles(4, INTERLEAVED)
    ok(srv.rest, "PUT", "/v1/acquisition", {"biplane": {"timing": "simultaneous"}})
    c.until(frames=4)  # frames of the old schedule already on their way
    c.frames.clear()
    for m in c.take(6):
        if u32(m, OFF_TIMING) != SIMULTANEOUS:
            continue
        check(u64(m, OFF_SCHED) == u64(m, OFF_TCYCLE), "simultaneous: at the cycle's start")
    ok(srv.rest, "POST", "/v1/acquisition/stop")
    ok(srv.rest, "PUT", "/v1/acquisition", {"biplane": {"planes": ["B"], "timing": "interleaved"}})
    ok(srv.rest, "POST", "/v1/acquisition/start")
    check(ok(srv.rest, "GET", "/v1/device")["state"] == "ready", "plane A stays ready when B alone runs")
    c.frames.clear()
    got = c.take(8)
    after = [m for m in got if u64(m, OFF_SCHED) > 0 and u32(m, OFF_TIMING) == SINGLE]
    check(len(after) >= 4, "plane B alone: single-plane timing")
    check(all(u32(m, OFF_PLANE) == 1 for m in after[-4:]), "plane B alone: only B's frames")
    ok(srv.rest, "POST", "/v1/acquisition/stop")
    ok(srv.rest, "PUT", "/v1/acquisition", {"biplane": {"planes": ["A", "B"]}, "run_mode": "lockstep"})
    ok(srv.rest, "POST", "/v1/acquisition/start")


def test_dose(srv):
    """With the chain on both planes: each plane's totals are its own frames', the total their sum;
    the two planes' noise seeds differ."""
    ok(srv.rest, "PUT", "/v1/acquisition", {"chain": {"enabled": True, "seed": 77}})
    ok(srv.rest, "PUT", "/v1/planes/b/acquisition", {"chain": {"enabled": True}})
    ok(srv.rest, "POST", "/v1/acquisition/stop")
    ok(srv.rest, "POST", "/v1/acquisition/start")  # a new run: the totals start afresh
    c = srv.client("dose")
    for _ in range(3):
        ok(srv.rest, "POST", "/v1/acquisition/trigger")
    # the raw frames (a client gets raw unless it asks for processed); a new client may first get
    # the newest frame of each plane made before it connected: the run's third of each is the mark
    last = {}
    for _ in range(12):
        m = c.take(1)[0]
        if u64(m, OFF_DOSE_FRAMES) == 3:
            last[u32(m, OFF_PLANE)] = m
        if len(last) == 2:
            break
    check(len(last) == 2, "the third frame of each plane's run did not come")
    dose = ok(srv.rest, "GET", "/v1/acquisition")["dose"]
    for p, name in ((0, "A"), (1, "B")):
        d = dose["planes"][name]
        check(d["run_frames"] == u64(last[p], OFF_DOSE_FRAMES) == 3, "plane %s: %r frames" % (name, d["run_frames"]))
        check(abs(d["k_irp_total_mgy"] - f64(last[p], OFF_KIRP_TOTAL)) <= 1e-12 * max(1, d["k_irp_total_mgy"]),
              "plane %s: K_irp %r vs the frame's %r" % (name, d["k_irp_total_mgy"], f64(last[p], OFF_KIRP_TOTAL)))
        check(d["k_irp_total_mgy"] > 0, "plane %s: dose counted" % name)
    t = dose["total"]
    check(t["run_frames"] == 6, "total frames %r" % t)
    check(abs(t["k_irp_total_mgy"] - f64(last[0], OFF_KIRP_TOTAL) - f64(last[1], OFF_KIRP_TOTAL)) < 1e-9, "total K_irp")
    check(abs(t["kap_total_gycm2"] - f64(last[0], OFF_KAP_TOTAL) - f64(last[1], OFF_KAP_TOTAL)) < 1e-12, "total KAP")
    check(u64(last[0], OFF_SEED) == 77 and u64(last[1], OFF_SEED) == splitmix(77, 1),
          "plane B's seed: %d, want plane A's 77 mixed: %d" % (u64(last[1], OFF_SEED), splitmix(77, 1)))


def test_plane_b_pedal(server, tmp):
    """Plane B's pedal alone: its device prepares and exposes, its first exposure at press +
    prepare + first frame by the server's clock, plane A's device untouched; events name plane B."""
    srv = Server(server, tmp, "pedal", BASE + ["--no-autostart"])
    try:
        c = srv.client("pedal")
        d = ok(srv.rest, "POST", "/v1/planes/b/device/fluoro")
        check(d["state"] == "prepare", "plane B after fluoro: %r" % d["state"])
        frames = c.take(3)
        check(all(u32(m, OFF_PLANE) == 1 for m in frames), "plane B's pedal: plane B's frames only")
        dev = ok(srv.rest, "GET", "/v1/planes/b/device")
        lat = dev["latency"]["fluoro"]
        want = dev["t_press_ns"] + round((lat["prepare_ms"] + lat["first_frame_ms"]) * 1e6)
        first = min(u64(m, OFF_SCHED) for m in frames)
        check(abs(first - want) <= 1, "plane B's first exposure at %d, want press + prepare %d" % (first, want))
        check(ok(srv.rest, "GET", "/v1/planes/a/device")["state"] == "ready", "plane A untouched")
        ok(srv.rest, "POST", "/v1/planes/b/device/release")
        events = []
        while not any(e.get("event") == "lih" for e in events):
            is_text, msg = c.ws.recv(TIMEOUT)
            if is_text:
                j = json.loads(msg)
                if j.get("type") == "event":
                    events.append(j)
        check(all(e.get("plane") == "B" for e in events), "events name plane B: %r" % events)
    finally:
        srv.stop()


def test_replay(server, xtwin, tmp):
    """A biplane session log replays bit for bit (but for the times): both planes' chain frames, each
    plane with its own lag, temporal filter and noise, interleaved in one log."""
    log_path = os.path.join(tmp, "biplane.jsonl")
    srv = Server(server, tmp, "replay", BASE + ["--run-mode", "lockstep", "--chain", "--session-log", log_path])
    try:
        ok(srv.rest, "PUT", "/v1/acquisition", {"chain": {"seed": 5, "lag": 1,
                                                          "temporal_alpha": 0.5}})
        ok(srv.rest, "PUT", "/v1/planes/b/pose", {"primary_deg": 80, "secondary_deg": 10})
        c = srv.client("replay")
        for _ in range(4):
            ok(srv.rest, "POST", "/v1/acquisition/trigger")
        got = c.take(8)
    finally:
        srv.stop()
    out = os.path.join(tmp, "replayed")
    r = subprocess.run([xtwin, "replay", log_path, "--out", out], capture_output=True, text=True, timeout=TIMEOUT * 4)
    check(r.returncode == 0, "xtwin replay exited %d: %s" % (r.returncode, r.stderr))
    check(sorted(u32(m, OFF_PLANE) for m in got) == [0] * 4 + [1] * 4, "four frames of each plane")
    for m in got:
        name = "%06d-%06d-raw%s.bin" % (0, u64(m, 8), "-b" if u32(m, OFF_PLANE) else "")
        files = [f for f in os.listdir(out) if f.endswith(name[6:])]
        check(len(files) == 1, "replay: no single file for %s: %r" % (name, files))
        mine = open(os.path.join(out, files[0]), "rb").read()
        check(masked(mine) == masked(m), "plane %d frame %d: the replay differs" % (u32(m, OFF_PLANE), u64(m, 8)))


def masked(m):
    """The times (t_pose .. t_sent, t_cycle_ns) and frames_dropped zeroed: the rest is the frame."""
    m = bytes(m)
    return m[:24] + bytes(48) + m[72:768] + bytes(8) + m[776:]


def test_refusals(server, tmp, srv):
    """The lateral stand's ranges; one table under both planes; unknown planes; plane B on a
    single-plane system."""
    st, j = call(srv.rest, "PUT", "/v1/planes/b/pose", {"primary_deg": 150})
    check(st == 400 and "lateral" in j["error"]["message"] and "primary_deg" in j["error"]["message"],
          "out of the lateral stand's range: %d %r" % (st, j))
    st, j = call(srv.rest, "PUT", "/v1/pose", {"primary_deg": 150})
    check(st == 200, "the frontal stand keeps its range: %d %r" % (st, j))
    seq_b = ok(srv.rest, "GET", "/v1/planes/b/pose")["seq"]
    ok(srv.rest, "PUT", "/v1/pose", {"table_mm": [3, -20, 5]})
    b = ok(srv.rest, "GET", "/v1/planes/b/pose")
    check(b["pose"]["table_mm"] == [3, -20, 5] and b["seq"] == seq_b + 1, "one table under both planes: %r" % b)
    ok(srv.rest, "PUT", "/v1/planes/b/pose", {"table_mm": [0, 0, 0]})
    check(ok(srv.rest, "GET", "/v1/pose")["pose"]["table_mm"] == [0, 0, 0], "the table moved through plane B")
    st, j = call(srv.rest, "GET", "/v1/planes/c/pose")
    check(st == 404 and "neither A nor B" in j["error"]["message"], "plane c: %d %r" % (st, j))
    st, j = call(srv.rest, "POST", "/v1/planes/b/device/nonsense")
    check(st == 404, "an unknown device command: %d" % st)
    single = Server(server, tmp, "single", BASE[:-6])
    try:
        st, j = call(single.rest, "GET", "/v1/planes/b")
        check(st == 404 and "single-plane" in j["error"]["message"], "plane B of a single-plane system: %d %r" % (st, j))
        st, j = call(single.rest, "PUT", "/v1/acquisition", {"biplane": {"planes": ["A", "B"]}})
        check(st == 400 and "single-plane" in j["error"]["message"], "biplane on a single plane: %d %r" % (st, j))
        check(ok(single.rest, "GET", "/v1/planes/a")["pose"]["primary_deg"] == 0, "plane A of a single-plane system")
    finally:
        single.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--xtwin", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="xt-biplane-")
    failed = passed = 0
    srv = None
    try:
        srv = Server(args.server, tmp, "biplane", BASE + ["--run-mode", "lockstep"])
        steps = [("test_geometry", lambda: test_geometry(srv)), ("test_schedule", lambda: test_schedule(srv)),
                 ("test_dose", lambda: test_dose(srv)),
                 ("test_refusals", lambda: test_refusals(args.server, tmp, srv)),
                 ("test_plane_b_pedal", lambda: test_plane_b_pedal(args.server, tmp)),
                 ("test_replay", lambda: test_replay(args.server, args.xtwin, tmp))]
        for name, fn in steps:
            try:
                fn()
                print("ok   %s" % name)
                passed += 1
            except (Failed, TimeoutError, OSError, KeyError, ValueError) as e:
                print("FAIL %s: %s" % (name, e))
                failed += 1
        srv.stop()
        srv = None
    except Failed as e:
        print("FAIL: %s" % e)
        failed += 1
    finally:
        if srv:
            srv.proc.kill()
        if failed:
            print("server logs kept in %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
