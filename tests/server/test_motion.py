#!/usr/bin/env python3
"""Motion over the API (issue 26, point 3): model transforms latched per exposure, periodic phases.

    python3 tests/server/test_motion.py --server PATH [--xtwin PATH]

Part 1, the real clock: a CPU server at fd20-128, 30 fps, float32 line integrals, no phantom, one
model: "cath", a 6 mm tube lying across the field at z = 0 (an instrument: any model kind takes a
transform). While the stream runs, PUT /v1/models/cath.instr.json/transform moves it every ~17 ms
between z = +40 mm and z = -40 mm, each answered with its version and the server's time of
publication. Every frame is judged from server timestamps alone: it must show the transform of the
last update published before its t_exposure_ns (told from its pixels: the row where the line
integrals peak) and carry that update's version (header xform_version, motion_flags bit 1).

Part 2, the virtual clock (--clock virtual) at 5 fps: respiratory (4 s, 10 mm along the default
caudal axis) and cardiac (70 bpm) motion are started; each frame's header carries its motion time
and phases: consecutive frames' times differ by exactly the frame period, the pulse's offset from
t_exposure is the same for all, and the phases and the displacement are the formulas of
docs/geometry.md at that time. The tube's peak row is where the header's P projects the tube moved
by resp_mm (an independent oracle of the transformed scene). Stopped, the frames are still; with
blur_samples 4 they say so. With --xtwin, `xtwin replay` of the session log gives every one of
these frames back bit for bit (times of the delivery masked). Bad requests get one-line 4xx.
Exit 0 passed, 1 failed.
"""
import argparse
import glob
import http.client
import json
import math
import os
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_multi_device import Client, Failed, launch, u64, TIMEOUT  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "golden"))
from record import WS  # noqa: E402

OFF_T_EXPOSURE, OFF_P, OFF_PERIOD = 40, 160, 296
OFF_MOTION = 800  # motion_t_s, cardiac_phase, resp_phase, cardiac_scale, resp_mm, flags, blur, xform_version
N = 128
Z = {"A": 40.0, "B": -40.0}


def hsize(m):
    return struct.unpack_from("<H", m, 6)[0]


def motion(m):
    t, cp, rp, cs, rmm = struct.unpack_from("<5d", m, OFF_MOTION)
    flags, blur = struct.unpack_from("<II", m, OFF_MOTION + 40)
    return {"t_s": t, "cp": cp, "rp": rp, "scale": cs, "resp_mm": rmm, "flags": flags, "blur": blur,
            "xv": u64(m, OFF_MOTION + 48)}


def rest(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    c.request(method, path, json.dumps(body) if body is not None else None,
              {"Content-Type": "application/json"} if body is not None else {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


def peak_row(frame):
    px = struct.unpack_from("<%df" % (N * N), frame, hsize(frame))
    rows = [sum(abs(px[r * N + c]) for c in range(N // 4, 3 * N // 4)) for r in range(N)]
    r = max(range(N), key=lambda k: rows[k])
    return r if rows[r] > 0 else None


def project_row(frame, x, y, z):
    P = struct.unpack_from("<12d", frame, OFF_P)
    w = P[8] * x + P[9] * y + P[10] * z + P[11]
    return (P[4] * x + P[5] * y + P[6] * z + P[7]) / w


def which_row(r):
    if r is None:
        return None
    return "A" if r < 0.4 * N else ("B" if r > 0.6 * N else "C")


def shown(frame):
    return which_row(peak_row(frame))


def rest_render_shows(port):
    """POST /v1/render (.npy) at the current pose: which position the tube is at."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    c.request("POST", "/v1/render", json.dumps({}), {"Content-Type": "application/json", "Accept": "application/x-npy"})
    r = c.getresponse()
    body = r.read()
    c.close()
    if r.status != 200 or body[:6] != b"\x93NUMPY":
        raise Failed("POST /v1/render: %d %r" % (r.status, body[:200]))
    hl = struct.unpack_from("<H", body, 8)[0]
    hdr = body[10:10 + hl].decode()
    data = body[10 + hl:]
    if "'<f4'" in hdr:
        px = struct.unpack_from("<%df" % (N * N), data)
    elif "'<u2'" in hdr:
        px = [-math.log(max(v, 1) / 65535.0) for v in struct.unpack_from("<%dH" % (N * N), data)]
    else:
        raise Failed("POST /v1/render: npy header %s" % hdr)
    rows = [sum(abs(px[r * N + c]) for c in range(N // 4, 3 * N // 4)) for r in range(N)]
    best = max(range(N), key=lambda k: rows[k])
    return which_row(best if rows[best] > 1e-6 else None)


def write_model(tmp):
    with open(os.path.join(tmp, "cath.instr.json"), "w") as f:
        json.dump({"medium": "air", "max_points": 64, "sections": [{"r_out_mm": 3.0, "wall": "catheter_polymer_w"}],
                   "points": [[-60.0 + 3.0 * i, 0.0, 0.0] for i in range(41)]}, f)


def check_errors(port):
    for method, path, body, want in (
            ("PUT", "/v1/models/nope/transform", {"translation_mm": [0, 0, 1]}, 404),
            ("PUT", "/v1/models/cath.instr.json/transform", {"translation_mm": [0, 0, 5000]}, 400),
            ("PUT", "/v1/models/cath.instr.json/transform", {"rotation_deg": [0, 270, 0]}, 400),
            ("PUT", "/v1/models/cath.instr.json/transform", {"translation": [0, 0, 1]}, 400),
            ("PUT", "/v1/models/cath.instr.json/transform", {"translation_mm": [0, "a", 1]}, 400),
            ("PUT", "/v1/motion", {"cardiac": {"bpm": 500}}, 400),
            ("PUT", "/v1/motion", {"respiratory": {"axis": [1, 1, 0]}}, 400),
            ("PUT", "/v1/motion", {"respiratory": {"models": ["nope"]}}, 404),
            ("PUT", "/v1/motion", {"blur_samples": 99}, 400),
            ("PUT", "/v1/motion", {"wobble": {}}, 400)):
        st, j = rest(port, method, path, body)
        msg = (j or {}).get("error", {}).get("message", "")
        if st != want or not msg or "\n" in msg:
            raise Failed("%s %s %r: %d %r (want %d, one line)" % (method, path, body, st, j, want))
    st, j = rest(port, "GET", "/v1/motion")
    if st != 200 or j["cardiac"]["on"] or j["respiratory"]["on"] or j["xform_version"] != 0:
        raise Failed("refused requests changed the motion: %r" % j)
    if j["respiratory"]["models"] != ["cath.instr.json"]:
        raise Failed("by default every model moves: %r" % j)
    for names in ([], ["cath.instr.json"]):  # [] moves none
        st, j = rest(port, "PUT", "/v1/motion", {"respiratory": {"on": False, "models": names}})
        if st != 200 or j["respiratory"]["models"] != names or j["respiratory"]["on"]:
            raise Failed("respiratory.models %r: %d %r" % (names, st, j))


def part_latch(server, tmp):
    proc, p, out = launch(server, tmp, "latch", [
        "--backend", "cpu", "--threads", "2", "--phantom", "none", "--mode", "fd20-128", "--fps", "30",
        "--pixel-format", "float32", "--no-autostart", "--model-root", tmp, "--model", os.path.join(tmp, "cath.instr.json")])
    ws = None
    try:
        check_errors(p["rest"])
        ws = WS(p["ws"])
        frames, updates = [], []

        def pump(timeout):
            end = time.monotonic() + timeout
            while True:
                left = end - time.monotonic()
                if not ws.buf and (left <= 0 or not select.select([ws.s], [], [], left)[0]):
                    return
                is_text, m = ws.recv(TIMEOUT)
                if not is_text:
                    frames.append(m)

        ws.send({"type": "start", "id": "start"})
        pump(0.3)
        k, t_next = 0, time.monotonic()
        rng = random.Random(26)
        t_stop = t_next + 30.0
        while time.monotonic() < t_stop:
            t_end = t_next + 2.0
            while time.monotonic() < t_end:
                # drawn, not alternated: at 60 Hz against 30 fps an alternation can phase-lock, every
                # frame then latching the same one of the two (seen: 929 B, 0 A in 30 s)
                which = "A" if rng.random() < 0.5 else "B"
                st, j = rest(p["rest"], "PUT", "/v1/models/cath.instr.json/transform", {"translation_mm": [0, 0, Z[which]]})
                if st != 200:
                    raise Failed("PUT transform: %d %r" % (st, j))
                updates.append((j["t_ns"], j["version"], which))
                k += 1
                t_next += 1.0 / 60.0
                pump(max(0.0, t_next - time.monotonic()))
            shows = [shown(fr) for fr in frames]
            if shows.count("A") >= 3 and shows.count("B") >= 3:
                break
        pump(0.5)
        ws.send({"type": "stop", "id": "stop"})
        pump(0.5)
        updates.sort()
        seen = {"A": 0, "B": 0, "C": 0}
        for fr in frames:
            t = u64(fr, OFF_T_EXPOSURE)
            before = [(v, w) for tn, v, w in updates if tn < t]
            want, wv = (before[-1][1], before[-1][0]) if before else ("C", 0)
            got, mo = shown(fr), motion(fr)
            if got != want or mo["xv"] != wv or bool(mo["flags"] & 1) != (wv > 0):
                raise Failed("frame %d (t_exposure %d) shows %s version %d flags %d; the last transform given before "
                             "it is %s version %d" % (u64(fr, 8), t, got, mo["xv"], mo["flags"], want, wv))
            seen[got] += 1
        if seen["A"] < 3 or seen["B"] < 3:
            raise Failed("too few frames to judge: %r of %d frames, %d updates" % (seen, len(frames), len(updates)))
        # POST /v1/render renders the models where the last transform put them
        for which in ("A", "B"):
            st, j = rest(p["rest"], "PUT", "/v1/models/cath.instr.json/transform", {"translation_mm": [0, 0, Z[which]]})
            got = rest_render_shows(p["rest"])
            if st != 200 or got != which:
                raise Failed("POST /v1/render after the transform to %s shows %s" % (which, got))
        print("ok: latch: %d frames (%r), %d transform updates; REST renders follow" % (len(frames), seen, len(updates)))
        ws.close()
        ws = None
        proc.send_signal(signal.SIGTERM)
        if proc.wait(TIMEOUT) != 0:
            raise Failed("xtwin-server exited %d" % proc.returncode)
    except (Failed, OSError, TimeoutError, ValueError, KeyError) as e:
        out.seek(0)
        raise Failed("latch: %s: %s\nserver log:\n%s" % (type(e).__name__, e, out.read()[-3000:]))
    finally:
        if ws:
            ws.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()


def masked(m):
    # t_render_done_ns, t_sent_ns, frames_dropped (48-71) and t_cycle_ns (768): times of the delivery
    m = bytes(m[:48]) + bytes(24) + bytes(m[72:])
    return m[:768] + bytes(8) + m[776:]


def check_replay(xtwin, tmp, log_path, frames):
    """xtwin replay of the session log gives every frame back, motion and blur included."""
    out = os.path.join(tmp, "replay")
    r = subprocess.run([xtwin, "replay", log_path, "--out", out], capture_output=True, text=True, timeout=TIMEOUT * 4)
    if r.returncode != 0:
        raise Failed("xtwin replay exited %d: %s" % (r.returncode, r.stderr))
    for m in frames:
        c = u64(m, 8)
        files = glob.glob(os.path.join(out, "*-%06d-mono.bin" % c))
        if len(files) != 1:
            raise Failed("replay: no single file for frame %d: %s" % (c, files))
        mine = open(files[0], "rb").read()
        if masked(mine) != masked(m):
            i = next((i for i in range(min(len(m), len(mine))) if masked(m)[i] != masked(mine)[i]), None)
            raise Failed("frame %d: the replay differs (lengths %d, %d; first differing byte %s)" % (c, len(m), len(mine), i))
    return len(frames)


def part_phases(server, xtwin, tmp):
    log_path = os.path.join(tmp, "session.jsonl")
    proc, p, out = launch(server, tmp, "phases", [
        "--session-log", log_path, "--clock", "virtual", "--backend", "cpu", "--threads", "2", "--phantom", "none", "--mode", "fd20-128",
        "--fps", "5", "--pixel-format", "float32", "--no-autostart", "--model-root", tmp,
        "--model", os.path.join(tmp, "cath.instr.json")])
    c = None
    try:
        st, j = rest(p["rest"], "PUT", "/v1/motion", {"respiratory": {"period_s": 4, "amplitude_mm": 10},
                                                      "cardiac": {"bpm": 70, "amplitude": 0.1}})
        if st != 200 or not j["cardiac"]["on"] or not j["respiratory"]["on"]:
            raise Failed("PUT /v1/motion: %d %r" % (st, j))
        t0 = j["t0_ns"]
        c = Client(p["ws"], "phases")
        c.until(hello=True)
        c.ws.send({"type": "start", "id": "s"})
        c.until("s")
        got = c.take(12)
        offs, prev, rows_checked = set(), None, 0
        for fr in got:
            mo = motion(fr)
            t_exp, period = u64(fr, OFF_T_EXPOSURE), u64(fr, OFF_PERIOD)
            if mo["flags"] & 6 != 6 or mo["blur"] != 1:
                raise Failed("frame %d: motion flags %d blur %d" % (u64(fr, 8), mo["flags"], mo["blur"]))
            off = round(mo["t_s"] * 1e9) + t0 - t_exp
            if not 0 <= off <= 100_000_000:
                raise Failed("frame %d: motion time %.9f s is %d ns from its exposure" % (u64(fr, 8), mo["t_s"], off))
            offs.add(off)
            if prev is not None and abs(mo["t_s"] - prev - period * 1e-9) > 1e-9:
                raise Failed("frame %d: %.9f s after the last, the period is %d ns" % (u64(fr, 8), mo["t_s"] - prev, period))
            prev = mo["t_s"]
            t = mo["t_s"]
            cp, rp = (t * 70 / 60) % 1.0, (t / 4.0) % 1.0
            want = {"cp": cp, "rp": rp, "scale": 1 - 0.1 * (1 - math.cos(2 * math.pi * cp)) / 2,
                    "resp_mm": 10 * (1 - math.cos(2 * math.pi * rp)) / 2}
            for key, v in want.items():
                if abs(mo[key] - v) > 1e-9:
                    raise Failed("frame %d at %.9f s: %s %.12f, the formula gives %.12f" % (u64(fr, 8), t, key, mo[key], v))
            # the tube (an instrument: it breathes, it does not beat) moved resp_mm caudally
            r = peak_row(fr)
            want_r = project_row(fr, 0.0, 0.0, -mo["resp_mm"])
            if r is None or abs(r - want_r) > 1.0:
                raise Failed("frame %d: the tube peaks at row %r, P puts it at %.2f (resp %.3f mm)" %
                             (u64(fr, 8), r, want_r, mo["resp_mm"]))
            rows_checked += 1
        if len(offs) != 1:
            raise Failed("the pulse offsets differ: %r" % sorted(offs))
        if max(motion(f)["resp_mm"] for f in got) - min(motion(f)["resp_mm"] for f in got) < 3:
            raise Failed("breathing barely moved over %d frames" % len(got))
        # stop: the next frames are still, phases -1
        c.ws.send({"type": "stop", "id": "x"})
        c.until("x")
        st, j = rest(p["rest"], "PUT", "/v1/motion", {"cardiac": {"on": False}, "respiratory": {"on": False}})
        if st != 200 or j["cardiac"]["on"] or j["respiratory"]["on"]:
            raise Failed("motion off: %d %r" % (st, j))
        c.frames = []
        c.ws.send({"type": "start", "id": "s2"})
        c.until("s2")
        still = c.take(3)[-1]
        mo = motion(still)
        if mo["flags"] or mo["cp"] != -1 or mo["rp"] != -1 or mo["scale"] != 1 or mo["resp_mm"] != 0:
            raise Failed("after stop: %r" % mo)
        # blur within the pulse: the frames say how many renders they average
        st, j = rest(p["rest"], "PUT", "/v1/motion", {"respiratory": {"on": True}, "blur_samples": 4})
        if st != 200 or j["blur_samples"] != 4 or not j["respiratory"]["on"] or j["cardiac"]["on"]:
            raise Failed("blur: %d %r" % (st, j))
        c.frames = []
        blurred = c.take(3)[-1]
        mo = motion(blurred)
        if mo["blur"] != 4 or mo["flags"] != 4 or mo["cp"] != -1 or not 0 <= mo["rp"] < 1:
            raise Failed("blurred frame: %r" % mo)
        c.ws.send({"type": "stop", "id": "x2"})
        c.until("x2")
        c.ws.close()
        c = None
        proc.send_signal(signal.SIGTERM)
        if proc.wait(TIMEOUT) != 0:
            raise Failed("xtwin-server exited %d" % proc.returncode)
        nrep = check_replay(xtwin, tmp, log_path, got + [still, blurred]) if xtwin else 0
        print("ok: phases: %d frames on the virtual clock (offset %d ns), tube rows checked %d; %d replayed bit for bit"
              % (len(got), offs.pop(), rows_checked, nrep))
    except (Failed, OSError, TimeoutError, ValueError, KeyError) as e:
        out.seek(0)
        raise Failed("phases: %s: %s\nserver log:\n%s" % (type(e).__name__, e, out.read()[-3000:]))
    finally:
        if c:
            c.ws.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--xtwin", help="also check that xtwin replay gives the frames back from the session log")
    a = ap.parse_args()
    server = os.path.abspath(a.server)
    xtwin = os.path.abspath(a.xtwin) if a.xtwin else None
    tmp = tempfile.mkdtemp(prefix="xtwin-motion-")
    try:
        write_model(tmp)
        part_phases(server, xtwin, tmp)
        part_latch(server, tmp)
    except Failed as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
