#!/usr/bin/python3
"""The stream's transport over real sockets (api/stream.md, "Transport", "Compression", "Planes"):
compressed frames (zstd, LZ4) decode to exactly the bytes an uncompressed client of the same frame
receives, their headers state the codec and the wire bytes; the codec and subscribe messages and
the ?codec= / ?planes= query parameters, bad values refused naming the field; a client of plane B
alone gets nothing from a single-plane server; clients of one frame get identical pixels; whole
full-resolution (FD20, 9.5 MB) frames with no remainder kept by libwebsockets.

Frames are compared by lockstep triggers (every client gets every triggered frame, in order), so
nothing depends on timing; waits are bounds only.

    /usr/bin/python3 tests/server/test_transport.py --server build/server/xtwin-server [test ...]

Exit 0: passed; 1: a failure; 77: python3-websockets, numpy, zstandard or lz4 missing (skipped).
"""
import asyncio
import json
import os
import re
import signal
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "api", "python"))
sys.path.insert(0, HERE)
try:
    import numpy  # noqa: F401 (xtwin.frame)
    import websockets
    from xtwin import frame as xframe
    xframe.check_codec("zstd")
    xframe.check_codec("lz4")
except ImportError as e:
    print("test_server_transport skipped: %s" % e)
    sys.exit(77)
import test_stream as ts  # noqa: E402 (the stream tests' server and runner)
from test_stream import Failure, Server, check, run_main  # noqa: E402,F401

HDR = xframe.HEADER_SIZE_V6
PER_CLIENT = ((56, 8), (64, 8), (776, 4), (784, 8))  # t_sent_ns, frames_dropped, codec, wire_bytes


def connect(srv, query=""):
    # max_queue None: a client that stops reading still drains its socket, so it sees the server's
    # close frame at once (with a full queue websockets waits out its close timeout, any server)
    return websockets.connect(srv.url() + query, open_timeout=30, max_size=64 << 20, max_queue=None)


async def texts_until(ws, pred, timeout=30.0):
    """Text messages (frames skipped) until pred(message) holds; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        m = await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.monotonic()))
        if isinstance(m, str):
            j = json.loads(m)
            if pred(j):
                return j


async def lockstep_frames(ws, want, timeout=60.0):
    """The binary messages of the lockstep frames with counters in want, by counter."""
    got = {}
    deadline = time.monotonic() + timeout
    while len(got) < len(want):
        m = await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.monotonic()))
        if isinstance(m, bytes):
            h = xframe.parse_header(m)
            if h["flags"] & xframe.FLAG_LOCKSTEP and h["frame_counter"] in want:
                got[h["frame_counter"]] = m
    return got


def masked_header(m):
    """The header without this client's own fields (t_sent_ns, frames_dropped, codec, wire_bytes)."""
    b = bytearray(m[:HDR])
    for off, n in PER_CLIENT:
        b[off:off + n] = bytes(n)
    return bytes(b)


async def command(ws, cmd):
    await ws.send(json.dumps(cmd))
    return await texts_until(ws, lambda j: j.get("type") == "ack" and j.get("id") == cmd.get("id"))


# ---- tests ------------------------------------------------------------------------------------

async def test_codecs_decode_to_the_plain_bytes(srv):
    """Lockstep frames of the imaging chain (noisy raw codes and processed frames, the hard case for
    a compressor) to seven clients: two plain ones, zstd and LZ4 chosen by query parameter or by
    message, raw and processed. Each frame's decoded pixels are the plain client's bytes exactly;
    the headers equal but for the client's own fields; codec and wire_bytes say what came."""
    async with connect(srv) as plain, connect(srv) as plain2, connect(srv, "?codec=zstd") as zq, \
            connect(srv) as lm, connect(srv, "?codec=LZ4") as lq, connect(srv) as pplain, \
            connect(srv, "?codec=zstd") as pz:
        clients = {"plain": plain, "plain2": plain2, "zstd?": zq, "lz4 msg": lm, "lz4?": lq, "processed": pplain,
                   "processed zstd": pz}
        hellos = {k: await texts_until(ws, lambda j: j.get("type") == "hello") for k, ws in clients.items()}
        check(hellos["zstd?"]["codec"] == "zstd" and hellos["lz4?"]["codec"] == "lz4" and hellos["plain"]["codec"] == "none",
              "hello codec: %r" % {k: h.get("codec") for k, h in hellos.items()})
        check(set(hellos["plain"]["codecs"]) == {"none", "zstd", "lz4"} and hellos["plain"]["planes"] == ["A"],
              "hello: %r" % hellos["plain"])
        ack = await command(lm, {"type": "codec", "codec": "lz4", "id": 1})
        check(ack["ok"] and ack["codec"] == "lz4", "codec ack: %r" % ack)
        for ws in (pplain, pz):
            ack = await command(ws, {"type": "frames", "frames": "processed", "id": 2})
            check(ack["ok"], "frames ack: %r" % ack)
        code, body = srv.curl("PUT", "/v1/acquisition", {"run_mode": "lockstep"})
        check(code == 200, "lockstep: %d %r" % (code, body))
        srv.curl("POST", "/v1/acquisition/start")
        want = []
        for _ in range(3):
            code, body = srv.curl("POST", "/v1/acquisition/trigger")
            check(code == 200, "trigger: %d %r" % (code, body))
            want.append(body["frame"])
        got = {k: await lockstep_frames(ws, set(want)) for k, ws in clients.items()}
    stats = []
    for c in want:
        for ref_name, names in (("plain", ("plain2", "zstd?", "lz4 msg", "lz4?")), ("processed", ("processed zstd",))):
            ref = got[ref_name][c]
            rh = xframe.parse_header(ref)
            check(rh["codec"] == 0 and rh["wire_bytes"] == rh["payload_bytes"] == len(ref) - HDR,
                  "plain frame %d: codec %r wire %r payload %r" % (c, rh["codec"], rh["wire_bytes"], rh["payload_bytes"]))
            ref_px = bytes(xframe.payload(ref, rh))
            for name in names:
                m = got[name][c]
                h = xframe.parse_header(m)
                codec = {"plain2": 0, "zstd?": 1, "lz4 msg": 2, "lz4?": 2, "processed zstd": 1}[name]
                if codec == 2 and h["codec"] == 0:
                    # LZ4 has no entropy coder: a chain frame's 14-bit noise (the panel's own, since the
                    # readout stopped saturating the air) need not shrink, and such a frame goes as it is
                    # (api/stream.md); test_lz4_compresses_mono_frames holds LZ4 to compressing
                    codec = 0
                check(h["codec"] == codec, "%s frame %d: codec %d" % (name, c, h["codec"]))
                check(h["wire_bytes"] == len(m) - HDR, "%s frame %d: wire_bytes %d of %d" % (name, c, h["wire_bytes"],
                                                                                            len(m) - HDR))
                if codec:
                    check(h["wire_bytes"] < h["payload_bytes"], "%s: not smaller" % name)
                    stats.append((name, h["frame_kind"], h["payload_bytes"] / h["wire_bytes"]))
                check(masked_header(m) == masked_header(ref), "%s frame %d: header differs from the plain one" % (name, c))
                check(bytes(xframe.payload(m, h)) == ref_px, "%s frame %d: pixels differ from the plain client's" % (
                    name, c))
    for name, kind, ratio in stats[:5]:
        print("    %s (frame_kind %d): ratio %.2f" % (name, kind, ratio))


async def test_transport_messages_and_bad_values(srv):
    async with connect(srv) as ws:
        await texts_until(ws, lambda j: j.get("type") == "hello")
        cases = [({"type": "subscribe", "planes": ["C"]}, "INVAL", "planes: unknown plane 'C'"),
                 ({"type": "subscribe", "planes": "A"}, "INVAL", "planes: expected"),
                 ({"type": "subscribe", "planes": []}, "INVAL", "planes: expected"),
                 ({"type": "subscribe"}, "INVAL", "planes: expected"),
                 ({"type": "subscribe", "planes": ["A", "a"]}, "INVAL", "planes: plane 'a' named twice"),
                 ({"type": "subscribe", "planes": [1]}, "INVAL", "planes: unknown plane"),
                 ({"type": "subscribe", "planes": ["A", "B", "A"]}, "INVAL", "planes: expected"),
                 ({"type": "codec", "codec": "gzip"}, "INVAL", "codec: unknown codec 'gzip'"),
                 ({"type": "codec", "codec": 1}, "INVAL", "codec: expected"),
                 ({"type": "codec"}, "INVAL", "codec: expected"),
                 ({"type": "codec", "codec": "z" * 5000}, "INVAL", "codec: unknown codec")]
        for i, (cmd, name, text) in enumerate(cases):
            r = await command(ws, dict(cmd, id=100 + i))
            check(not r["ok"] and r["error"]["name"] == name and r["error"]["message"].startswith(text)
                  and r["command"] == cmd["type"], "%r -> %r" % (cmd, r))
        r = await command(ws, {"type": "subscribe", "planes": ["b", "A"], "id": 1})
        check(r["ok"] and r["planes"] == ["A", "B"] and r["published"]["B"] == 0 and r["published"]["A"] >= 0,
              "subscribe: %r" % r)
        r = await command(ws, {"type": "codec", "codec": "ZSTD", "id": 2})
        check(r["ok"] and r["codec"] == "zstd", "codec: %r" % r)
        for _ in range(3):  # still streaming, now compressed
            m = await asyncio.wait_for(ws.recv(), 30)
            while isinstance(m, str):
                m = await asyncio.wait_for(ws.recv(), 30)
            h = xframe.parse_header(m)
            check(h["plane"] == 0 and len(bytes(xframe.payload(m, h))) == h["payload_bytes"], "a frame after")
    # The query parameters, refused before the upgrade with a JSON body naming the parameter.
    for query, text in (("?planes=c", "planes: unknown plane 'c'"), ("?planes=a,a", "planes: plane 'a' named twice"),
                        ("?planes=", "planes: expected"), ("?codec=gzip", "codec: unknown codec 'gzip'"),
                        ("?planes=a&planes=b", "planes: given twice"), ("?codec=zstd&codec=lz4", "codec: given twice"),
                        ("?planes=" + "a," * 40 + "b", "planes: longer than")):
        status, body = raw_upgrade(srv.ws, "/v1/stream" + query)
        check(status == 400 and body.get("error", {}).get("name") == "INVAL"
              and body["error"]["message"].startswith(text), "%s -> %d %r" % (query, status, body))
    for query, planes, codec in (("?planes=A,b&codec=LZ4", ["A", "B"], "lz4"), ("?planes=B", ["B"], "none"),
                                 ("?codec=none&token=x&planes=a", ["A"], "none")):
        async with connect(srv, query) as ws:
            h = await texts_until(ws, lambda j: j.get("type") == "hello")
            check(h["planes"] == planes and h["codec"] == codec, "%s: hello %r %r" % (query, h["planes"], h["codec"]))


def raw_upgrade(port, path):
    """An upgrade request by hand: (status, JSON body) of a refusal."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n" % path).encode())
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
        head, _, body = data.partition(b"\r\n\r\n")
        m = re.search(rb"Content-Length: (\d+)", head)
        if m and len(body) >= int(m.group(1)):
            break
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(body)
    except ValueError:
        return status, {"raw": body[:200]}


async def test_plane_b_alone_gets_nothing_on_one_plane(srv):
    """A single-plane server makes only plane A's frames: a client of B gets none (its subscribe ack
    says B has published none), while a client of A and B beside it gets A's as before."""
    async with connect(srv, "?planes=b") as b, connect(srv, "?planes=a,b") as ab, connect(srv) as a:
        for ws in (b, ab, a):
            await texts_until(ws, lambda j: j.get("type") == "hello")
        got = {"a": [], "ab": []}
        for name, ws in (("a", a), ("ab", ab)):
            while len(got[name]) < 4:
                m = await asyncio.wait_for(ws.recv(), 30)
                if isinstance(m, bytes):
                    got[name].append(xframe.parse_header(m))
        check(all(h["plane"] == 0 for hs in got.values() for h in hs), "plane A frames")
        r = await command(b, {"type": "subscribe", "planes": ["B"], "id": 5})
        check(r["ok"] and r["published"]["A"] >= 4 and r["published"]["B"] == 0, "ack: %r" % r)
        frames = 0
        t_end = time.monotonic() + 1.5
        while time.monotonic() < t_end:
            try:
                m = await asyncio.wait_for(b.recv(), 0.2)
                frames += isinstance(m, bytes)
            except asyncio.TimeoutError:
                pass
        check(frames == 0, "a client of plane B got %d frames from a single-plane server" % frames)
        print("    plane B alone: no frame while plane A published %d (the ack says B published 0)" % r["published"]["A"])
        # moving to A: it gets frames again, none counted as missed from before
        r = await command(b, {"type": "subscribe", "planes": ["A"], "id": 6})
        check(r["ok"], "subscribe A: %r" % r)
        m = await asyncio.wait_for(b.recv(), 30)
        while isinstance(m, str):
            m = await asyncio.wait_for(b.recv(), 30)
        check(xframe.parse_header(m)["frames_dropped"] == 0, "frames before the subscription counted as dropped")


async def test_full_resolution_frames_whole_and_shared(srv):
    """FD20 full resolution, 2480 x 1920 uint16 (9.5 MB a frame), to two clients: every frame whole
    and identical in both, sent in fragments from the one ring frame, and libwebsockets never had to
    keep a remainder (which it would copy): the server's own count at each client's close."""
    async with connect(srv) as a, connect(srv) as b:
        seen = {}
        for name, ws in (("a", a), ("b", b)):
            n = 0
            while n < 4:
                m = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(m, str):
                    continue
                h = xframe.parse_header(m)
                check(h["rows"] == 1920 and h["cols"] == 2480 and len(m) == HDR + 2480 * 1920 * 2, "a whole frame")
                px = memoryview(m)[HDR:]
                check(px.tobytes().count(b"\x5a") == len(px), "pixels intact")
                seen.setdefault(h["frame_counter"], []).append(masked_header(m))
                n += 1
    srv.proc.send_signal(signal.SIGTERM)  # the close lines come as the server closes the clients
    srv.proc.wait(60)
    srv.log.flush()
    log = open(os.path.join(srv.dir, "server.log"), errors="replace").read()
    srv.stop()
    closes = re.findall(r"stream client \d+ closed: (\d+) frames, (\d+) bytes in (\d+) fragments, "
                        r"libwebsockets kept a remainder (\d+) times", log)
    check(len(closes) == 2, "close lines: %r" % closes)
    for frames, nbytes, frags, kept in closes:
        check(int(kept) == 0, "libwebsockets kept a remainder %s times for %s frames" % (kept, frames))
        print("    %s frames, %.1f MB in %s fragments, remainder kept %s times" % (frames, int(nbytes) / 1e6, frags, kept))
    granted = re.findall(r"send buffer (set, kernel granted|left to autotuning, now) (\d+) bytes", log)
    check(granted, "no send-buffer line in the log")
    print("    send buffer: %s %s bytes" % granted[0])


async def test_lz4_compresses_mono_frames(srv):
    """Mono frames (the head's smooth line integrals and its air) through LZ4: smaller on the wire,
    decoded to the plain client's bytes exactly."""
    async with connect(srv) as plain, connect(srv, "?codec=lz4") as lq:
        for ws in (plain, lq):
            await asyncio.wait_for(ws.recv(), 30)  # the hello
        code, body = srv.curl("PUT", "/v1/acquisition", {"run_mode": "lockstep"})
        check(code == 200, "lockstep: %d %r" % (code, body))
        srv.curl("POST", "/v1/acquisition/start")
        want = []
        for _ in range(2):
            code, body = srv.curl("POST", "/v1/acquisition/trigger")
            check(code == 200, "trigger: %d %r" % (code, body))
            want.append(body["frame"])
        ref, got = await lockstep_frames(plain, set(want)), await lockstep_frames(lq, set(want))
    for c in want:
        rh, h = xframe.parse_header(ref[c]), xframe.parse_header(got[c])
        check(h["codec"] == 2 and h["wire_bytes"] < h["payload_bytes"], "lz4 frame %d: codec %d, %d of %d bytes" % (
            c, h["codec"], h["wire_bytes"], h["payload_bytes"]))
        check(bytes(xframe.payload(got[c], h)) == bytes(xframe.payload(ref[c], rh)), "lz4 frame %d: pixels differ" % c)
        print("    lz4 mono frame %d: %.2f x" % (c, h["payload_bytes"] / h["wire_bytes"]))


def run_one(fn, extra, timeout):
    srv = None
    try:
        srv = Server(*extra)
        asyncio.run(asyncio.wait_for(fn(srv), timeout))
        if srv.proc.poll() is None:
            srv.stop()
        return None
    except Exception as e:  # noqa: BLE001 - a test's failure, reported and counted
        return ts.failure(e, srv)


TESTS = [
    (test_codecs_decode_to_the_plain_bytes, ["--chain", "--mode", "fd20-256", "--phantom-dim", "64",
                                             "--phantom-spacing", "4", "--no-autostart"]),
    (test_lz4_compresses_mono_frames, ["--mode", "fd20-256", "--phantom", "head", "--phantom-dim", "64",
                                       "--phantom-spacing", "4", "--no-autostart"]),
    (test_transport_messages_and_bad_values, []),
    (test_plane_b_alone_gets_nothing_on_one_plane, []),
    (test_full_resolution_frames_whole_and_shared, ["--synthetic", "--mode", "fd20", "--fps", "2", "--phantom-dim",
                                                    "32", "--verbose", "1"]),
]

if __name__ == "__main__":
    sys.exit(run_main(TESTS, run_one, default_timeout=180))
