#!/usr/bin/env python3
"""The device state machine over REST and the stream (docs/device.md): a fluoroscopy pedal press
goes prepare -> exposing after the prepare time, frames come only while exposing, the first
exposure is due exactly at press + prepare time; release -> readout -> ready after the mode's
readout time with a last-image-hold event naming the last frame; a multiphase series steps through
its phases at their own rates and ends on its own; refused commands answer 409 STATE naming the
state (REST and the stream); radiation disable refuses exposures and the API's start; a fault
during exposing stops the frames.

    python3 tests/server/test_device.py --server PATH

Every time is the server's own (the device clock: event t_ns, GET /v1/device, the frame headers),
never the client's: a busy machine (ASan, the other core loaded) only makes it slower. Standard
library only (record.py's WebSocket client). Exit 0 passed, 1 failed.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "golden"))
from record import WS  # noqa: E402

SERVER_ARGS = ["--backend", "cpu", "--threads", "2", "--phantom-dim", "64", "--phantom-spacing", "3", "--mode", "fd20-128",
               "--fps", "10", "--no-autostart"]
TIMEOUT = 120  # seconds for any one message (ASan builds on a busy machine)
MS = 1000000
OFF_COUNTER, OFF_SCHED, OFF_EXPOSURE = 8, 32, 40  # api/xt_stream.h


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def u64(msg, off):
    return struct.unpack_from("<Q", msg, off)[0]


class Server:
    def __init__(self, binary, tmp):
        ports = os.path.join(tmp, "ports.json")
        self.log = open(os.path.join(tmp, "server.log"), "w+")
        self.proc = subprocess.Popen([binary, "--rest-port", "0", "--ws-port", "0", "--ports-file", ports] + SERVER_ARGS,
                                     cwd=tmp, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise Failed("xtwin-server exited %d at start" % self.proc.returncode)
            try:
                with open(ports) as f:
                    p = json.load(f)
                break
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    raise Failed("xtwin-server did not start")
                time.sleep(0.02)
        self.rest, self.ws = p["rest"], p["ws"]

    def call(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.rest, timeout=TIMEOUT)
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = c.getresponse()
        out = r.read()
        c.close()
        return r.status, json.loads(out)

    def ok(self, method, path, body=None):
        st, j = self.call(method, path, body)
        check(st == 200, "%s %s: %d %r" % (method, path, st, j))
        return j

    def refused(self, method, path, state, body=None, why=""):
        """409 with the server's JSON error body, naming the command and the state."""
        st, j = self.call(method, path, body)
        cmd = path.rsplit("/", 1)[1]
        want = "device: '%s' not allowed in state %s%s" % (cmd, state, why)
        check(st == 409 and j.get("error", {}).get("name") == "STATE" and j["error"].get("status") == 409
              and j["error"].get("message", "").startswith(want), "%s %s: %d %r, want 409 '%s'" % (method, path, st, j, want))
        return j

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(TIMEOUT)
        self.log.close()
        check(rc == 0, "xtwin-server exited %d" % rc)


class Stream:
    """The stream's frames and texts, in arrival order."""

    def __init__(self, port):
        self.ws, self.frames, self.events, self.acks, self.hello = WS(port), [], [], {}, None

    def pump(self, timeout=TIMEOUT):
        is_text, msg = self.ws.recv(timeout)
        if not is_text:
            self.frames.append(msg)
            return
        j = json.loads(msg)
        if j.get("type") == "event":
            self.events.append(j)
        elif j.get("type") == "ack":
            self.acks[j.get("id")] = j
        elif j.get("type") == "hello":
            self.hello = j

    def until(self, pred, what):
        deadline = time.monotonic() + TIMEOUT
        while not pred():
            left = deadline - time.monotonic()
            check(left > 0, "stream: no %s within %d s" % (what, TIMEOUT))
            self.pump(left)

    def event(self, kind, **fields):
        """The first event of kind with these fields, waiting for it."""
        def find():
            return next((e for e in self.events if e["event"] == kind and all(e.get(k) == v for k, v in fields.items())),
                        None)
        self.until(lambda: find() is not None, "%s event %r" % (kind, fields))
        return find()

    def drain(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                self.pump(max(0.01, end - time.monotonic()))
            except TimeoutError:
                break

    def take(self):
        out = (self.frames, self.events)
        self.frames, self.events = [], []
        return out


def states(events):
    return [(e["state"], e["t_ns"]) for e in events if e["event"] == "state"]


# ---- the tests ---------------------------------------------------------------------------------

def test_fluoro(srv, st):
    """press -> prepare -> exposing (exactly press + prepare) -> frames -> release -> readout -> ready + lih."""
    dev = srv.ok("GET", "/v1/device")
    check(dev["state"] == "ready" and not dev["exposing"], "at start: %r" % dev)
    st.drain(0.3)
    check(not st.frames, "%d frames before any switch was pressed (--no-autostart)" % len(st.frames))
    lat = dev["latency"]["fluoro"]
    prep, first, readout = (round(lat[k] * MS) for k in ("prepare_ms", "first_frame_ms", "readout_ms"))
    check(readout == round(16.7 * MS), "readout %d ns: fd20-128's is 16.7 ms" % readout)
    d = srv.ok("POST", "/v1/device/fluoro")
    check(d["state"] == "prepare" and d["switch_held"] == "fluoro", "pressed: %r" % d)
    tp = d["t_press_ns"]
    srv.refused("POST", "/v1/device/fluoro", "prepare")
    st.until(lambda: len(st.frames) >= 3, "3 frames while the pedal is held")
    d = srv.ok("POST", "/v1/device/release")
    check(d["state"] == "readout", "released: %r" % d)
    tr = d["t_state_ns"]
    lih = st.event("lih")
    st.until(lambda: any(u64(f, OFF_COUNTER) == lih["frame"] for f in st.frames), "the frame the LIH holds")
    st.drain(0.3)
    frames, events = st.take()
    seq = states(events)
    want = [("prepare", tp), ("exposing", tp + prep), ("readout", tr), ("ready", tr + readout)]
    check(seq == want, "state events %r, want %r" % (seq, want))
    check(lih["t_ns"] == tr + readout, "lih at %d, want %d" % (lih["t_ns"], tr + readout))
    on = tp + prep
    T = 100 * MS  # 10 fps
    counters = [u64(f, OFF_COUNTER) for f in frames]
    for f in frames:
        sched, exp = u64(f, OFF_SCHED), u64(f, OFF_EXPOSURE)
        check(sched >= on + first and (sched - on - first) % T == 0,
              "frame %d due %+.3f ms after X-ray on: not on the 10 fps grid from press + prepare" % (
                  u64(f, OFF_COUNTER), (sched - on) / 1e6))
        check(sched <= exp <= tr, "frame %d exposed at %d, outside [due %d, release %d]" % (u64(f, OFF_COUNTER), exp, sched, tr))
    check(min(u64(f, OFF_SCHED) for f in frames) >= tp + prep, "a frame exposed before press + prepare")
    check(lih["frame"] == max(counters), "lih holds frame %d, the last exposed is %d" % (lih["frame"], max(counters)))
    d = srv.ok("GET", "/v1/device")
    check(d["state"] == "ready" and d["lih"] == {"frame": lih["frame"]} and d["switch_held"] == "none", "after: %r" % d)
    print("  fluoro: X-ray on at press + %.1f ms, %d frames, readout %.1f ms, LIH frame %d" % (
        prep / 1e6, len(frames), readout / 1e6, lih["frame"]))


def test_refused(srv, st):
    """Commands the state does not allow: 409 STATE naming the state, REST and stream alike; the
    machine unchanged."""
    before = srv.ok("GET", "/v1/device")
    srv.refused("POST", "/v1/device/power_on", "ready")
    srv.refused("POST", "/v1/device/reset", "ready")
    srv.refused("POST", "/v1/device/release", "ready", why=" (no switch is held)")
    st.ws.send({"type": "device", "command": "reset", "id": "r1"})
    st.until(lambda: "r1" in st.acks, "the nack")
    a = st.acks.pop("r1")
    e = a.get("error", {})
    check(not a["ok"] and e.get("name") == "STATE" and e.get("status") == 409
          and e.get("message") == "device: 'reset' not allowed in state ready", "stream nack: %r" % a)
    st.ws.send({"type": "device", "command": "launch", "id": "r2"})
    st.until(lambda: "r2" in st.acks, "the nack")
    check(st.acks.pop("r2")["error"]["name"] == "INVAL", "an unknown device command")
    st_, j = srv.call("POST", "/v1/device/expose", {"phases": [{"duration_s": 1, "fps": 500}]})
    check(st_ == 400 and j["error"]["name"] == "RANGE", "a phase at 500 fps: %d %r" % (st_, j))
    after = srv.ok("GET", "/v1/device")
    for k in ("state", "switch_held", "t_state_ns", "lih"):
        check(before[k] == after[k], "a refused command changed %s: %r -> %r" % (k, before[k], after[k]))
    # standby: nothing may be pressed, not even the API's start; power on again
    st.ws.send({"type": "device", "command": "standby", "id": "s1"})
    st.until(lambda: "s1" in st.acks, "the ack")
    check(st.acks.pop("s1")["device"]["state"] == "standby", "standby over the stream")
    srv.refused("POST", "/v1/device/fluoro", "standby")
    st_, j = srv.call("POST", "/v1/acquisition/start")
    check(st_ == 409 and j["error"]["message"] == "device: 'start' not allowed in state standby", "start: %r" % j)
    srv.ok("POST", "/v1/device/power_on")
    st.drain(0.2)
    st.take()


def test_series(srv, st):
    """A multiphase series: its phases at their own rates, boundaries exact, over on its own."""
    phases = [{"duration_s": 0.3, "fps": 10}, {"duration_s": 0.4, "fps": 5}]
    d = srv.ok("POST", "/v1/device/expose", {"phases": phases})
    check(d["state"] == "prepare" and d["series"]["phases"] == phases, "series pressed: %r" % d)
    tp = d["t_press_ns"]
    prep = round(d["latency"]["expose"]["prepare_ms"] * MS)
    readout = round(d["latency"]["expose"]["readout_ms"] * MS)
    lih = st.event("lih")
    st.until(lambda: any(u64(f, OFF_COUNTER) == lih["frame"] for f in st.frames), "the frame the LIH holds")
    st.drain(0.3)
    frames, events = st.take()
    on = tp + prep
    ends = [on + 300 * MS, on + 700 * MS]
    seq = states(events)
    want = [("prepare", tp), ("exposing", on), ("readout", ends[1]), ("ready", ends[1] + readout)]
    check(seq == want, "state events %r, want %r" % (seq, want))
    ph = [(e["phase"], e["t_ns"]) for e in events if e["event"] == "phase"]
    check(ph == [(1, ends[0])], "phase events %r, want [(1, %d)]" % (ph, ends[0]))
    check(frames, "no frame in the series")
    for f in frames:
        sched = u64(f, OFF_SCHED)
        if sched < ends[0]:
            check(sched >= on and (sched - on) % (100 * MS) == 0, "phase 0 frame due %+.3f ms" % ((sched - on) / 1e6))
        else:
            check(sched < ends[1] and (sched - ends[0]) % (200 * MS) == 0,
                  "phase 1 frame due %+.3f ms after its start" % ((sched - ends[0]) / 1e6))
    check(lih["frame"] == max(u64(f, OFF_COUNTER) for f in frames), "lih %r" % lih)
    d = srv.ok("GET", "/v1/device")
    check(d["state"] == "ready" and d["switch_held"] == "expose", "the series is over, the switch still held: %r" % d)
    srv.refused("POST", "/v1/device/expose", "ready", why=" (the exposure switch is still held")
    check(srv.ok("POST", "/v1/device/release")["switch_held"] == "none", "released")
    print("  series: phases at %s, %d frames" % ([p["fps"] for p in phases], len(frames)))


def test_radiation_disable_and_api(srv, st):
    """Radiation disable refuses every exposure, the API's start included; the API's start and stop
    as ever once enabled."""
    srv.ok("POST", "/v1/device/radiation_disable")
    for cmd in ("fluoro", "expose"):
        srv.refused("POST", "/v1/device/" + cmd, "ready", why=" (radiation disabled)")
    st_, j = srv.call("POST", "/v1/acquisition/start")
    check(st_ == 409 and j["error"]["name"] == "STATE" and "radiation disabled" in j["error"]["message"], "start: %r" % j)
    st_, j = srv.call("PUT", "/v1/acquisition", {"running": True, "fps": 12})
    check(st_ == 409, "PUT running while disabled: %d %r" % (st_, j))
    check(srv.ok("GET", "/v1/acquisition")["fps"] == 10, "a refused PUT applied its other fields")
    srv.ok("POST", "/v1/device/standby")  # moving between standby and ready stays allowed
    srv.ok("POST", "/v1/device/power_on")
    srv.ok("POST", "/v1/device/radiation_enable")
    a = srv.ok("POST", "/v1/acquisition/start")
    check(a["running"], "start: %r" % a)
    d = srv.ok("GET", "/v1/device")
    check(d["state"] == "exposing" and d["switch"] == "api", "started: %r" % d)
    check(srv.ok("POST", "/v1/acquisition/start")["running"], "a second start")
    check(not srv.ok("POST", "/v1/acquisition/stop")["running"], "stop")
    check(not srv.ok("POST", "/v1/acquisition/stop")["running"], "a second stop")
    check(srv.ok("GET", "/v1/device")["state"] == "ready", "stopped")
    st.drain(0.3)
    st.take()


def test_fault(srv, st):
    """A fault during exposing aborts it: no frame exposed after it, no readout, nothing held;
    reset; the pedal must be released and pressed again."""
    d = srv.ok("POST", "/v1/device/fluoro")
    st.event("state", state="exposing")
    st.until(lambda: len(st.frames) >= 1, "a frame")
    d = srv.ok("POST", "/v1/device/fault", {"code": 200})
    check(d["state"] == "fault" and d["fault"] == {"code": 200, "text": "generator: high voltage fault"}, "fault: %r" % d)
    tf = d["t_state_ns"]
    e = st.event("state", state="fault")
    check(e["fault"]["code"] == 200 and e["t_ns"] == tf and e["from"] == "exposing", "fault event %r" % e)
    st.drain(0.5)
    frames, events = st.take()
    check(all(u64(f, OFF_EXPOSURE) <= tf for f in frames), "a frame exposed after the fault")
    check(not any(x["event"] == "lih" for x in events), "an image held after a fault")
    srv.refused("POST", "/v1/device/fluoro", "fault")
    check(srv.ok("POST", "/v1/device/reset")["state"] == "ready", "reset")
    srv.refused("POST", "/v1/device/fluoro", "ready", why=" (the fluoro pedal is still held")
    srv.ok("POST", "/v1/device/release")
    check(srv.ok("GET", "/v1/device")["state"] == "ready", "ready again")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="xt-device-")
    srv = None
    failed = 0
    try:
        srv = Server(args.server, tmp)
        st = Stream(srv.ws)
        st.until(lambda: st.hello, "the hello")  # the server has the client: no event is missed
        for t in (test_fluoro, test_refused, test_series, test_radiation_disable_and_api, test_fault):
            try:
                t(srv, st)
                print("ok   %s" % t.__name__)
            except (Failed, TimeoutError, OSError, ValueError, KeyError) as e:
                failed += 1
                print("FAIL %s: %s" % (t.__name__, e))
                break  # the machine's state is unknown now: the later tests would only echo this
        st.ws.s.close()
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
