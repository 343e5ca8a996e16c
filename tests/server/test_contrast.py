#!/usr/bin/env python3
"""Contrast over the API (issue 26, point 2): an injection given before an exposure shows in that exposure.

    python3 tests/server/test_contrast.py --server PATH [--xtwin PATH]

A CPU server with its default scene (the thorax, whose five blood labels are contrast regions) at
fd20-128, 5 fps, float32 line integrals. Bad injections are refused with one-line 4xx errors
naming the field (limits set by the operator: --contrast-max-rate 25). While the stream runs, 20 mL
at 20 mL/s go into the aorta after a 0.3 s delay. Every frame is then judged from server timestamps
alone: a frame exposed before the injection was accepted carries contrast_seq 0 and no iodine and
the pixels of the first frame; one exposed after carries seq 1 and, as iodine_mg_ml_max, the bolus
model's concentration at its t_exposure_ns, computed here from the closed form for alpha = 3
(P(4, x) = 1 - e^-x (1 + x + x^2/2 + x^3/6)); its line integrals differ from the first frame's by an
amount proportional to that concentration (the same ratio in every frame). A reset (DELETE
/v1/contrast?reset=1) clears the regions from the next exposure on. With --xtwin, the server also
writes its session log, which must hold one "contrast" line per accepted injection and reset, and
`xtwin replay` of it must give every frame back bit for bit but for the delivery times (the
injection re-applied at the same exposure times: docs/session-log.md). Last, a catheter whose
lumen is a contrast region (run_lumen): its iodine against the lumen's bolus in closed form.
Exit 0 passed, 1 failed.
"""
import argparse
import glob
import http.client
import json
import math
import os
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
from test_multi_device import Failed, launch, u64, TIMEOUT  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "golden"))
from record import WS  # noqa: E402

OFF_T_EXPOSURE, OFF_SEQ, OFF_IODINE = 40, 792, 796
N = 128
# the bolus model's defaults (docs/contrast.md) for the aorta
FLOW, ARRIVAL, BETA = 83.0, 0.5, 0.35
RATE, VOLUME, DELAY, AGENT = 20.0, 20.0, 0.3, 350.0


def P4(x):
    return 0.0 if x <= 0 else 1.0 - math.exp(-x) * (1 + x + x * x / 2 + x ** 3 / 6)


def conc(t_ns, t0_ns):
    t = (t_ns - t0_ns) * 1e-9 - ARRIVAL
    T = VOLUME / RATE
    return AGENT * RATE / FLOW * (P4(t / BETA) - P4((t - T) / BETA))


def rest(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    c.request(method, path, json.dumps(body) if body is not None else None,
              {"Content-Type": "application/json"} if body is not None else {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


def pump(ws, frames, timeout):
    """Reads the stream for up to timeout s (less when nothing is buffered or arriving), keeping the
    binary messages (frames) in order."""
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if not ws.buf and (left <= 0 or not select.select([ws.s], [], [], left)[0]):
            return
        is_text, m = ws.recv(TIMEOUT)
        if not is_text:
            frames.append(m)


def pixels(frame):
    hs = struct.unpack_from("<H", frame, 6)[0]
    return struct.unpack_from("<%df" % (N * N), frame, hs)


def masked(m):
    # t_render_done_ns, t_sent_ns, frames_dropped (48-71) and t_cycle_ns (768): times of the delivery
    m = bytes(m[:48]) + bytes(24) + bytes(m[72:])
    return m[:768] + bytes(8) + m[776:]


def check_replay(xtwin, tmp, log_path, frames, want_lines, want_refused):
    """The log's contrast lines, and xtwin replay of it giving every frame back bit for bit."""
    lines = [json.loads(x) for x in open(log_path)]
    ct = [x for x in lines if x["type"] == "contrast"]
    if [(x["action"], x["seq"], len(x["injections"])) for x in ct] != want_lines:
        raise Failed("session log: contrast lines %r" % [(x["action"], x["seq"]) for x in ct])
    refused = [x for x in lines if x["type"] == "command" and x["command"] == "contrast_inject"]
    if len(refused) != want_refused or any(x["result"] == "ok" for x in refused):
        raise Failed("session log: %d refused injections logged, %d expected" % (len(refused), want_refused))
    seqs = {x.get("contrast_seq", 0) for x in lines if x["type"] == "frame"}
    if not set(range(len(want_lines) + 1)) <= seqs:
        raise Failed("session log: frames' contrast_seq %r" % sorted(seqs))
    out = os.path.join(tmp, "replay")
    r = subprocess.run([xtwin, "replay", log_path, "--out", out], capture_output=True, text=True, timeout=TIMEOUT * 4)
    if r.returncode != 0:
        raise Failed("xtwin replay exited %d: %s" % (r.returncode, r.stderr))
    with_iodine = 0
    for m in frames:
        c = u64(m, 8)
        files = glob.glob(os.path.join(out, "*-%06d-mono.bin" % c))
        if len(files) != 1:
            raise Failed("replay: no single file for frame %d: %s" % (c, files))
        mine = open(files[0], "rb").read()
        if masked(mine) != masked(m):
            i = next((i for i in range(min(len(m), len(mine))) if masked(m)[i] != masked(mine)[i]), None)
            raise Failed("frame %d: the replay differs (lengths %d, %d; first differing byte %s)" % (c, len(m), len(mine), i))
        with_iodine += struct.unpack_from("<f", m, OFF_IODINE)[0] > 0
    if not with_iodine:
        raise Failed("replay: no frame with iodine compared")
    return len(frames), with_iodine


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--xtwin", help="also check that xtwin replay gives the frames back from the session log")
    a = ap.parse_args()
    # the virtual clock samples the whole bolus however slow the render (CI, ASan, a busy core); the
    # real clock judges whatever frames a loaded machine makes
    return run(a.server, a.xtwin, "virtual", 4) or run(a.server, a.xtwin, "real", 0) or run_lumen(a.server, a.xtwin)


def run_lumen(server, xtwin):
    """A catheter whose lumen is a contrast region (docs/contrast.md): 5 mL at 5 mL/s through it. The
    lumen's bolus (flow 1 mL/s, no arrival time, an exponential transit of 0.1 s) gives
    c = min(C_a, C_a r / F (e^-(t-T)/beta - e^-t/beta)) (the second term from T on): every frame's
    iodine_mg_ml_max is that at its t_exposure_ns, its line integrals grow in proportion, the frames
    at the cap are equal, and the replay gives them back."""
    tmp = tempfile.mkdtemp(prefix="xtwin-lumen-")
    ok = False
    proc = out = ws = None
    F, BETA_L, R, V = 1.0, 0.1, 5.0, 5.0
    try:
        pts = [[-60.0 + 10 * i, 0.0, 0.0] for i in range(13)]
        with open(os.path.join(tmp, "cath.instr.json"), "w") as f:
            json.dump({"device": "catheter", "medium": "blood", "contrast_lumen": True, "max_points": 64, "points": pts}, f)
        proc, p, out = launch(server, tmp, "lumen", [
            "--backend", "cpu", "--threads", "2", "--mode", "fd20-128", "--fps", "5", "--pixel-format", "float32",
            "--no-autostart", "--clock", "virtual", "--phantom", "none", "--model", os.path.join(tmp, "cath.instr.json")] +
            (["--session-log", os.path.join(tmp, "session.jsonl")] if xtwin else []))
        st, j = rest(p["rest"], "GET", "/v1/contrast")
        regs = j["regions"] if st == 200 else []
        if [(r["name"], r["flow_ml_s"], r["arrival_s"], r["alpha"], r["beta_s"]) for r in regs] != \
                [("cath.instr.json:lumen", F, 0.0, 0.0, BETA_L)]:
            raise Failed("GET /v1/contrast: %d %r" % (st, j))
        ws = WS(p["ws"])
        frames = []

        ws.send({"type": "start", "id": "start"})
        t_give_up = time.monotonic() + 120
        while len(frames) < 2 and time.monotonic() < t_give_up:
            pump(ws, frames, 0.2)
        st, inj = rest(p["rest"], "POST", "/v1/contrast/inject", {"region": "cath.instr.json:lumen", "rate_ml_s": R, "volume_ml": V})
        if st != 200:
            raise Failed("inject: %d %r" % (st, inj))
        t0 = inj["t_start_ns"]
        while time.monotonic() < t_give_up:
            pump(ws, frames, 0.2)
            if frames and u64(frames[-1], OFF_T_EXPOSURE) > t0 + int(2e9):
                break
        ws.send({"type": "stop", "id": "stop"})
        pump(ws, frames, 0.5)

        def want(t_ns):
            t = (t_ns - t0) * 1e-9
            if t <= 0:
                return 0.0
            h = 1 - math.exp(-t / BETA_L) - (1 - math.exp(-(t - V / R) / BETA_L) if t > V / R else 0.0)
            return min(AGENT, AGENT * R / F * h)

        base = pixels(frames[0])
        capped, ratios = None, []
        for fr in frames:
            t = u64(fr, OFF_T_EXPOSURE)
            seq, mg = struct.unpack_from("<If", fr, OFF_SEQ)
            px = pixels(fr)
            w = want(t) if seq == 1 else 0.0
            if abs(mg - w) > 2e-6 * w + 1e-5:
                raise Failed("frame %d at %.3f s: %.7g mg/mL, the lumen's bolus %.7g" % (u64(fr, 8), (t - t0) * 1e-9, mg, w))
            if w == 0.0:
                if px != base:
                    raise Failed("frame %d: no iodine, pixels differ" % u64(fr, 8))
                continue
            if w == AGENT:
                if capped is not None and px != capped:
                    raise Failed("frame %d: at the cap, pixels differ from the first capped frame" % u64(fr, 8))
                capped = px
            if w > 2.0:  # below, the float frames' rounding is no longer small against the change
                ratios.append(sum(x - y for x, y in zip(px, base)) / w)
        if capped is None or len(ratios) < 3:
            raise Failed("too few frames with iodine in the lumen: %d (%s at the cap)" % (len(ratios), capped is not None))
        r0 = max(ratios)
        if not r0 > 0 or any(abs(r - r0) > 1e-3 * r0 for r in ratios):
            raise Failed("line integrals per mg/mL not constant: %r" % ratios)
        ws.close()
        ws = None
        proc.send_signal(signal.SIGTERM)
        if proc.wait(TIMEOUT) != 0:
            raise Failed("xtwin-server exited %d" % proc.returncode)
        msg = ""
        if xtwin:
            n, k = check_replay(xtwin, tmp, os.path.join(tmp, "session.jsonl"), frames, [("inject", 1, 1)], 0)
            msg = "; xtwin replay gives the %d frames back bit for bit" % n
        print("ok (lumen): %d frames with iodine in the catheter's lumen, at the cap %d%s" %
              (len(ratios), sum(1 for fr in frames if struct.unpack_from("<f", fr, OFF_IODINE)[0] == AGENT), msg))
        ok = True
    except (Failed, OSError, TimeoutError, ValueError, KeyError, TypeError) as e:
        log = ""
        if out:
            out.seek(0)
            log = out.read()[-3000:]
        print("FAIL (lumen): %s: %s\nserver log:\n%s" % (type(e).__name__, e, log))
    finally:
        if ws:
            ws.close()
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        if out:
            out.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


def run(server, xtwin, clock, min_during):
    tmp = tempfile.mkdtemp(prefix="xtwin-contrast-")
    ok = False
    proc = out = ws = None
    try:
        proc, p, out = launch(server, tmp, "contrast", [
            "--backend", "cpu", "--threads", "2", "--mode", "fd20-128", "--fps", "5", "--pixel-format", "float32",
            "--no-autostart", "--contrast-max-rate", "25", "--clock", clock] +
            (["--session-log", os.path.join(tmp, "session.jsonl")] if xtwin else []))
        st, j = rest(p["rest"], "GET", "/v1/contrast")
        names = [r["name"] for r in j["regions"]]
        if st != 200 or names != ["heart", "aorta", "pulmonary", "veins", "coronary"] or j["seq"] != 0:
            raise Failed("GET /v1/contrast: %d %r" % (st, j))
        for body, want, word in (({"region": "nope", "rate_ml_s": 5, "volume_ml": 10}, 404, "nope"),
                                 ({"region": "aorta", "rate_ml_s": 30, "volume_ml": 10}, 400, "limit"),
                                 ({"region": "aorta", "rate_ml_s": 5}, 400, "two of"),
                                 ({"region": "aorta", "rate_ml_s": 5, "volume_ml": 10, "duration_s": 3}, 400, "volume_ml"),
                                 ({"region": "aorta", "rate_ml_s": -5, "volume_ml": 10}, 400, "> 0"),
                                 ({"region": "aorta", "rate_ml_s": 5, "volume_ml": 10, "delay_s": 99}, 400, "delay_s"),
                                 ({"region": "aorta", "rate_ml_s": "5", "volume_ml": 10}, 400, "rate_ml_s"),
                                 ({"region": "aorta", "rate_ml_s": 5, "volume_ml": 10, "speed": 1}, 400, "speed"),
                                 ([1, 2], 400, "object")):
            st, j = rest(p["rest"], "POST", "/v1/contrast/inject", body)
            msg = (j or {}).get("error", {}).get("message", "")
            if st != want or word not in msg or "\n" in msg:
                raise Failed("POST /v1/contrast/inject %r: %d %r (want %d naming %r)" % (body, st, j, want, word))
        ws = WS(p["ws"])
        frames = []

        ws.send({"type": "start", "id": "start"})
        t_give_up = time.monotonic() + 60
        while len(frames) < 3 and time.monotonic() < t_give_up:
            pump(ws, frames, 0.2)
        st, inj = rest(p["rest"], "POST", "/v1/contrast/inject",
                       {"region": "aorta", "rate_ml_s": RATE, "volume_ml": VOLUME, "delay_s": DELAY})
        if st != 200 or inj["seq"] != 1 or abs(inj["duration_s"] - 1.0) > 1e-12:
            raise Failed("inject: %d %r" % (st, inj))
        t_acc, t0 = inj["t_ns"], inj["t_start_ns"]
        if t0 - t_acc != int(DELAY * 1e9):
            raise Failed("inject: start %d ns after acceptance, not the delay" % (t0 - t_acc))
        # frames until the bolus has passed its peak (a slow, sanitised server gets longer in real time)
        t_end = t0 + int(4e9)
        while time.monotonic() < t_give_up + 120:
            pump(ws, frames, 0.2)
            if frames and u64(frames[-1], OFF_T_EXPOSURE) > t_end:
                break
        st, rs = rest(p["rest"], "DELETE", "/v1/contrast?reset=1")
        if st != 200 or rs["seq"] != 2:
            raise Failed("reset: %d %r" % (st, rs))
        n0 = len(frames)
        while len(frames) < n0 + 3 and time.monotonic() < t_give_up + 240:
            pump(ws, frames, 0.2)
        ws.send({"type": "stop", "id": "stop"})
        pump(ws, frames, 0.5)

        base = pixels(frames[0])
        ratios, before, during, after, latched = [], 0, 0, 0, 0
        for fr in frames:
            t = u64(fr, OFF_T_EXPOSURE)
            seq, mg = struct.unpack_from("<If", fr, OFF_SEQ)
            px = pixels(fr)
            if t == t_acc:  # latched at the injection's own instant (the virtual clock): either state, no iodine yet
                if seq not in (0, 1) or mg != 0.0 or px != base:
                    raise Failed("frame %d exposed at the injection's instant: seq %d, %g mg/mL" % (u64(fr, 8), seq, mg))
                continue
            if t < t_acc:
                if seq != 0 or mg != 0.0 or px != base:
                    raise Failed("frame %d exposed before the injection: seq %d, %g mg/mL, pixels %s" %
                                 (u64(fr, 8), seq, mg, "as the first" if px == base else "differ"))
                before += 1
                continue
            if t == rs["t_ns"] and seq == 2:  # latched at the reset's own instant (the virtual clock)
                if mg != 0.0 or px != base:
                    raise Failed("frame %d at the reset's instant: %g mg/mL" % (u64(fr, 8), mg))
                continue
            if t > rs["t_ns"]:
                if seq != 2 or mg != 0.0 or px != base:
                    raise Failed("frame %d after the reset: seq %d, %g mg/mL" % (u64(fr, 8), seq, mg))
                after += 1
                continue
            if t < t_acc or seq != 1:
                raise Failed("frame %d exposed %d ns after the injection: seq %d" % (u64(fr, 8), t - t_acc, seq))
            latched += 1
            want = conc(t, t0)
            if abs(mg - want) > 2e-6 * want + 1e-5:
                raise Failed("frame %d at %.3f s after the start: %.7g mg/mL, the bolus model %.7g" %
                             (u64(fr, 8), (t - t0) * 1e-9, mg, want))
            d = sum(x - y for x, y in zip(px, base))
            if want > 2.0:
                ratios.append(d / want)
                during += 1
            elif want == 0.0 and px != base:
                raise Failed("frame %d: no iodine yet, pixels differ" % u64(fr, 8))
        if before < 1 or latched < 1 or during < min_during or after < 1:
            raise Failed("%s clock: too few frames to judge: %d before, %d after the injection (%d with iodine), %d "
                         "after the reset" % (clock, before, latched, during, after))
        r0 = sorted(ratios)[len(ratios) // 2] if ratios else 0
        if ratios and not r0 > 0 or any(abs(r - r0) > 1e-3 * r0 for r in ratios):
            raise Failed("line integrals per mg/mL not constant: %r" % ratios)
        print("ok (%s clock): %d frames before, %d with iodine (up to %.1f mg/mL), %d after the reset" %
              (clock, before, during, max(conc(u64(f, OFF_T_EXPOSURE), t0) for f in frames), after))
        ws.close()
        ws = None
        proc.send_signal(signal.SIGTERM)
        if proc.wait(TIMEOUT) != 0:
            raise Failed("xtwin-server exited %d" % proc.returncode)
        if xtwin:
            # the eight refused objects (the array never reaches the handler: the body parser refuses it)
            n, k = check_replay(xtwin, tmp, os.path.join(tmp, "session.jsonl"), frames,
                                [("inject", 1, 1), ("reset", 2, 0)], 8)
            print("ok (%s clock): xtwin replay gives the %d frames back bit for bit (%d with iodine)" % (clock, n, k))
        ok = True
    except (Failed, OSError, TimeoutError, ValueError, KeyError, TypeError) as e:
        log = ""
        if out:
            out.seek(0)
            log = out.read()[-3000:]
        print("FAIL (%s clock): %s: %s\nserver log:\n%s" % (clock, type(e).__name__, e, log))
    finally:
        if ws:
            ws.close()
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        if out:
            out.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
