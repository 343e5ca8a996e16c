#!/usr/bin/env python3
"""Fault injection (issue 24, point 5; docs/device.md "Faults"): every fault POSTed to
/v1/faults/<name> is observable where a real system would show it: the frames' fault_flags and
pixels (a dropped frame's counter gap, a late frame's t_render_done_ns, a dead line or cluster
that the processing does not interpolate, a drifted gain, a stale calibration's fixed pattern, the
generator's actual kV), the stream's events, GET /v1/device and GET /v1/faults, /metrics; bad bodies
answer 400 naming the field.

    python3 tests/server/test_faults_inject.py --server PATH

The server runs on the virtual clock (--clock virtual) with lockstep triggers: device time stands
still while a frame is rendered and sent, so every time checked is exact and the server's own, and
nothing depends on how fast the machine is (ASan, the other core busy). The chain runs without
noise, lag or filters, so two frames of the same pose differ only by what a fault did.
Standard library only. Exit 0 passed, 1 failed.
"""
import argparse
import os
import shutil
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_device import Server, Stream, Failed, check, u64, TIMEOUT, MS  # noqa: E402
import test_device  # noqa: E402

test_device.SERVER_ARGS = ["--backend", "cpu", "--threads", "2", "--phantom-dim", "64", "--phantom-spacing", "3",
                           "--mode", "fd20-128", "--fps", "10", "--no-autostart", "--chain", "--run-mode", "lockstep",
                           "--clock", "virtual"]
CHAIN = {"seed": 4711, "panel_seed": 20, "quantum_noise": 0, "e_noise_adu": 0, "lag": 0, "temporal_alpha": 1,
         "edge_gain": 0, "drc": 0}
OFF_DONE, OFF_SENT, OFF_DROPPED, OFF_ROWS, OFF_COLS, OFF_KV, OFF_FAULTS = 48, 56, 64, 72, 76, 328, 572
F_LATE, F_LINE, F_CLUSTER, F_GAIN, F_STALE, F_GEN, F_HEAT, F_AFTER_DROP = 1, 2, 4, 8, 16, 32, 64, 128


def flags(m):
    return struct.unpack_from("<I", m, OFF_FAULTS)[0]


def pixels(m):
    rows, cols = struct.unpack_from("<II", m, OFF_ROWS)
    hs = struct.unpack_from("<H", m, 6)[0]  # header_size: the pixels follow it, whatever the version
    return rows, cols, struct.unpack_from("<%dH" % (rows * cols), m, hs)


class Pair:
    """Two stream clients, one on the raw frames and one on the processed, and lockstep triggers."""

    def __init__(self, srv):
        self.srv = srv
        self.raw, self.proc = Stream(srv.ws), Stream(srv.ws)
        for s in (self.raw, self.proc):
            s.until(lambda s=s: s.hello, "the hello")
        self.proc.ws.send({"type": "frames", "frames": "processed", "id": "p"})
        self.proc.until(lambda: "p" in self.proc.acks, "the frames ack")

    def frame(self, stream, counter):
        """The frame with this counter (earlier ones are discarded; a later one fails: it was skipped)."""
        stream.until(lambda: stream.frames, "frame %d" % counter)
        m = stream.frames.pop(0)  # lockstep: every trigger answered, in order; a dropped frame never comes
        check(u64(m, 8) == counter, "frame %d expected, %d came" % (counter, u64(m, 8)))
        return m

    def trigger(self):
        """One exposure: (counter, raw frame, processed frame)."""
        k = self.srv.ok("POST", "/v1/acquisition/trigger")["frame"]
        return k, self.frame(self.raw, k), self.frame(self.proc, k)


def metric(srv, name):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", srv.rest, timeout=TIMEOUT)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise Failed("/metrics lacks %s" % name)


def active(srv, name):
    return next((f for f in srv.ok("GET", "/v1/faults")["active"] if f["name"] == name), None)


def test_bad_bodies(srv, p):
    for name, body, field in (("late_frame", {}, "ms"), ("late_frame", {"ms": -1}, "ms"), ("drop_frame", {"n": 1}, "n"),
                              ("dead_line", {"col": 1.5}, "col"), ("tube_heat", {"seconds": "x"}, "seconds"),
                              ("generator_fault", {"kv_error_percent": 0}, "kv_error_percent")):
        st, j = srv.call("POST", "/v1/faults/" + name, body)
        check(st == 400 and j["error"]["name"] == "INVAL" and field in j["error"]["message"],
              "%s %r: %d %r, want 400 naming %s" % (name, body, st, j, field))
    st, j = srv.call("POST", "/v1/faults/dead_line", {"col": 1, "row": 2})
    check(st == 400, "dead_line with col and row: %d" % st)
    st, j = srv.call("POST", "/v1/faults/melted_anode", {})
    check(st == 404, "an unknown fault: %d" % st)
    st, j = srv.call("POST", "/v1/faults/abort_exposure")
    check(st == 409 and j["error"]["name"] == "STATE", "abort_exposure with nothing running: %d %r" % (st, j))
    check(srv.ok("GET", "/v1/faults")["active"] == [], "a refused fault left something active")
    check(len(srv.ok("GET", "/v1/faults")["known"]) == 11, "GET /v1/faults: the known faults")


def start(srv, p):
    srv.ok("POST", "/v1/acquisition/start")


def test_drop_and_late(srv, p):
    start(srv, p)
    k0, r0, _ = p.trigger()
    check(flags(r0) == 0, "a frame without faults: fault_flags %d" % flags(r0))
    srv.ok("POST", "/v1/faults/drop_frame", {"count": 1})
    check(p.raw.event("fault", fault="drop_frame")["args"] == {"count": 1}, "the drop_frame event")
    check(active(srv, "drop_frame")["left"] == 1, "GET /v1/faults: drop_frame left")
    k1 = srv.ok("POST", "/v1/acquisition/trigger")["frame"]
    k2, r2, q2 = p.trigger()  # in order: had k1 been published it would have come first
    check(k2 == k1 + 1 and flags(r2) == F_AFTER_DROP and flags(q2) == F_AFTER_DROP,
          "the frame after the drop: counter %d after %d, flags %d" % (k2, k1, flags(r2)))
    check(metric(srv, "xtwin_frames_fault_dropped_total") == 1, "/metrics: frames dropped")
    check(metric(srv, 'xtwin_faults_injected_total{name="drop_frame"}') == 1, "/metrics: drop_frame injected")
    srv.ok("POST", "/v1/faults/late_frame", {"ms": 300})
    k, r, q = p.trigger()
    late = u64(r, OFF_DONE) - u64(r, 40)
    check(flags(r) & F_LATE and late == 300 * MS and u64(q, OFF_DONE) == u64(r, OFF_DONE),
          "late frame: flags %d, t_render_done - t_exposure %d ns, want 300 ms" % (flags(r), late))
    check(u64(r, OFF_SENT) >= u64(r, OFF_DONE), "a late frame sent before it was ready")
    k, r, q = p.trigger()
    check(flags(r) == 0 and u64(r, OFF_DONE) == u64(r, 40), "the frame after the late one: flags %d" % flags(r))
    check(metric(srv, "xtwin_frames_late_total") == 1, "/metrics: frames late")


def test_panel(srv, p):
    _, r0, q0 = p.trigger()
    rows, cols, b_raw = pixels(r0)
    _, _, b_proc = pixels(q0)
    # a dead column: raw reads the offset there (no signal), the processing does not know it (not in the
    # defect map: no interpolation), every other pixel untouched
    srv.ok("POST", "/v1/faults/dead_line", {"col": 10})
    _, r, q = p.trigger()
    _, _, raw = pixels(r)
    _, _, proc = pixels(q)
    check(flags(r) == F_LINE and flags(q) == F_LINE, "dead line flags %d" % flags(r))
    diff = {i % cols for i in range(rows * cols) if raw[i] != b_raw[i]}
    check(diff == {10}, "dead column 10: raw differs in columns %r" % sorted(diff)[:8])
    check(all(raw[y * cols + 10] < b_raw[y * cols + 10] for y in range(rows)), "a dead column reads above the signal")
    check(any(proc[y * cols + 10] != b_proc[y * cols + 10] for y in range(rows)), "a dead column interpolated away")
    srv.ok("DELETE", "/v1/faults")
    p.raw.event("fault", fault="clear")
    _, r, _ = p.trigger()
    check(flags(r) == 0 and pixels(r)[2] == b_raw, "DELETE /v1/faults left the panel faulty")
    srv.ok("POST", "/v1/faults/dead_line", {"row": 5, "count": 2})
    _, r, _ = p.trigger()
    _, _, raw = pixels(r)
    check({i // cols for i in range(rows * cols) if raw[i] != b_raw[i]} == {5, 6}, "dead rows 5, 6")
    srv.ok("DELETE", "/v1/faults")
    # a cluster: the pixels within the radius
    srv.ok("POST", "/v1/faults/pixel_cluster", {"col": 30, "row": 20, "radius": 2})
    _, r, _ = p.trigger()
    _, _, raw = pixels(r)
    want = {(y, x) for y in range(rows) for x in range(cols) if (x - 30) ** 2 + (y - 20) ** 2 <= 4}
    got = {(i // cols, i % cols) for i in range(rows * cols) if raw[i] != b_raw[i]}
    check(flags(r) == F_CLUSTER and got == want, "cluster: flags %d, %d pixels differ, want %d" % (flags(r), len(got), len(want)))
    srv.ok("DELETE", "/v1/faults")
    # gain drift: +10 % now; the processed frame (calibrated with the old gain) shifts
    srv.ok("POST", "/v1/faults/gain_drift", {"percent": 10})
    check(abs(active(srv, "gain_drift")["percent_now"] - 10) < 1e-9, "GET /v1/faults: gain drift now")
    _, r, q = p.trigger()
    _, _, raw = pixels(r)
    _, _, proc = pixels(q)
    check(flags(r) == F_GAIN and all(a >= b for a, b in zip(raw, b_raw)) and sum(raw) > sum(b_raw) * 1.01,
          "gain drift +10 %%: flags %d, raw mean %.1f vs %.1f" % (flags(r), sum(raw) / len(raw), sum(b_raw) / len(raw)))
    check(proc != b_proc, "gain drift invisible in the processed frame")
    srv.ok("DELETE", "/v1/faults")
    # a stale calibration: a fixed pattern left by the correction, the same in every frame
    srv.ok("POST", "/v1/faults/stale_calibration", {"offset_adu": 40, "gain_percent": 3})
    _, r1, q1 = p.trigger()
    _, r2, q2 = p.trigger()
    _, _, p1 = pixels(q1)
    check(flags(q1) == F_STALE and p1 != b_proc and pixels(q2)[2] == p1 and pixels(r2)[2] == pixels(r1)[2],
          "stale calibration: flags %d, its pattern fixed" % flags(q1))
    ndiff = sum(1 for a, b in zip(p1, b_proc) if a != b)
    check(ndiff > len(p1) // 4, "stale calibration: only %d of %d processed pixels show it" % (ndiff, len(p1)))
    srv.ok("DELETE", "/v1/faults")


def device(srv):
    return srv.ok("GET", "/v1/device")


def test_generator(srv, p):
    _, r0, _ = p.trigger()
    kv0 = struct.unpack_from("<d", r0, OFF_KV)[0]
    srv.ok("POST", "/v1/faults/generator_fault", {"kv_error_percent": 3})
    _, r, q = p.trigger()
    kv = struct.unpack_from("<d", r, OFF_KV)[0]
    check(flags(r) == F_GEN and abs(kv - kv0 * 1.03) < 1e-9 and pixels(r)[2] != pixels(r0)[2],
          "within tolerance: flags %d, kv %g (nominal %g)" % (flags(r), kv, kv0))
    check(active(srv, "generator_fault")["tripped"] is False, "within tolerance: tripped")
    srv.ok("DELETE", "/v1/faults")
    srv.ok("POST", "/v1/faults/generator_fault", {"kv_error_percent": -12})
    e = p.raw.event("state", state="fault")
    d = device(srv)
    check(e["fault"]["code"] == 210 and d["state"] == "fault" and d["fault"]["code"] == 210
          and "-12.0 %" in d["fault"]["text"], "a generator trip: %r" % d["fault"])
    check(active(srv, "generator_fault")["tripped"] is True, "GET /v1/faults: tripped")
    st, j = srv.call("POST", "/v1/acquisition/trigger")
    check(st != 200, "a trigger exposed through a generator trip")
    p.raw.events.clear()
    srv.ok("POST", "/v1/device/reset")
    start(srv, p)
    _, r, _ = p.trigger()
    check(flags(r) == 0 and struct.unpack_from("<d", r, OFF_KV)[0] == kv0, "after the reset: flags %d" % flags(r))


def test_abort_and_over_temperature(srv, p):
    check(device(srv)["exposing"], "not exposing before the abort")
    srv.ok("POST", "/v1/faults/abort_exposure")
    e = p.raw.event("state", state="fault")
    check(e["from"] == "exposing" and e["fault"]["code"] == 250, "abort: %r" % e)
    check(not srv.ok("GET", "/v1/acquisition")["running"], "an aborted run still running")
    p.raw.events.clear()
    srv.ok("POST", "/v1/device/reset")
    # over temperature: not ready for 0.5 s of device time, then ready by itself (no reset). On the
    # virtual clock an idle device's time jumps to that deadline at once, so the refusals in between
    # are test_device's (fault_recovers_by_itself); here the fault and its end, to the nanosecond.
    srv.ok("POST", "/v1/faults/over_temperature", {"seconds": 0.5})
    e = p.raw.event("state", state="fault")
    check(e["fault"]["code"] == 310 and e["cause"] == "fault", "over temperature: %r" % e)
    r = p.raw.event("state", state="ready", cause="time")
    check(r["t_ns"] == e["t_ns"] + 500 * MS and r["from"] == "fault",
          "recovered at %d, want %d" % (r["t_ns"], e["t_ns"] + 500 * MS))
    check(device(srv)["fault"] is None and active(srv, "over_temperature") is None, "still over temperature")
    check(metric(srv, 'xtwin_faults_injected_total{name="over_temperature"}') == 1, "/metrics: over_temperature")
    p.raw.events.clear()


def fluoro_frames(p, n):
    """n more raw frames of a pedal exposure (free run, 10 fps of device time)."""
    p.raw.until(lambda: len(p.raw.frames) >= n, "%d frames" % n)
    out, p.raw.frames = p.raw.frames[:n], p.raw.frames[n:]
    return out


def test_tube_heat(srv, p):
    srv.ok("POST", "/v1/faults/tube_heat", {"seconds": 0.3})
    e = p.raw.event("fault", fault="tube_heat")
    until = e["t_ns"] + 300 * MS
    st, j = srv.call("POST", "/v1/device/expose")
    check(st == 409 and j["error"]["name"] == "STATE" and "heat limit" in j["error"]["message"],
          "expose while the tube is hot: %d %r" % (st, j))
    p.raw.frames.clear()
    srv.ok("POST", "/v1/device/fluoro")  # fluoroscopy goes on
    fr = fluoro_frames(p, 8)
    hot = [bool(flags(m) & F_HEAT) for m in fr]
    want = [u64(m, 40) < until for m in fr]
    check(hot == want and any(hot) and not all(hot), "tube heat bits %r, want %r" % (hot, want))
    srv.ok("POST", "/v1/device/release")
    p.raw.event("lih")
    check(device(srv)["t_ns"] >= until, "device time did not pass the heat limit")
    srv.ok("POST", "/v1/device/expose")  # allowed again
    srv.ok("POST", "/v1/device/release")
    p.raw.events.clear()
    p.raw.event("state", state="ready")


def test_link_loss(srv, p):
    p.raw.frames.clear()
    srv.ok("POST", "/v1/device/fluoro")
    first = fluoro_frames(p, 2)
    lost0 = u64(first[-1], OFF_DROPPED)
    srv.ok("POST", "/v1/faults/link_loss", {"seconds": 0.5})
    t = p.raw.event("fault", fault="link_loss")["t_ns"]
    end = t + 500 * MS
    fr = []
    while not fr or u64(fr[-1], OFF_SENT) < end:
        fr += fluoro_frames(p, 1)
    inside = [u64(m, OFF_SENT) for m in fr if t < u64(m, OFF_SENT) < end]
    check(not inside, "frames sent while the link was down: %r" % inside)
    after = fr[-1]
    check(u64(after, OFF_DROPPED) - lost0 >= 3 and u64(after, 8) - u64(first[-1], 8) > len(fr),
          "after the link loss: frames_dropped %d -> %d" % (lost0, u64(after, OFF_DROPPED)))
    check(metric(srv, "xtwin_frames_link_lost_total") >= 3, "/metrics: frames lost on the link")
    srv.ok("POST", "/v1/device/release")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="xt-faults-")
    srv = None
    failed = 0
    try:
        srv = Server(args.server, tmp)
        p = Pair(srv)
        srv.ok("PUT", "/v1/acquisition", {"chain": CHAIN})
        for t in (test_bad_bodies, test_drop_and_late, test_panel, test_generator, test_abort_and_over_temperature,
                  test_tube_heat, test_link_loss):
            try:
                t(srv, p)
                print("ok   %s" % t.__name__)
            except (Failed, TimeoutError, OSError, ValueError, KeyError, TypeError) as e:
                failed += 1
                print("FAIL %s: %s" % (t.__name__, e))
                break  # the device's state is unknown now: the later tests would only echo this
        for s in (p.raw, p.proc):
            s.ws.s.close()
        srv.stop()
        srv = None
    except (Failed, OSError, TimeoutError) as e:
        failed += 1
        print("FAIL: %s" % e)
    finally:
        if srv is not None and srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait()
        if failed:
            try:
                with open(os.path.join(tmp, "server.log")) as f:
                    print("server log:\n" + f.read()[-4000:])
            except OSError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
