#!/usr/bin/python3
"""The stream's parallel senders (api/stream.md, "Transport"; --stream-senders) over real sockets,
read by a WebSocket client of this file's own (standard library sockets, the frames parsed byte by
byte, so that nothing a library forgives goes unseen): FD20 full-resolution frames (9.5 MB,
--synthetic: every pixel byte 0x5a) to five clients at once, three reading at full speed while they
send pings and text commands every few milliseconds (so that control frames and acks are due while
a binary frame is on its way to them), one reading slowly and one not at all.

It fails if a frame is corrupt or interleaved: a WebSocket frame that is not well formed (reserved
bits, an unknown opcode, a masked or fragmented control frame, a data frame inside another
message), a binary message of the wrong length, a pixel byte that is not 0x5a, a header whose
magic, size or counters are wrong, pongs that are not the pings' payloads in order (RFC 6455 lets a
pong answer only the latest of several pings) or no pong to a last ping, an ack missing or out of
order. The slow client must be sent whole frames and have the others counted as dropped (its
frames_dropped, /metrics); the stalled one must be dropped by --peer-timeout; the fast ones must go
on getting frames throughout (neither holds a sender), and the server must stop cleanly on SIGTERM
with frames on their way. Run with sender threads (auto: 4 for the 5 clients; and 1 for all of
them) and without (0: the service thread writes, the path TLS uses), with the same checks; and both
ways again with the service thread polling while frames are made (--stream-spin-us).

    /usr/bin/python3 tests/server/test_senders.py --server build/server/xtwin-server [test ...]

Exit 0: passed; 1: a failure; 77: python3-websockets missing (the shared runner needs it).
"""
import asyncio
import base64
import json
import os
import re
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_stream as ts  # noqa: E402 (exits 77 without python3-websockets)
from test_stream import Failure, Server, check, parse_header, run_main  # noqa: E402

ROWS, COLS = 1920, 2480
HDR = 864  # header version 6 (api/stream.md)
FRAME = HDR + ROWS * COLS * 2
SECONDS = 2.5


class RawClient:
    """One WebSocket connection: the handshake, then a reader thread that parses every frame the
    server sends and a writer (the caller's thread) for masked pings and texts. mode: "fast" reads
    as fast as it can, "slow" at ~12 MB/s, "stall" never reads after the handshake."""

    def __init__(self, port, mode="fast"):
        self.mode = mode
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        if mode != "fast":  # small buffers: the server sees the client's pace at once
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 << 10)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                           "Sec-WebSocket-Protocol: xtwin-stream\r\n\r\n" % (port, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            b = self.sock.recv(1)
            check(b, "the server closed during the handshake")
            head += b
        check(head.startswith(b"HTTP/1.1 101"), "upgrade refused: %r" % head[:200])
        self.wlock = threading.Lock()
        self.errors = []
        self.frames = []          # (frame_counter, frames_dropped, t_render_done_ns, t_sent_ns) per binary message
        self.texts = []           # parsed JSON texts
        self.pongs = []           # payloads
        self.in_message = False   # a binary message is partly read (pings sent then are "during a frame")
        self.pings_mid_frame = 0
        self.closed = threading.Event()
        self.stop = False
        self.rx_bytes = 0
        if mode != "stall":
            self.thread = threading.Thread(target=self._read, daemon=True)
            self.thread.start()

    def _recv(self, n):
        out = bytearray(n)
        view, got = memoryview(out), 0
        while got < n:
            want = n - got
            if self.mode == "slow":
                want = min(want, 256 << 10)
            k = self.sock.recv_into(view[got:], want)
            if k == 0:
                raise EOFError("connection closed")
            if self.mode == "slow":
                time.sleep(k / 20e6)  # ~20 MB/s: two of the five frames a second
            got += k
            self.rx_bytes += k
        return out

    def _read(self):
        try:
            msg, msg_op = None, 0
            while not self.stop:
                b0, b1 = self._recv(2)
                fin, rsv, op = b0 >> 7, (b0 >> 4) & 7, b0 & 15
                if rsv or op not in (0, 1, 2, 8, 9, 10):
                    raise ValueError("bad frame byte 0x%02x (rsv %d, opcode %d)" % (b0, rsv, op))
                if b1 & 0x80:
                    raise ValueError("a masked frame from the server")
                n = b1 & 0x7f
                if n == 126:
                    n = struct.unpack(">H", self._recv(2))[0]
                elif n == 127:
                    n = struct.unpack(">Q", self._recv(8))[0]
                    if n > 64 << 20:
                        raise ValueError("frame length %d (the bytes are not a frame header)" % n)
                if op >= 8:
                    if not fin or n > 125:
                        raise ValueError("control frame %d: fin %d, %d bytes" % (op, fin, n))
                    payload = bytes(self._recv(n))
                    if op == 10:
                        self.pongs.append(payload)
                    elif op == 8:
                        self.closed.set()
                        return
                    continue
                if op == 0 and msg is None:
                    raise ValueError("a continuation frame with no message begun")
                if op != 0 and msg is not None:
                    raise ValueError("a new data frame (opcode %d) inside a fragmented message" % op)
                if op != 0:
                    msg, msg_op = None, op
                self.in_message = msg_op == 2
                part = self._recv(n)
                msg = part if msg is None else msg + part
                if not fin:
                    continue
                self.in_message = False
                m, msg = msg, None
                if msg_op == 1:
                    self.texts.append(json.loads(m.decode()))
                else:
                    self._frame(m)
        except (EOFError, OSError) as e:
            if not self.stop:
                self.errors.append("read: %s" % e)
        except Exception as e:  # noqa: BLE001 - the failure this test looks for
            self.errors.append("%s: %s" % (type(e).__name__, e))
        finally:
            self.closed.set()

    def _frame(self, m):
        if len(m) != FRAME:
            raise ValueError("binary message of %d bytes, a frame is %d" % (len(m), FRAME))
        h, px = parse_header(m)
        if (h["header_size"], h["rows"], h["cols"], h["payload_bytes"]) != (HDR, ROWS, COLS, ROWS * COLS * 2):
            raise ValueError("header: size %d, %d x %d, %d payload bytes" % (
                h["header_size"], h["rows"], h["cols"], h["payload_bytes"]))
        bad = len(px) - m.count(b"\x5a", HDR)
        if bad:
            raise ValueError("frame %d: %d pixel bytes are not 0x5a" % (h["frame_counter"], bad))
        if self.frames:
            last = self.frames[-1]
            if h["frame_counter"] <= last[0] or h["frames_dropped"] < last[1]:
                raise ValueError("frame %d (dropped %d) after frame %d (dropped %d)" % (
                    h["frame_counter"], h["frames_dropped"], last[0], last[1]))
        if not (h["t_render_done_ns"] <= h["t_sent_ns"]):
            raise ValueError("frame %d: sent %d before rendered %d" % (h["frame_counter"], h["t_sent_ns"],
                                                                        h["t_render_done_ns"]))
        self.frames.append((h["frame_counter"], h["frames_dropped"], h["t_render_done_ns"], h["t_sent_ns"]))

    def send(self, op, payload):
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | op]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n))
        body = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
        if op == 9 and self.in_message:
            self.pings_mid_frame += 1
        with self.wlock:
            self.sock.sendall(head + mask + body)

    def close(self):
        self.stop = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


async def test_parallel_senders_keep_frames_whole(srv):
    """Five clients of FD20 full-resolution frames: three fast ones that ping and send commands
    throughout, a slow one and a stalled one; every frame whole and in order, every pong and ack."""
    fast = [RawClient(srv.ws) for _ in range(3)]
    slow = RawClient(srv.ws, "slow")
    stall = RawClient(srv.ws, "stall")
    pings = [[] for _ in fast]
    ids = [[] for _ in fast]
    t0 = time.monotonic()
    k = 0
    while time.monotonic() - t0 < SECONDS:
        for i, c in enumerate(fast):
            p = b"%d:%d" % (i, k) + os.urandom(8)
            c.send(9, p)
            pings[i].append(p)
            if k % 4 == 0:
                c.send(1, json.dumps({"type": "state", "id": "c%d-%d" % (i, k)}).encode())
                ids[i].append("c%d-%d" % (i, k))
        k += 1
        time.sleep(0.01)
    # A ping that comes while the pong of an earlier one is still due may go unanswered (RFC 6455
    # 5.5.3; libwebsockets keeps the first): the pongs must be some of the pings, in order, and once
    # the flood is over a ping must be answered (sent again every half second until one is: a bound).
    last = [[] for _ in fast]
    deadline = time.monotonic() + 30
    # and the slow client reads on until a header counts frames dropped for it: how soon depends on
    # the machine's load (under ASan with the cores busy a frame can take longer to make than the slow
    # client takes to read one), not whether (one failure in ~20 loaded runs checked after 2 frames)
    while time.monotonic() < deadline and (len(slow.frames) < 2 or slow.frames[-1][1] == 0 or any(
            not (c.pongs and c.pongs[-1] in last[i]) or
            len([t for t in c.texts if t.get("type") == "ack"]) < len(ids[i]) for i, c in enumerate(fast))):
        for i, c in enumerate(fast):
            if not (c.pongs and c.pongs[-1] in last[i]):
                p = b"last %d %d" % (i, len(last[i]))
                c.send(9, p)
                pings[i].append(p)
                last[i].append(p)
        time.sleep(0.5)
    received = sum(len(c.frames) for c in fast)  # before /metrics: every one of these was sent before it
    code, metrics = srv.curl("GET", "/metrics")
    for i, c in enumerate(fast + [slow]):
        check(not c.errors, "client %d: %s" % (i, c.errors))
    for i, c in enumerate(fast):
        it = iter(pings[i])
        check(all(any(p == q for q in it) for p in c.pongs) and c.pongs and c.pongs[-1] in last[i],
              "client %d: %d pongs for %d pings: not their payloads in order, or the last one unanswered" % (
                  i, len(c.pongs), len(pings[i])))
        acks = [t.get("id") for t in c.texts if t.get("type") == "ack"]
        check(acks == ids[i], "client %d: acks %s... for commands %s..." % (i, acks[:5], ids[i][:5]))
        counters = [f[0] for f in c.frames]
        span = counters[-1] - counters[0] + 1 if counters else 0
        check(len(counters) >= 6 and len(counters) >= span // 4,
              "fast client %d got %d frames of the %d published meanwhile" % (i, len(counters), span))
        print("    fast client %d: %d frames (counters %d..%d), %d pings (%d while a frame was arriving), %d acks," % (
            i, len(counters), counters[0], counters[-1], len(pings[i]), c.pings_mid_frame, len(acks)),
              "%d pongs" % len(c.pongs))
    check(sum(c.pings_mid_frame for c in fast) > 0, "no ping was sent while a frame was arriving: nothing tested")
    check(len(slow.frames) >= 2, "the slow client got %d frames (%d bytes read)" % (len(slow.frames), slow.rx_bytes))
    check(slow.frames[-1][1] > 0, "the slow client's frames_dropped stayed 0 over %d frames" % len(slow.frames))
    print("    slow client: %d whole frames, %d dropped (its last header)" % (len(slow.frames), slow.frames[-1][1]))
    # the slow client (the fourth to connect) counted in /metrics; the stalled one dropped altogether
    # by --peer-timeout (its unread frame never acknowledged), the others still served meanwhile
    drops = dict(re.findall(r'^xtwin_client_frames_dropped_total\{client="(\d+)"[^}]*\} (\d+)', metrics, re.M))
    check(int(drops.get("4", 0)) > 0, "the slow client's drops in /metrics: %s" % drops)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "5" in drops:
        time.sleep(0.2)
        drops = dict(re.findall(r'^xtwin_client_frames_dropped_total\{client="(\d+)"[^}]*\} (\d+)',
                                srv.curl("GET", "/metrics")[1], re.M))
    check("5" not in drops and "1" in drops, "the stalled client is still connected: %s" % drops)
    n_fast = [len(c.frames) for c in fast]
    time.sleep(1.0)
    check(all(len(c.frames) > n for c, n in zip(fast, n_fast)), "the fast clients got nothing more: %s" % n_fast)
    sends = [l for l in metrics.splitlines() if l.startswith("xtwin_frame_send_seconds_count")]
    check(sends and int(float(sends[0].split()[-1])) >= received,
          "xtwin_frame_send_seconds counts fewer sends than the %d the fast clients got: %s" % (received, sends))
    # SIGTERM with frames on their way to the slow client: the server ends in time, exit 0
    for c in fast + [slow]:
        c.close()
    srv.stop(timeout=15)
    stall.close()


async def test_tls_refuses_a_sender_count(srv):
    """Sender threads write the plain socket: with TLS an explicit count is refused at start, naming
    the option, and auto (the default) serves with the service thread (test_server_stream's wss
    test streams through it)."""
    tmp = tempfile.mkdtemp(prefix="xtwin-senders-tls-")
    try:
        started = None
        try:
            started = Server(*(ts.tls_args(tmp) + ["--stream-senders", "2", "--phantom-dim", "32"]))
        except Failure as e:  # "server exited at start: " and its output
            check("stream_senders" in str(e) and "TLS" in str(e), "the refusal does not name the option: %s" % e)
        if started:
            started.kill()
            raise Failure("a TLS server started with --stream-senders 2")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_one(fn, extra, timeout):
    srv = None
    try:
        srv = Server(*extra) if extra is not None else None
        asyncio.run(asyncio.wait_for(fn(srv), timeout))
        if srv and srv.proc.poll() is None:
            srv.stop()
        return None
    except Exception as e:  # noqa: BLE001 - a test's failure, reported and counted
        return ts.failure(e, srv)


def senders(n):
    """The test under another name for each --stream-senders value."""
    async def t(srv):
        await test_parallel_senders_keep_frames_whole(srv)
    t.__name__ = "test_senders_%s" % n
    return t


# --verbose 1: the server says why it closes a client (its output is printed when a test fails).
# The fast client's "connection reset" of 2026-12-07 (3 of about 17 runs under ASan): libwebsockets
# wrote the pong to one of its pings into the middle of a frame that on_wake had handed to the
# sender threads (reproduced: a pong's bytes found inside a frame). The client stops reading at the
# corrupt frame, so (inferred) the peer timeout drops it as it drops the stalled one and its next
# ping meets the reset. Frames now go to the threads only from a client's writable callback, by
# which libwebsockets has written any pong (ws.c, on_wake).
ARGS = ["--synthetic", "--mode", "fd20", "--fps", "5", "--phantom-dim", "32", "--peer-timeout", "2", "--verbose", "1"]
TESTS = [
    (senders("auto"), ARGS),
    (senders("1"), ARGS + ["--stream-senders", "1"]),
    (senders("0"), ARGS + ["--stream-senders", "0"]),
    # the service thread polling without sleeping while a frame is made (--stream-spin-us): it hands
    # frames on from its own loop, between polls, not from a wake-up callback
    (senders("spin"), ARGS + ["--stream-spin-us", "20000"]),
    (senders("spin_0"), ARGS + ["--stream-spin-us", "20000", "--stream-senders", "0"]),
    (test_tls_refuses_a_sender_count, None),
]

if __name__ == "__main__":
    sys.exit(run_main(TESTS, run_one))
