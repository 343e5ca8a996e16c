"""The frame stream (WebSocket /v1/stream) as a plain, blocking iterator of Frames.

Debian 12's python3-websockets (10.4) has only an asyncio client, so a Stream owns a private
event loop and runs it only inside its own calls: no thread, nothing happens between calls. While
the caller is busy elsewhere the socket is not read, the server sees a slow client and delivers the
newest frame when it is read again (latest-wins; the gap shows in Frame.frames_dropped). Commands
(pose, acquisition, start, stop, trigger, state) wait for their ack; frames that arrive meanwhile
are kept, in order, for the iterator (at most `keep` of them, oldest given up first).

A stream gets plane A's frames unless it subscribes to others (planes="b" or "a,b", or
subscribe()); a biplane client can tell them apart by Frame.plane. codec="zstd" or "lz4" asks the
server to compress 16-bit frames (less to carry over a slow link, some CPU on both ends); frames
are decompressed on arrival, so Frame.image is the same either way (api/stream.md).
"""
import asyncio
import collections
import json
import time

from .client import pose_update, ssl_context
from .errors import ConnectionFailed, XtwinError, error_from
from .frame import CODECS, check_codec, parse_frame


class Stream:
    """    with Stream("ws://127.0.0.1:8711/v1/stream", token=None) as s:
            seq = s.set_pose(primary_deg=30)          # acked by the server; returns the seq
            f = s.wait_for_pose(seq)                  # the first frame carrying it
            for f in s.frames(count=100): f.image, f.pose, f.P, f.t_exposure_ns, ...
        Stream(url, planes="a,b", codec="zstd")      # both planes of a biplane server, compressed
    """

    def __init__(self, url, token=None, verify=True, cafile=None, open_timeout=10.0, keep=16, max_size=256 << 20,
                 planes=None, codec=None):
        import websockets  # Debian: python3-websockets
        query = []
        if planes is not None:
            query.append("planes=" + _planes_arg(planes))
        if codec is not None:
            check_codec(_codec_arg(codec))  # a missing Python module is said before connecting
            query.append("codec=" + _codec_arg(codec))
        if query:
            url += ("&" if "?" in url else "?") + "&".join(query)
        self.url = url
        self.hello = None
        self.buffered_dropped = 0  # frames given up because more than `keep` waited unread
        self._frames = collections.deque()
        self._keep = keep
        self._acks = {}
        self._next_id = 1
        self._seq = None
        self._loop = asyncio.new_event_loop()
        kw = {"max_size": max_size, "max_queue": 4, "ping_interval": None, "open_timeout": open_timeout,
              "subprotocols": ["xtwin-stream"]}
        if token:
            # websockets >= 14 calls it additional_headers; Debian 12's 10.4 extra_headers.
            major = int(websockets.__version__.split(".")[0])
            kw["additional_headers" if major >= 14 else "extra_headers"] = {"Authorization": "Bearer " + token}
        if url.startswith("wss:"):
            kw["ssl"] = ssl_context(verify, cafile)
        async def open_():  # made inside the loop: the legacy client binds the loop it is made in
            return await websockets.connect(url, **kw)
        try:
            self._ws = self._run(open_(), open_timeout + 1)
        except XtwinError:
            self._loop.close()
            raise
        except Exception as e:
            self._loop.close()
            raise _connect_error(url, e) from None
        # The hello (server version, header size, state) comes first.
        deadline = time.monotonic() + open_timeout
        while self.hello is None:
            self._recv_one(deadline)

    # ---- plumbing -------------------------------------------------------------------------------

    def _run(self, coro, timeout=None):
        if timeout is not None:
            coro = asyncio.wait_for(coro, max(timeout, 0.001))
        try:
            return self._loop.run_until_complete(coro)
        except asyncio.TimeoutError:
            raise TimeoutError("xtwin stream: nothing within %.1f s" % timeout) from None

    def _recv_one(self, deadline):
        """Receives one message: a frame goes to the queue, a text is handled; False on timeout."""
        import websockets
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError("xtwin stream: nothing within the timeout")
        try:
            msg = self._run(self._ws.recv(), left)
        except websockets.exceptions.ConnectionClosed as e:
            code = getattr(e, "code", None) or getattr(getattr(e, "rcvd", None), "code", None)
            raise ConnectionFailed("", 0, "stream closed (%s %s)" % (code, getattr(e, "reason", "") or "")) from None
        if isinstance(msg, str):
            self._text(msg)
        else:
            f = parse_frame(msg)
            self._frames.append(f)
            while len(self._frames) > self._keep:
                self._frames.popleft()
                self.buffered_dropped += 1

    def _text(self, text):
        j = json.loads(text)
        if j.get("type") == "hello":
            self.hello = j
            self._seq = j.get("state", {}).get("pose_seq", 0)
        elif j.get("type") == "ack":
            self._acks[j.get("id")] = j

    def command(self, cmd, timeout=10.0):
        """Sends one JSON command and returns its ack; a refused one raises the typed error."""
        cmd = dict(cmd, id=self._next_id)
        self._next_id += 1
        try:
            self._run(self._ws.send(json.dumps(cmd)), timeout)
        except Exception as e:
            if isinstance(e, (TimeoutError, XtwinError)):
                raise
            raise ConnectionFailed("", 0, "stream send failed: %s" % e) from None
        deadline = time.monotonic() + timeout
        while cmd["id"] not in self._acks:
            self._recv_one(deadline)
        ack = self._acks.pop(cmd["id"])
        if not ack.get("ok"):
            raise error_from(ack.get("error", {}), 0)
        return ack

    # ---- commands -------------------------------------------------------------------------------

    def set_pose(self, pose=None, seq=None, **fields):
        """Updates any subset of the pose; returns the sequence number the server applied (the
        frames that show it carry it in pose_seq). seq defaults to one more than the last seen."""
        if seq is None:
            seq = (self._seq or 0) + 1
        ack = self.command({"type": "pose", "seq": int(seq), "pose": pose_update(pose, **fields)})
        self._seq = ack.get("seq", seq)
        return self._seq

    def acquisition(self, settings=None, **fields):
        """Changes any acquisition settings (passed through as given); returns the state after."""
        return self.command({"type": "acquisition", "acquisition": dict(settings or {}, **fields)})["state"]

    def start(self):
        return self.command({"type": "start"})["state"]

    def stop(self):
        return self.command({"type": "stop"})["state"]

    def trigger(self):
        """Lockstep: exposes one frame; returns its frame counter."""
        return self.command({"type": "trigger"})["frame"]

    def state(self):
        """{"pose", "pose_seq", "acquisition", "next_frame"} now."""
        return self.command({"type": "state"})["state"]

    def subscribe(self, planes):
        """The planes whose frames this stream gets from now on: "a", "b", "a,b" or a list such as
        ["A", "B"]. Returns the ack: its "published" says how many frames each plane has made (a
        plane with none, B on a single-plane server, sends nothing)."""
        names = [p.strip().upper() for p in (planes.split(",") if isinstance(planes, str) else planes)]
        return self.command({"type": "subscribe", "planes": names})

    def set_codec(self, codec):
        """How the server sends this stream's 16-bit frames from the next one on: "none", "zstd" or
        "lz4" (ImportError naming the Debian package when this Python cannot decode it)."""
        check_codec(_codec_arg(codec))
        return self.command({"type": "codec", "codec": _codec_arg(codec)})["codec"]

    # ---- frames ---------------------------------------------------------------------------------

    def next_frame(self, timeout=None):
        """The next frame (the oldest kept one first); TimeoutError after timeout seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._frames:
            self._recv_one(deadline)
        f = self._frames.popleft()
        if self._seq is None or f.pose_seq > self._seq:
            self._seq = f.pose_seq
        return f

    def frames(self, count=None, timeout=None):
        """Iterates over frames as they come (count of them, or until the stream closes);
        timeout bounds the wait for each one."""
        n = 0
        while count is None or n < count:
            try:
                yield self.next_frame(timeout)
            except ConnectionFailed:
                if count is None:
                    return
                raise
            n += 1

    __iter__ = frames

    def latest(self, timeout=None):
        """Drops the frames kept unread and returns the next one to arrive."""
        self._frames.clear()
        return self.next_frame(timeout)

    def wait_for_pose(self, seq, timeout=10.0):
        """The first frame whose pose_seq is at least seq (frames before it are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            f = self.next_frame(max(deadline - time.monotonic(), 0.001))
            if f.pose_seq >= seq:
                return f

    # ---- lifetime -------------------------------------------------------------------------------

    def close(self):
        if self._loop.is_closed():
            return
        try:
            self._run(self._ws.close(), 2.0)
        except Exception:
            pass  # closing a stream that is already gone
        self._loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _planes_arg(planes):
    names = planes.split(",") if isinstance(planes, str) else list(planes)
    return ",".join(p.strip().lower() for p in names)


def _codec_arg(codec):
    c = str(codec).lower()
    if c not in CODECS.values():
        raise ValueError("codec %r: expected one of %s" % (codec, ", ".join(CODECS.values())))
    return c


def _connect_error(url, e):
    """A refused upgrade (401 token, 404 path, 503 busy) as the typed error of the server's JSON."""
    status = getattr(e, "status_code", None) or getattr(getattr(e, "response", None), "status_code", None)
    body = getattr(e, "body", None) or getattr(getattr(e, "response", None), "body", None)
    if status:
        try:
            j = json.loads(body.decode("utf-8")) if body else {}
        except (ValueError, AttributeError):
            j = {}
        if not j:
            j = {"error": {"name": "", "status": status, "message": "%s: HTTP %s" % (url, status)}}
        return error_from(j, status)
    return ConnectionFailed("", 0, "%s: %s: %s" % (url, type(e).__name__, e))
