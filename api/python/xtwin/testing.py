"""xtwin.testing: a pytest harness for control-software teams (issue 24, point 9).

Start a real xtwin-server for a test, drive it as the control application under test would, and
assert on what the device did, judged by the server's own timestamps (never the test's clock):

    pytest -p xtwin.testing --xtwin-server /path/to/xtwin-server tests/

    def test_fluoro_shows_the_new_view(xtwin_server):
        srv = xtwin_server("--mode", "fd20-256", "--fps", "15")
        with srv.stream() as s:
            seq = s.set_pose(primary_deg=30)
            xtwin.testing.frame_within(s, seq, deadline_ms=100)
        xtwin.testing.dose_below(srv.client, k_irp_mgy=5.0)

Fixtures: `xtwin_server` (a factory: each call starts a server with the given flags on free
ports, stopped when the test ends, and the test fails if it did not exit cleanly) and
`xtwin_binary` (the server's path: --xtwin-server, else $XTWIN_SERVER, else xtwin-server on the
PATH). Server(...) is the same without pytest. Keyword arguments: scenario= (a scenario file,
--scenario), clock= ("real" or "virtual", --clock) and session_log=True (the session log, kept in
the server's folder for `xtwin replay`) pass the server's flags of those names; a server that
does not know a flag refuses to start, with its message in the failure.

Assertions raise AssertionError with what was seen: frame_within (the frame that shows a change,
and the server's time from the change to that frame ready), state_reached (the device state, GET
/v1/device), dose_below (the run's air kerma at the reference point and kerma-area product, GET
/v1/acquisition's dose). docs/testing.md is the manual, with an example test of an imaginary control application.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from .client import Client

DEFAULT_SCENE = ("--backend", "cpu", "--threads", "2", "--phantom-dim", "64", "--phantom-spacing", "3", "--mode",
                 "fd20-128")


class Server:
    """xtwin-server on free ports in a folder of its own; stop() returns its exit status."""

    def __init__(self, binary, *args, scene=DEFAULT_SCENE, scenario=None, clock=None, session_log=False,
                 start_timeout=60.0):
        self.dir = tempfile.mkdtemp(prefix="xtwin-test-")
        ports = os.path.join(self.dir, "ports.json")
        self.log_path = os.path.join(self.dir, "server.log")
        self.session_log = os.path.join(self.dir, "session.jsonl") if session_log else None
        cmd = [binary, "--rest-port", "0", "--ws-port", "0", "--ports-file", ports] + list(scene) + list(args)
        if scenario:
            cmd += ["--scenario", os.path.abspath(scenario)]
        if clock:
            cmd += ["--clock", clock]
        if self.session_log:
            cmd += ["--session-log", self.session_log]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.dir, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + start_timeout
        while True:
            if self.proc.poll() is not None:
                self._log.close()
                raise RuntimeError("xtwin-server exited %d at start: %s" % (self.proc.returncode, self.output()[-2000:]))
            try:
                with open(ports) as f:
                    p = json.load(f)
                break
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("xtwin-server did not start in %g s" % start_timeout)
                time.sleep(0.02)
        self.rest_port, self.ws_port = p["rest"], p["ws"]
        self.url = "%s://127.0.0.1:%d" % ("https" if p.get("tls") else "http", self.rest_port)
        self.client = Client(self.url)

    def output(self):
        """What the server printed so far."""
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stream(self, **kw):
        return self.client.stream(**kw)

    def stop(self, timeout=20.0):
        """SIGTERM, then the exit status (None: it had to be killed). The folder is removed when the
        server exited 0, kept (with its log) otherwise."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        if not self._log.closed:
            self._log.close()
        rc = self.proc.returncode
        if rc == 0 and not self.session_log:
            shutil.rmtree(self.dir, ignore_errors=True)
        return rc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# ---- assertions -------------------------------------------------------------------------------------

def frame_within(stream, seq, deadline_ms, timeout=30.0):
    """The first frame showing pose update seq (pose_seq >= seq); fails unless the server had it
    ready within deadline_ms of the update's arrival (t_render_done_ns - t_pose_ns, the server's
    clock). Returns the frame."""
    try:
        f = stream.wait_for_pose(seq, timeout=timeout)
    except TimeoutError:
        raise AssertionError("no frame showed pose update %d within %g s" % (seq, timeout)) from None
    latency_ms = (f.t_render_done_ns - f.t_pose_ns) * 1e-6
    assert latency_ms <= deadline_ms, ("frame %d showed pose update %d %.2f ms after it reached the server "
                                       "(deadline %g ms; server clock)" % (f.counter, f.pose_seq, latency_ms,
                                                                             deadline_ms))
    return f


def state_reached(client, state, timeout=10.0, poll=0.01):
    """Waits until GET /v1/device says state (e.g. "ready", "exposing"); returns its body."""
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        d = client._json("GET", "/v1/device")
        if not seen or seen[-1] != d.get("state"):
            seen.append(d.get("state"))
        if d.get("state") == state:
            return d
        if time.monotonic() > deadline:
            raise AssertionError("device state %r not reached in %g s (seen: %s)" % (state, timeout, " -> ".join(
                map(str, seen))))
        time.sleep(poll)


def dose_below(client, k_irp_mgy=None, kap_gycm2=None):
    """Fails when the run's air kerma at the reference point (mGy) or kerma-area product (Gy cm2)
    reached the limit given; returns the dose object of GET /v1/acquisition."""
    d = client.acquisition()["dose"]
    k, kap = d.get("k_irp_total_mgy"), d.get("kap_total_gycm2")
    if k_irp_mgy is not None:
        assert k < k_irp_mgy, "air kerma %.4g mGy over %d frames, limit %g mGy" % (k, d.get("run_frames", 0),
                                                                                   k_irp_mgy)
    if kap_gycm2 is not None:
        assert kap < kap_gycm2, "kerma-area product %.4g Gy cm2, limit %g" % (kap, kap_gycm2)
    return d


# ---- pytest plugin (pytest -p xtwin.testing) -------------------------------------------------------

def pytest_addoption(parser):
    parser.addoption("--xtwin-server", default=None,
                     help="the xtwin-server binary (default: $XTWIN_SERVER, else xtwin-server on the PATH)")


try:
    import pytest
except ImportError:  # the module's classes and assertions work without pytest
    pytest = None

if pytest is not None:
    @pytest.fixture
    def xtwin_binary(request):
        b = request.config.getoption("--xtwin-server") or os.environ.get("XTWIN_SERVER") or shutil.which(
            "xtwin-server")
        if not b:
            pytest.skip("no xtwin-server: give --xtwin-server PATH or set XTWIN_SERVER")
        return os.path.abspath(b)

    @pytest.fixture
    def xtwin_server(xtwin_binary):
        started = []

        def make(*args, **kw):
            s = Server(xtwin_binary, *args, **kw)
            started.append(s)
            return s

        yield make
        bad = []
        for s in started:
            rc = s.stop()
            if rc != 0:
                bad.append("exit %s, log kept in %s:\n%s" % (rc, s.dir, s.output()[-2000:]))
        if bad:
            pytest.fail("xtwin-server did not stop cleanly: " + "\n".join(bad))
