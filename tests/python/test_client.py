#!/usr/bin/python3
"""Tests of the Python client (api/python/xtwin) against the real xtwin-server over loopback, and
of the console's files as the server serves them.

    /usr/bin/python3 tests/python/test_client.py --server build/server/xtwin-server [-v] [Test.test_x]

Oracles are independent of the client's own code: the offset table of api/stream.md, the server's
REST state and renders (a streamed frame must equal POST /v1/render of its pose, pixel for pixel),
the files in server/console/, and a plain HTTP listener that records what the client sends.
Exit 77 (ctest: skipped) when python3-numpy or python3-websockets is missing.
"""
import argparse
import http.server
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "api", "python"))
try:
    import numpy as np
    import websockets  # noqa: F401
except ImportError as e:
    print("test_python_client skipped: %s (Debian: python3-numpy python3-websockets)" % e)
    sys.exit(77)
import xtwin  # noqa: E402
from xtwin import frame as xframe  # noqa: E402

SERVER = None
SCENE = ["--backend", "cpu", "--threads", "2", "--phantom-dim", "128", "--phantom-spacing", "2", "--mode", "fd20-128",
         "--fps", "20"]


class Server:
    """The real binary on ephemeral ports; stop() checks it exits 0 on SIGTERM."""

    def __init__(self, *extra, scene=None):
        self.dir = tempfile.mkdtemp(prefix="xtwin-pyclient-")
        ports = os.path.join(self.dir, "ports.json")
        self.logpath = os.path.join(self.dir, "server.log")
        self.log = open(self.logpath, "wb")
        self.proc = subprocess.Popen([SERVER, "--rest-port", "0", "--ws-port", "0", "--ports-file", ports]
                                     + (SCENE if scene is None else scene) + list(extra), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(ports):
                with open(ports) as fp:
                    p = json.load(fp)
                self.rest, self.ws, self.tls = p["rest"], p["ws"], p["tls"]
                self.url = "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.rest)
                return
            if self.proc.poll() is not None:
                raise RuntimeError("server exited at start: " + open(self.logpath).read())
            time.sleep(0.02)
        self.proc.kill()
        raise RuntimeError("server did not start in 60 s")

    def stop(self):
        self.proc.terminate()
        try:
            rc = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "killed"
        self.log.close()
        if rc == 0:  # the log is kept when something went wrong
            shutil.rmtree(self.dir, ignore_errors=True)
        return rc


def tls_args(tmp):
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return ["--tls-cert", cert, "--tls-key", key]


class ServerTest(unittest.TestCase):
    """One server for the tests that leave it as they found it (free run, fd20-128, uint16)."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server()
        cls.c = xtwin.Client(cls.srv.url)

    @classmethod
    def tearDownClass(cls):
        assert cls.srv.stop() == 0

    def setUp(self):
        self.c.acquisition(run_mode="free", mode="fd20-128", pixel_format="uint16", fps=20, running=True)


class Contrast(unittest.TestCase):
    """Contrast over the client (docs/contrast.md): an injection shows in the frames, each frame's
    peak iodine is GET /v1/contrast's at its exposure time, a reset clears it, errors are typed."""

    def test_inject_reaches_the_frames(self):
        srv = Server("--phantom", "thorax", "--clock", "virtual", "--pixel-format", "float32",
                     scene=["--backend", "cpu", "--threads", "2", "--mode", "fd20-128", "--fps", "10"])
        try:
            c = xtwin.Client(srv.url)
            regions = {r["name"]: r for r in c.contrast()["regions"]}
            self.assertIn("aorta", regions)
            with self.assertRaises(xtwin.NotFound):
                c.inject("liver", rate_ml_s=5, volume_ml=5)
            with self.assertRaises(xtwin.OutOfRange):
                c.inject("aorta", rate_ml_s=500, volume_ml=5)
            inj = c.inject("aorta", rate_ml_s=20, volume_ml=20)
            self.assertEqual(inj["seq"], 1)
            with c.stream() as s:
                seen = 0
                for f in s.frames(timeout=60):
                    if f.contrast["seq"] != 1 or f.t_exposure_ns < inj["t_start_ns"] + 1_500_000_000:
                        continue
                    at = {r["name"]: r["iodine_mg_ml"] for r in c.contrast(t_ns=f.t_exposure_ns)["regions"]}
                    self.assertGreater(at["aorta"], 1.0)
                    self.assertAlmostEqual(f.contrast["iodine_mg_ml_max"], max(at.values()), delta=1e-5 * at["aorta"])
                    seen += 1
                    if seen == 3:
                        break
            self.assertEqual(c.stop_contrast(reset=True)["seq"], 2)
            self.assertEqual(c.contrast()["injections"], [])
        finally:
            self.assertEqual(srv.stop(), 0)


class HeaderLayout(unittest.TestCase):
    def test_offsets_match_stream_md(self):
        """The decoder's offsets and sizes are api/stream.md's table, row for row."""
        sizes = {"u16": 2, "u32": 4, "u64": 8, "f32": 4, "f64": 8}
        doc = {}
        for line in open(os.path.join(ROOT, "api", "stream.md"), encoding="utf-8"):
            m = re.match(r"\| (\d+) \| ([a-z0-9\[\]]+) \| `(\w+)` \|", line)
            if m:
                t = m.group(2)
                a = re.match(r"(f64|u32|char)\[(\d+)\]", t)
                size = sizes[t] if t in sizes else int(a.group(2)) * {"f64": 8, "u32": 4, "char": 1}[a.group(1)]
                doc[m.group(3)] = (int(m.group(1)), size)
        self.assertEqual(len(doc), len(xframe.FIELDS), "fields in api/stream.md vs the decoder")
        for name, off, fmt in xframe.FIELDS:
            self.assertEqual(doc[name], (off, struct.calcsize(fmt)), name)

    def test_missing_codec_module_is_named(self):
        """A codec whose Python module is missing: ImportError naming the Debian package, before use."""
        saved = dict(xframe.CODEC_MODULES), dict(xframe._decoders)
        try:
            xframe.CODEC_MODULES["lz4"] = (("xtwin_no_such_module", "python3-no-such-package"),)
            xframe._decoders.clear()
            with self.assertRaises(ImportError) as e:
                xframe.check_codec("lz4")
            self.assertIn("python3-no-such-package", str(e.exception))
            with self.assertRaises(ImportError):
                xtwin.Stream("ws://127.0.0.1:9/v1/stream", codec="lz4")  # said before connecting
        finally:
            xframe.CODEC_MODULES.clear()
            xframe.CODEC_MODULES.update(saved[0])
            xframe._decoders.clear()
            xframe._decoders.update(saved[1])

    def test_compressed_frames_decode(self):
        """Header version 5 with a zstd or LZ4 payload: the same image as the plain pixels."""
        try:
            import lz4.block
            import zstandard
        except ImportError as e:
            self.skipTest("%s (Debian: python3-zstandard, python3-lz4)" % e)
        px = (np.arange(64 * 32, dtype="<u2") * 7 % 4096).astype("<u2").tobytes()
        h = bytearray(800)
        struct.pack_into("<IHHQ", h, 0, xframe.MAGIC, 5, 800, 42)
        struct.pack_into("<IIII", h, 72, 32, 64, xframe.PIX_U16, 0)
        struct.pack_into("<Q", h, 88, len(px))
        plain = bytes(h[:776]) + struct.pack("<IIQQ", 0, 0, len(px), 0) + px
        f0 = xtwin.parse_frame(plain)
        for codec, wire in (("zstd", zstandard.ZstdCompressor(level=1).compress(px)),
                            ("lz4", lz4.block.compress(px, store_size=False))):
            m = bytes(h[:776]) + struct.pack("<IIQQ", xframe.CODEC_IDS[codec], 0, len(wire), 0) + wire
            f = xtwin.parse_frame(m)
            self.assertEqual((f.codec, f.wire_bytes, f.plane), (codec, len(wire), "A"))
            self.assertTrue(np.array_equal(f.image, f0.image))
            with self.assertRaises(ValueError):
                xtwin.parse_frame(m[:-1])  # wire_bytes says more than came

    def test_rejects_bad_messages(self):
        with self.assertRaises(ValueError):
            xtwin.parse_frame(b"\0" * 400)  # no magic
        with self.assertRaises(ValueError):
            xtwin.parse_frame(b"XTWF" + b"\0" * 100)  # short


class Rest(ServerTest):
    def test_pose_round_trip_and_seq(self):
        r = self.c.set_pose(primary_deg=-35.5, secondary_deg=12, table_mm=(1, 2, 3))
        self.assertEqual(r["pose"]["primary_deg"], -35.5)
        self.assertEqual(r["pose"]["table_mm"], [1.0, 2.0, 3.0])
        r2 = self.c.set_pose({"detector_rot_deg": 5}, seq=r["seq"] + 10)
        self.assertEqual(r2["seq"], r["seq"] + 10)
        got = self.c.pose()
        self.assertEqual((got["pose"]["secondary_deg"], got["pose"]["detector_rot_deg"], got["seq"]),
                         (12.0, 5.0, r["seq"] + 10))
        self.c.set_pose(primary_deg=0, secondary_deg=0, detector_rot_deg=0, table_mm=(0, 0, 0))

    def test_acquisition_read_change_passthrough(self):
        a = self.c.acquisition(fps=12.5)
        self.assertEqual(a["fps"], 12.5)
        self.assertEqual(self.c.acquisition()["fps"], 12.5)
        # Unknown settings go to the server as given; it names them in its error.
        with self.assertRaises(xtwin.InvalidRequest) as e:
            self.c.acquisition(no_such_setting=1)
        self.assertIn("no_such_setting", e.exception.message)
        self.assertEqual(e.exception.body["error"]["name"], "INVAL")

    def test_typed_errors_carry_the_json(self):
        with self.assertRaises(xtwin.OutOfRange) as e:
            self.c.set_pose(primary_deg=300)
        self.assertEqual((e.exception.name, e.exception.status), ("RANGE", 400))
        self.assertIn("primary_deg", e.exception.message)
        with self.assertRaises(xtwin.NotFound) as e:
            self.c.acquisition(mode="no-such-mode")
        self.assertEqual(e.exception.body["error"]["status"], 404)
        with self.assertRaises(xtwin.Busy):
            self.c.trigger()  # free run: triggers are for lockstep
        with self.assertRaises(TypeError):
            self.c.set_pose(primary=3)  # caught here, before the server
        with self.assertRaises(xtwin.ConnectionFailed):
            xtwin.Client("http://127.0.0.1:1", timeout=2).health()

    def test_render_numpy_and_geometry(self):
        u = self.c.render(primary_deg=90, secondary_deg=20)
        self.assertEqual((u.image.shape, u.image.dtype), ((128, 128), np.dtype("uint16")))
        self.assertEqual(u.geometry["pose"]["primary_deg"], 90.0)
        self.assertEqual(np.asarray(u).shape, (128, 128))
        f = self.c.render(primary_deg=90, secondary_deg=20, pixel_format="float32")
        self.assertEqual(f.image.dtype, np.dtype("float32"))
        # uint16 = round(65535 exp(-L)) of the float32 line integrals (api/stream.md)
        want = np.round(65535.0 * np.exp(-f.image.astype(np.float64)))
        self.assertLessEqual(np.abs(want - u.image).max(), 1)
        self.assertLess(u.image.min(), 60000)  # the head's shadow is there
        # P maps the isocentre (world origin) to the detector centre at these table offsets 0.
        x = u.P @ np.array([0.0, 0.0, 0.0, 1.0])
        self.assertAlmostEqual(x[0] / x[2], 63.5, delta=0.6)
        self.assertAlmostEqual(x[1] / x[2], 63.5, delta=0.6)
        # Rendering does not move the C-arm.
        self.assertNotEqual(self.c.pose()["pose"]["primary_deg"], 90.0)


class StreamTests(ServerTest):
    def test_frame_equals_render_of_its_pose(self):
        """A streamed frame is the REST render of the pose in its header: pixels and P."""
        with self.c.stream() as s:
            self.assertEqual(s.hello["header_size"], 864)
            seq = s.set_pose(primary_deg=25, secondary_deg=-15, sid_mm=1100)
            f = s.wait_for_pose(seq, timeout=20)
            self.assertEqual(f.pose_seq, seq)
            self.assertEqual((f.pose["primary_deg"], f.pose["secondary_deg"], f.pose["sid_mm"]), (25.0, -15.0, 1100.0))
            r = self.c.render(f.pose)
            self.assertTrue(np.array_equal(r.image, f.image))
            self.assertTrue(np.allclose(r.P, f.P, rtol=1e-12, atol=1e-9))
            self.assertEqual((f.mode, f.rows, f.cols, f.pixel_format), ("fd20-128", 128, 128, "uint16"))
            self.assertEqual(f.period_ns, 50_000_000)
            # Timestamps: one clock (CLOCK_MONOTONIC on this host), in causal order.
            self.assertLessEqual(f.t_pose_ns, f.t_exposure_ns)
            self.assertLessEqual(f.t_exposure_ns, f.t_render_done_ns)
            self.assertLessEqual(f.t_render_done_ns, f.t_sent_ns)
            self.assertLessEqual(f.t_sent_ns, f.t_received_ns)
            s.set_pose(primary_deg=0, secondary_deg=0, sid_mm=1195)

    def test_float32_frames(self):
        with self.c.stream() as s:
            s.acquisition(pixel_format="float32")
            f = s.next_frame(timeout=20)
            while f.pixel_format != "float32":
                f = s.next_frame(timeout=20)
            self.assertEqual(f.image.dtype, np.dtype("float32"))
            r = self.c.render(f.pose, pixel_format="float32")
            self.assertTrue(np.array_equal(r.image, f.image))
            s.acquisition(pixel_format="uint16")

    def test_frames_iterator_counters(self):
        with self.c.stream() as s:
            fs = list(s.frames(count=5, timeout=20))
        self.assertEqual(len(fs), 5)
        c = [f.counter for f in fs]
        self.assertEqual(c, sorted(set(c)))  # strictly increasing
        d = [f.frames_dropped for f in fs]
        self.assertEqual(d, sorted(d))  # a running count for this connection

    def test_lockstep_trigger(self):
        with self.c.stream() as s:
            s.acquisition(run_mode="lockstep")
            n = s.trigger()
            f = s.next_frame(timeout=20)
            while not f.lockstep:
                f = s.next_frame(timeout=20)
            self.assertEqual(f.counter, n)
            with self.assertRaises(TimeoutError):  # one frame per trigger, no more
                g = s.next_frame(timeout=0.5)
                self.fail("unexpected frame %r" % g)
            s.acquisition(run_mode="free")

    def test_stream_errors_typed(self):
        with self.c.stream() as s:
            with self.assertRaises(xtwin.OutOfRange) as e:
                s.set_pose(sid_mm=100)
            self.assertIn("sid_mm", e.exception.message)
            with self.assertRaises(xtwin.InvalidRequest):
                s.acquisition(run_mode="sometimes")
            s.next_frame(timeout=20)  # still streaming

    def test_transform_and_motion_reach_the_frames(self):
        """set_transform's version and motion()'s phases come back in the frames' motion fields."""
        name = self.c.models()[0]["name"]
        r = self.c.set_transform(name, translation_mm=(0, 0, 5))
        try:
            with self.c.stream() as s:
                f = s.next_frame(timeout=20)
                while f.motion["xform_version"] < r["version"]:
                    f = s.next_frame(timeout=20)
                self.assertEqual(f.motion["xform_version"], r["version"])
                self.assertGreater(f.t_exposure_ns, r["t_ns"])
                self.assertEqual(f.motion["motion_flags"], 1)
                m = self.c.motion(respiratory={"period_s": 4, "amplitude_mm": 10})
                self.assertTrue(m["respiratory"]["on"])
                self.assertFalse(m["cardiac"]["on"])
                f = s.next_frame(timeout=20)
                while not f.motion["motion_flags"] & 4:
                    f = s.next_frame(timeout=20)
                self.assertTrue(0 <= f.motion["resp_phase"] < 1)
                self.assertEqual(f.motion["cardiac_phase"], -1.0)
        finally:
            self.c.motion(respiratory=False)
            self.c.set_transform(name)
        self.assertFalse(self.c.motion()["respiratory"]["on"])

    def test_appended_header_fields_are_skipped(self):
        """A later header version may append fields: pixels are found at header_size."""
        with self.c.stream() as s:
            f = s.next_frame(timeout=20)
        raw = bytearray(f.raw_header) + bytes(np.ascontiguousarray(f.image).tobytes())
        extra = struct.pack("<dd", 12.5, -1.0)  # a future field or two
        self.assertEqual((f.version, f.header_size, f.frame_kind, f.bits_stored, f.chain), (6, 864, "mono", 16, None))
        self.assertEqual((f.motion["cardiac_phase"], f.motion["motion_flags"], f.motion["blur_samples"]), (-1.0, 0, 1))
        self.assertEqual((f.plane, f.codec, f.wire_bytes), ("A", "none", 128 * 128 * 2))
        self.assertEqual((f.readout["detector"], f.readout["roi_size"], f.readout["binning"]), ("fd20", (1920, 1920), 15.0))
        grown = bytearray(raw[:864]) + extra + raw[864:]
        struct.pack_into("<HH", grown, 4, 7, 864 + len(extra))  # version 7, longer header
        g = xtwin.parse_frame(bytes(grown))
        self.assertEqual((g.version, g.header_size), (7, 880))
        self.assertTrue(np.array_equal(g.image, f.image))
        self.assertEqual((g.counter, g.pose, g.mode, g.frame_kind), (f.counter, f.pose, f.mode, f.frame_kind))
        self.assertEqual(g.raw_header[864:], extra)
        # A version-1 server's 304-byte header: the chain's fields are absent, not misread.
        old = bytearray(raw[:304]) + raw[864:]
        struct.pack_into("<HH", old, 4, 1, 304)
        h = xtwin.parse_frame(bytes(old))
        self.assertTrue(np.array_equal(h.image, f.image))
        self.assertEqual((h.header_size, h.frame_kind, h.bits_stored, h.chain, h.readout), (304, None, None, None, None))
        self.assertEqual((h.plane, h.timing, h.cycle, h.t_cycle_ns, h.codec, h.wire_bytes), (None,) * 6)


class Auth(unittest.TestCase):
    def test_token_rest_and_stream(self):
        srv = Server("--token", "s3cret")
        try:
            with self.assertRaises(xtwin.AuthError) as e:
                xtwin.Client(srv.url).info()
            self.assertEqual((e.exception.status, e.exception.body["error"]["name"]), (401, "AUTH"))
            with self.assertRaises(xtwin.AuthError):
                xtwin.Stream("ws://127.0.0.1:%d/v1/stream" % srv.ws)
            with self.assertRaises(xtwin.AuthError):
                xtwin.Stream("ws://127.0.0.1:%d/v1/stream" % srv.ws, token="wrong")
            c = xtwin.Client(srv.url, token="s3cret")
            self.assertTrue(c.info()["auth"])
            with c.stream() as s:
                self.assertIsNotNone(s.next_frame(timeout=20))
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_token_forms_a_browser_can_send(self):
        """Browsers cannot set Authorization on a WebSocket: the token may come as a subprotocol entry
        bearer.TOKEN offered beside xtwin-stream, or as ?token= (percent-encoded)."""
        import asyncio
        import urllib.parse

        def attempt(token_srv, protocols, query=""):
            async def go():
                url = "ws://127.0.0.1:%d/v1/stream%s" % (token_srv.ws, query)
                try:
                    async with websockets.connect(url, subprotocols=protocols, open_timeout=10) as ws:
                        hello = json.loads(await ws.recv())
                        return ws.subprotocol, hello["type"]
                except websockets.exceptions.InvalidStatusCode as e:
                    return e.status_code
            return asyncio.run(go())

        srv = Server("--token", "Tok-3n_x.y~z")
        try:
            self.assertEqual(attempt(srv, ["xtwin-stream", "bearer.Tok-3n_x.y~z"]), ("xtwin-stream", "hello"))
            self.assertEqual(attempt(srv, ["bearer.Tok-3n_x.y~z", "xtwin-stream"]), ("xtwin-stream", "hello"))
            self.assertEqual(attempt(srv, ["xtwin-stream", "bearer.Tok-3n_x.y~"]), 401)
            self.assertEqual(attempt(srv, ["xtwin-stream", "bearer.wrong"]), 401)
            self.assertEqual(attempt(srv, ["xtwin-stream"]), 401)
        finally:
            self.assertEqual(srv.stop(), 0)
        odd = "t\u00f6ken /+=?&#"  # not a subprotocol's characters: the query form
        srv = Server("--token", odd)
        try:
            q = "?token=" + urllib.parse.quote(odd, safe="")
            self.assertEqual(attempt(srv, ["xtwin-stream"], q), ("xtwin-stream", "hello"))
            self.assertEqual(attempt(srv, ["xtwin-stream"], "?token=" + urllib.parse.quote(odd[:-1], safe="")), 401)
            self.assertEqual(attempt(srv, None, q), (None, "hello"))
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_tls(self):
        tmp = tempfile.mkdtemp(prefix="xtwin-pyclient-tls-")
        self.addCleanup(shutil.rmtree, tmp, True)
        srv = Server(*tls_args(tmp))
        try:
            with self.assertRaises(xtwin.ConnectionFailed):  # self-signed: refused unless asked
                xtwin.Client(srv.url).health()
            c = xtwin.Client(srv.url, verify=False)
            self.assertEqual(c.health()["status"], "ok")
            with c.stream() as s:
                self.assertTrue(s.url.startswith("wss://"))
                self.assertEqual(s.next_frame(timeout=20).rows, 128)
            c2 = xtwin.Client(srv.url, cafile=os.path.join(tmp, "cert.pem"))  # verified against its own cert
            self.assertEqual(c2.render().image.shape, (128, 128))
        finally:
            self.assertEqual(srv.stop(), 0)


class WhatTheClientSends(unittest.TestCase):
    def test_headers(self):
        """Bodies go out as application/json with the bearer token (a plain listener records them)."""
        seen = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_PUT(self):
                n = int(self.headers.get("Content-Length", 0))
                seen.append((self.command, self.path, dict(self.headers), self.rfile.read(n)))
                body = b'{"pose": {}, "seq": 7}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        httpd = http.server.HTTPServer(("127.0.0.1", 0), H)
        t = threading.Thread(target=httpd.serve_forever, daemon=True)
        t.start()
        try:
            xtwin.Client("http://127.0.0.1:%d" % httpd.server_port, token="tok").set_pose(primary_deg=1.5)
        finally:
            httpd.shutdown()
        method, path, headers, body = seen[0]
        self.assertEqual((method, path), ("PUT", "/v1/pose"))
        self.assertEqual(headers.get("Content-Type"), "application/json")
        self.assertEqual(headers.get("Authorization"), "Bearer tok")
        self.assertEqual(json.loads(body), {"primary_deg": 1.5})


class Console(unittest.TestCase):
    def test_served_files_are_the_sources(self):
        """Every file of server/console/ is served byte for byte, with its type, and without the token
        (the API still wants it)."""
        srv = Server("--token", "t0k")
        try:
            src = os.path.join(ROOT, "server", "console")
            names = sorted(n for n in os.listdir(src) if n.rsplit(".", 1)[-1] in ("html", "js", "css", "svg"))
            self.assertIn("index.html", names)
            types = {"html": "text/html", "js": "text/javascript", "css": "text/css", "svg": "image/svg+xml"}
            for n in names:
                url = srv.url + ("/" if n == "index.html" else "/" + n)
                with urllib.request.urlopen(url, timeout=10) as r:
                    self.assertEqual(r.read(), open(os.path.join(src, n), "rb").read(), n)
                    self.assertTrue(r.headers["Content-Type"].startswith(types[n.rsplit(".", 1)[-1]]), n)
                    self.assertIn("default-src 'self'", r.headers["Content-Security-Policy"])
            with self.assertRaises(xtwin.AuthError):
                xtwin.Client(srv.url).pose()
        finally:
            self.assertEqual(srv.stop(), 0)


class Examples(ServerTest):
    def run_example(self, name, *args):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "api", "python", "examples", name), "--url", self.srv.url]
                           + list(args), capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, name + ": " + r.stdout + r.stderr)
        return r.stdout

    def test_render_angles(self):
        out = tempfile.mkdtemp(prefix="xtwin-ex-")
        self.addCleanup(shutil.rmtree, out, True)
        text = self.run_example("render_angles.py", "--angles=-30,30", "--out", os.path.join(out, "a"))
        self.assertEqual(text.count("primary"), 2)
        img = np.load(os.path.join(out, "a_+030.0.npy"))
        P = np.load(os.path.join(out, "a_+030.0_P.npy"))
        self.assertTrue(np.array_equal(img, self.c.render(primary_deg=30, secondary_deg=0).image))
        self.assertEqual(P.shape, (3, 4))

    def test_sweep(self):
        text = self.run_example("sweep.py", "--from=-10", "--to", "10", "--step", "10")
        self.assertEqual(len(re.findall(r"^primary", text, re.M)), 3)
        self.assertIn("pose->frame over 3 steps", text)

    def test_record(self):
        tmp = tempfile.mkdtemp(prefix="xtwin-ex-")
        self.addCleanup(shutil.rmtree, tmp, True)
        out = os.path.join(tmp, "run.npz")
        self.run_example("record.py", "--count", "4", "--out", out)
        z = np.load(out)
        self.assertEqual(z["images"].shape, (4, 128, 128))
        self.assertEqual(z["P"].shape, (4, 3, 4))
        self.assertTrue(np.all(np.diff(z["frame_counter"].astype(np.int64)) > 0))


def main():
    global SERVER
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    a, rest = p.parse_known_args()
    SERVER = os.path.abspath(a.server)
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
