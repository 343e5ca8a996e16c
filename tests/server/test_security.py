#!/usr/bin/python3
"""xtwin-server under abuse: what a hostile web page, a careless client or a hostile peer can send,
with real clients over real sockets (http.client, urllib, requests, raw sockets, python3-websockets).

    /usr/bin/python3 tests/server/test_security.py --server build/server/xtwin-server [test ...]

Each test starts its own server (test_stream.Server: ephemeral ports, small CPU scene). Covered:
model paths confined to --model-root (the header and the data files it names, symlinks resolved
first), regular files only and opened without blocking (a FIFO never hangs a request or the
shutdown), JSON-only bodies, Host and Origin checks (REST and the WebSocket upgrade), the token in
forms a browser can send on the upgrade, a case-insensitive auth scheme, a per-address connection
limit and a deadline for the request head (slowloris), early error answers that clients still
receive while uploading (413/401 to urllib and requests), JSON for every error status, HEAD.
Exit 0: all passed; 1: a failure; 77: python3-websockets missing.
"""
import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_stream as ts  # noqa: E402  (exits 77 when python3-websockets is missing)
from test_stream import Failure, Server, check  # noqa: E402

import websockets  # noqa: E402


# ---- helpers ----------------------------------------------------------------------------------

def request(srv, method, path, body=None, headers=None, host=None, source=None, timeout=30):
    """One request with full control of the headers (Host included); returns (status, headers,
    parsed JSON or raw bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", srv.rest, timeout=timeout,
                                   source_address=(source, 0) if source else None)
    try:
        c.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        c.putheader("Host", host if host is not None else "127.0.0.1:%d" % srv.rest)
        for k, v in (headers or {}).items():
            c.putheader(k, v)
        if body is not None:
            if isinstance(body, str):
                body = body.encode()
            c.putheader("Content-Length", str(len(body)))
        c.endheaders(body)
        r = c.getresponse()
        data = r.read()
        try:
            data = json.loads(data)
        except ValueError:
            pass
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def is_error(status, headers, body, want_status, want_name=None):
    check(status == want_status, "status %d, want %d: %r" % (status, want_status, body))
    check(headers.get("content-type", "").startswith("application/json"), "error as %s" % headers.get("content-type"))
    check(isinstance(body, dict) and body["error"]["status"] == want_status, "JSON error body: %r" % (body,))
    if want_name:
        check(body["error"]["name"] == want_name, "error name %s, want %s" % (body["error"]["name"], want_name))


JSON = {"Content-Type": "application/json"}


def mha(path, n=8, value=0.01):
    """A small MetaImage volume (float32 mu, data inline)."""
    with open(path, "wb") as f:
        f.write(("ObjectType = Image\nNDims = 3\nDimSize = %d %d %d\nElementSpacing = 1 1 1\n"
                 "ElementType = MET_FLOAT\nElementDataFile = LOCAL\n" % (n, n, n)).encode())
        f.write(struct.pack("<%df" % n ** 3, *([value] * n ** 3)))


def nhdr(path, datafile, n=4, typ="uint8"):
    with open(path, "w") as f:
        f.write("NRRD0004\ntype: %s\ndimension: 3\nsizes: %d %d %d\nspacings: 1 1 1\nencoding: raw\n"
                "endian: little\ndata file: %s\n\n" % (typ, n, n, n, datafile))


def mhd(path, datafile, n=4):
    with open(path, "w") as f:
        f.write("ObjectType = Image\nNDims = 3\nDimSize = %d %d %d\nElementSpacing = 1 1 1\n"
                "ElementType = MET_UCHAR\nElementDataFile = %s\n" % (n, n, n, datafile))


def post_model(srv, path, timeout=30):
    return request(srv, "POST", "/v1/models", json.dumps({"path": path}), JSON, timeout=timeout)


# ---- model paths ------------------------------------------------------------------------------

async def test_models_refused_without_root(srv, tmp):
    mha(os.path.join(tmp, "ok.mha"))
    is_error(*post_model(srv, os.path.join(tmp, "ok.mha")), 403, "PERM")
    st, _, body = request(srv, "GET", "/v1/models")
    check(st == 200 and len(body["models"]) == 1, "models: %r" % body)


def roots_layout(tmp):
    root, out = os.path.join(tmp, "models"), os.path.join(tmp, "outside")
    os.makedirs(os.path.join(root, "sub"))
    os.makedirs(out)
    mha(os.path.join(root, "ok.mha"))
    mha(os.path.join(out, "secret.mha"))
    with open(os.path.join(out, "secret.raw"), "wb") as f:
        f.write(b"s" * 64)
    os.symlink(os.path.join(out, "secret.mha"), os.path.join(root, "link-out.mha"))
    os.symlink(os.path.join(root, "ok.mha"), os.path.join(root, "sub", "link-in.mha"))
    os.symlink(out, os.path.join(root, "dir-out"))
    os.symlink(os.path.join(out, "secret.raw"), os.path.join(root, "raw-link.raw"))
    nhdr(os.path.join(root, "passwd.nhdr"), "/etc/passwd")
    nhdr(os.path.join(root, "dotdot.nhdr"), "../outside/secret.raw")
    nhdr(os.path.join(root, "rawlink.nhdr"), "raw-link.raw")
    with open(os.path.join(root, "upper.nhdr"), "w") as f:  # Teem's field names are case-insensitive
        f.write("NRRD0004\ntype: uint8\ndimension: 3\nsizes: 4 4 4\nspacings: 1 1 1\nencoding: raw\n"
                "DATA FILE: /etc/passwd\n\n")
    with open(os.path.join(root, "list.nhdr"), "w") as f:  # a file list naming a file outside
        f.write("NRRD0004\ntype: uint8\ndimension: 3\nsizes: 4 4 4\nspacings: 1 1 1\nencoding: raw\n"
                "data file: LIST\n/etc/passwd\n")
    mhd(os.path.join(root, "passwd.mhd"), "/etc/passwd")
    mhd(os.path.join(root, "dotdot.mhd"), "../outside/secret.raw")
    os.makedirs(os.path.join(out, "series"))  # a DICOM folder outside; an @list inside naming files outside
    with open(os.path.join(root, "outside.list"), "w") as f:
        f.write("/etc/passwd\n" + os.path.join(out, "secret.raw") + "\n")
    with open(os.path.join(root, "in.raw"), "wb") as f:
        f.write(b"\x01" * 64)
    nhdr(os.path.join(root, "in.nhdr"), "in.raw")
    return root, out


async def test_models_confined_to_roots(srv, tmp):
    root, out = srv.layout
    refused = [os.path.join(out, "secret.mha"),            # outside the root
               os.path.join(root, "..", "outside", "secret.mha"),  # .. out of it
               os.path.join(root, "link-out.mha"),         # a symlink in the root to a file outside
               os.path.join(root, "dir-out", "secret.mha"),  # through a symlinked folder
               os.path.join(root, "passwd.nhdr"),          # data files named by headers
               os.path.join(root, "dotdot.nhdr"),
               os.path.join(root, "rawlink.nhdr"),
               os.path.join(root, "upper.nhdr"),
               os.path.join(root, "passwd.mhd"),
               os.path.join(root, "dotdot.mhd"),
               os.path.join(out, "series"),                # DICOM: a folder outside
               os.path.join(root, "dir-out", "series"),    # ... reached through a symlink
               "@" + os.path.join(root, "outside.list"),   # ... an @list whose files are outside
               "@" + os.path.join(out, "x.list")]          # ... an @list outside
    for p in refused:
        is_error(*post_model(srv, p), 403, "PERM")
    is_error(*post_model(srv, os.path.join(root, "list.nhdr")), 400, "UNSUPPORTED")  # lists: refused outright
    is_error(*post_model(srv, os.path.join(root, "nope.mha")), 404, "NOTFOUND")  # missing inside: said so; outside: 403
    for p in (os.path.join(root, "ok.mha"), os.path.join(root, "sub", "link-in.mha"), os.path.join(root, "in.nhdr")):
        st, _, body = post_model(srv, p)
        check(st == 201, "%s inside the root: %d %r" % (p, st, body))
    st, _, body = request(srv, "GET", "/v1/models")
    check(st == 200 and len(body["models"]) == 4, "models: %r" % [m["name"] for m in body["models"]])


async def test_models_fifo_never_blocks(srv, tmp):
    root = srv.layout[0]
    os.mkfifo(os.path.join(root, "pipe.raw"))
    os.mkfifo(os.path.join(root, "pipe.nhdr"))
    nhdr(os.path.join(root, "fifo.nhdr"), "pipe.raw")
    mhd(os.path.join(root, "fifo.mhd"), "pipe.raw")
    for p in ("fifo.nhdr", "fifo.mhd", "pipe.nhdr"):
        try:
            st, h, body = post_model(srv, os.path.join(root, p), timeout=20)
        except socket.timeout:
            raise Failure("POST /v1/models with %s blocked" % p)
        is_error(st, h, body, 400, "INVAL")
        check("regular file" in body["error"]["message"], "message: %r" % body)
    st, _, _ = request(srv, "GET", "/v1/health")
    check(st == 200, "still serving")


async def test_sigterm_during_a_model_load(srv, tmp):
    """A request still loading a large volume when SIGTERM comes does not hold the shutdown: the
    server stops within 1 s by its own clock."""
    import threading
    root = srv.layout[0]
    n = 384  # 384^3 float32: 216 MiB read and converted, seconds under ASan
    path = os.path.join(root, "big.mha")
    with open(path, "wb") as f:
        f.write(("ObjectType = Image\nNDims = 3\nDimSize = %d %d %d\nElementSpacing = 1 1 1\n"
                 "ElementType = MET_FLOAT\nElementDataFile = LOCAL\n" % (n, n, n)).encode())
        f.truncate(f.tell() + 4 * n ** 3)  # sparse: zeros
    res = {}
    th = threading.Thread(target=lambda: res.setdefault("r", _try(lambda: post_model(srv, path, timeout=120))))
    th.start()
    time.sleep(0.3)
    srv.proc.send_signal(15)
    rc = srv.proc.wait(60)
    th.join(130)
    check(rc == 0, "exit status %d" % rc)
    ms = ts.stop_ms(srv)
    check(ms < 1000, "stopped %.1f ms after SIGTERM, a model load in progress" % ms)
    print("    stopped %.1f ms after SIGTERM; the load request got %s" % (ms, str(res.get("r"))[:60]))


def _try(fn):
    try:
        return fn()[0]
    except OSError as e:
        return "connection closed (%s)" % type(e).__name__


# ---- cross-site requests ----------------------------------------------------------------------

async def test_body_must_be_json(srv, tmp):
    for ctype in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                  "multipart/form-data; boundary=x", None):
        hdr = {"Content-Type": ctype} if ctype else {}
        is_error(*request(srv, "PUT", "/v1/pose", '{"primary_deg": 40}', hdr), 415, "UNSUPPORTED")
        # a body-less POST that a form or fetch() could send with a simple content type
        is_error(*request(srv, "POST", "/v1/acquisition/stop", "", hdr), 415, "UNSUPPORTED") if ctype else None
    st, _, body = request(srv, "GET", "/v1/acquisition")
    check(st == 200 and body["running"], "a refused stop stopped it: %r" % body)
    st, _, body = request(srv, "GET", "/v1/pose")
    check(body["seq"] == 0, "a refused update applied: %r" % body)
    st, _, body = request(srv, "PUT", "/v1/pose", '{"primary_deg": 40}', {"Content-Type": "application/json; charset=utf-8"})
    check(st == 200 and body["seq"] == 1, "JSON with a charset: %d %r" % (st, body))
    st, _, _ = request(srv, "POST", "/v1/acquisition/stop")  # no body, no content type: fine
    check(st == 200, "body-less POST: %d" % st)


async def test_host_checked(srv, tmp):
    for host in ("evil.example", "evil.example:%d" % srv.rest, "127.0.0.1.nip.io:%d" % srv.rest, "localhost.evil"):
        is_error(*request(srv, "GET", "/v1/pose", host=host), 403, "PERM")
        is_error(*request(srv, "PUT", "/v1/pose", '{"primary_deg": 3}', JSON, host=host), 403, "PERM")
    for host in ("127.0.0.1:%d" % srv.rest, "localhost:%d" % srv.rest, "LOCALHOST", "[::1]:%d" % srv.rest,
                 "10.1.2.3:%d" % srv.rest, "twin.example.org:443"):  # IP literals cannot be rebound; --allow-host
        st, _, body = request(srv, "GET", "/v1/pose", host=host)
        check(st == 200, "Host %s: %d %r" % (host, st, body))


async def test_origin_checked(srv, tmp):
    own = "http://127.0.0.1:%d" % srv.rest
    for origin in ("http://evil.example", "null", "http://127.0.0.1:%d" % (srv.rest + 1),
                   "https://127.0.0.1:%d" % srv.rest, "http://localhost.evil:%d" % srv.rest):
        is_error(*request(srv, "POST", "/v1/acquisition/stop", "{}", dict(JSON, Origin=origin)), 403, "PERM")
        is_error(*request(srv, "GET", "/v1/pose", headers={"Origin": origin}), 403, "PERM")
        is_error(*request(srv, "OPTIONS", "/v1/pose", headers={"Origin": origin, "Access-Control-Request-Method": "PUT"}),
                 403, "PERM")
    st, _, body = request(srv, "GET", "/v1/acquisition")
    check(body["running"], "a foreign origin stopped the acquisition")
    for origin in (own, "http://localhost:%d" % srv.rest, "https://console.example"):
        st, h, body = request(srv, "PUT", "/v1/pose", '{"primary_deg": 3}', dict(JSON, Origin=origin))
        check(st == 200, "Origin %s: %d %r" % (origin, st, body))
    st, h, _ = request(srv, "PUT", "/v1/pose", '{"primary_deg": 4}', dict(JSON, Origin="https://console.example"))
    check(h.get("access-control-allow-origin") == "https://console.example", "CORS header: %r" % h)
    st, h, _ = request(srv, "OPTIONS", "/v1/pose", headers={"Origin": "https://console.example",
                                                        "Access-Control-Request-Method": "PUT",
                                                        "Access-Control-Request-Headers": "content-type, authorization"})
    check(st == 204 and "PUT" in h.get("access-control-allow-methods", "")
          and "content-type" in h.get("access-control-allow-headers", "").lower(), "preflight: %d %r" % (st, h))


async def test_ws_origin_host_and_browser_token(srv, tmp):
    url = "ws://127.0.0.1:%d/v1/stream" % srv.ws
    own = "http://127.0.0.1:%d" % srv.rest  # the console page comes from the REST port
    tok = "tok-123"

    async def status(**kw):
        try:
            async with websockets.connect(kw.pop("url", url), open_timeout=30, **kw) as ws:
                await ws.recv()
                return 101, ws.subprotocol
        except websockets.exceptions.InvalidStatusCode as e:
            return e.status_code, None
    auth = {"Authorization": "Bearer " + tok}
    check((await status(origin="http://evil.example", extra_headers=auth))[0] == 403, "foreign origin on the upgrade")
    check((await status(origin="null", extra_headers=auth))[0] == 403, "origin null")
    check((await status(extra_headers=dict(auth, Host="evil.example:%d" % srv.ws)))[0] == 403, "foreign Host")
    check((await status(origin=own, extra_headers=auth))[0] == 101, "own REST origin")
    check((await status(origin="https://console.example", extra_headers=auth))[0] == 101, "--allow-origin")
    # What a browser can send: the token as a subprotocol, or in the query.
    st, proto = await status(origin=own, subprotocols=["xtwin-stream", "bearer." + tok])
    check(st == 101 and proto == "xtwin-stream", "token as subprotocol: %s %s" % (st, proto))
    check((await status(origin=own, subprotocols=["xtwin-stream", "bearer.wrong"]))[0] == 401, "wrong subprotocol token")
    check((await status(origin=own, url=url + "?token=" + tok))[0] == 101, "token in the query")
    check((await status(origin=own, url=url + "?token=wrong"))[0] == 401, "wrong query token")
    check((await status(origin=own))[0] == 401, "no token")


async def test_auth_scheme_case_insensitive(srv, tmp):
    for a in ("bearer s3cret", "BEARER s3cret", "Bearer  s3cret", "bEaReR s3cret"):
        st, _, body = request(srv, "GET", "/v1/pose", headers={"Authorization": a})
        check(st == 200, "%r: %d %r" % (a, st, body))
    for a in ("Bearer S3cret", "Basic s3cret", "Bearers3cret", "s3cret", "Bearer s3cret "):
        is_error(*request(srv, "GET", "/v1/pose", headers={"Authorization": a}), 401, "AUTH")


# ---- every error in JSON; HEAD ----------------------------------------------------------------

def raw(srv, data, source=None, timeout=30):
    """Sends raw bytes, returns everything the server answers until it closes."""
    s = socket.create_connection(("127.0.0.1", srv.rest), timeout=timeout,
                                 source_address=(source, 0) if source else None)
    try:
        s.sendall(data)
        out = b""
        while True:
            b = s.recv(65536)
            if not b:
                return out
            out += b
    finally:
        s.close()


def parse_raw(resp):
    head, _, body = resp.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.") else 0
    hdrs = {}
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.decode("latin-1").partition(":")
        hdrs[k.strip().lower()] = v.strip()
    try:
        return status, hdrs, json.loads(body)
    except ValueError:
        return status, hdrs, body


async def test_every_error_is_json(srv, tmp):
    host = b"Host: 127.0.0.1\r\n"
    for n in (9000, 20000, 200000):  # long URIs: beyond any buffer
        is_error(*parse_raw(raw(srv, b"GET /v1/" + b"a" * n + b" HTTP/1.1\r\n" + host + b"\r\n")), 414, "TOOLARGE")
    is_error(*parse_raw(raw(srv, b"GET /v1/pose HTTP/1.1\r\n" + host + b"X-Big: " + b"b" * 40000 + b"\r\n\r\n")), 431,
             "TOOLARGE")
    is_error(*parse_raw(raw(srv, b"GET /v1/pose HTTP/1.1\r\n" + host + b"".join(b"X-%d: v\r\n" % i for i in range(3000))
                            + b"\r\n")), 431, "TOOLARGE")
    for bad in (b"NONSENSE\r\n\r\n", b"GET /v1/pose HTTP/9.9\r\n\r\n", b"GET /v1/pose HTTP/1.1\r\nNo colon here\r\n\r\n",
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"):
        is_error(*parse_raw(raw(srv, bad)), 400, "FORMAT")
    st, h, body = request(srv, "GET", "/v1/pose")
    check(st == 200, "still serving")


async def test_head_on_get_routes(srv, tmp):
    for path in ("/v1/health", "/v1/info", "/v1/pose", "/v1/acquisition", "/v1/models", "/metrics"):
        st, h, body = request(srv, "HEAD", path)
        check(st == 200 and body == b"", "HEAD %s: %d %r" % (path, st, body))
        st2, h2, _ = request(srv, "GET", path)
        check(h.get("content-type") == h2.get("content-type"), "HEAD %s content type" % path)
    st, h, body = request(srv, "HEAD", "/v1/acquisition/start")
    check(st == 405 and "POST" in h.get("allow", ""), "HEAD on a POST route: %d %r" % (st, h))
    st, h, body = request(srv, "HEAD", "/v1/nothing")
    check(st == 404, "HEAD on no route: %d" % st)


# ---- early errors reach clients that are still uploading ---------------------------------------

def urllib_put(srv, size, headers=None):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/pose" % srv.rest, data=b" " * size, method="PUT",
                                 headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def test_early_errors_reach_uploading_clients(srv, tmp):
    for size in (4 << 20, 64 << 20):
        st, body = urllib_put(srv, size, {"Authorization": "Bearer t"})
        check(st == 413 and body["error"]["name"] == "TOOLARGE", "urllib %d MiB: %d %r" % (size >> 20, st, body))
        st, body = urllib_put(srv, size, {"Authorization": "Bearer wrong"})
        check(st == 401 and body["error"]["name"] == "AUTH", "urllib, wrong token, %d MiB: %d %r" % (size >> 20, st, body))
        st, body = urllib_put(srv, size, {"Content-Type": "text/plain", "Authorization": "Bearer t"})
        check(st == 413, "urllib, text/plain, %d MiB: %d %r" % (size >> 20, st, body))
    try:
        import requests
    except ImportError:
        print("    python3-requests missing: the requests half skipped")
        return
    r = requests.put("http://127.0.0.1:%d/v1/pose" % srv.rest, data=b" " * (64 << 20),
                     headers={"Content-Type": "application/json", "Authorization": "Bearer t"}, timeout=60)
    check(r.status_code == 413 and r.json()["error"]["name"] == "TOOLARGE", "requests 64 MiB: %d" % r.status_code)
    r = requests.put("http://127.0.0.1:%d/v1/pose" % srv.rest, data=b" " * (4 << 20), timeout=60,
                     headers={"Content-Type": "application/json"})
    check(r.status_code == 401 and r.json()["error"]["name"] == "AUTH", "requests 4 MiB no token: %d" % r.status_code)
    # curl, which reads early answers (Expect: 100-continue), still gets them
    out = subprocess.run(["curl", "-s", "-o", "/dev/stdout", "-w", "\n%{http_code}", "-X", "PUT", "-H",
                          "Content-Type: application/json", "-H", "Authorization: Bearer t", "--data-binary",
                          "@" + srv.big, "http://127.0.0.1:%d/v1/pose" % srv.rest], capture_output=True, timeout=60)
    text, _, code = out.stdout.rpartition(b"\n")
    check(code == b"413" and json.loads(text)["error"]["name"] == "TOOLARGE", "curl: %r" % out.stdout[-200:])


# ---- slowloris --------------------------------------------------------------------------------

async def test_slowloris_per_address_and_head_deadline(srv, tmp):
    """300 connections from one address that trickle header lines: beyond --max-per-addr they are
    refused at once (503, JSON), the rest are cut at the head deadline (408, JSON), and a client
    from another address is served throughout."""
    socks = []
    for _ in range(300):
        s = socket.create_connection(("127.0.0.1", srv.rest), timeout=30)
        s.sendall(b"GET /v1/pose HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(s)
    t0 = time.monotonic()
    # a healthy client from 127.0.0.2 (a different address on loopback)
    for _ in range(5):
        st, _, body = request(srv, "GET", "/v1/pose", source="127.0.0.2")
        check(st == 200, "healthy client: %d %r" % (st, body))
    # Keep trickling: a line every 0.3 s would keep the idle timeout away forever.
    answers = {}
    deadline = t0 + 60
    while len(answers) < len(socks) and time.monotonic() < deadline:
        for i, s in enumerate(socks):
            if i in answers:
                continue
            try:
                s.setblocking(False)
                data = s.recv(65536)
                s.setblocking(True)
                answers[i] = data
                continue
            except BlockingIOError:
                s.setblocking(True)
            except OSError as e:
                answers[i] = b"error " + str(e).encode()
                continue
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError as e:
                answers[i] = b"error " + str(e).encode()
        time.sleep(0.3)
    for s in socks:
        s.close()
    check(len(answers) == len(socks), "%d of %d slow connections never cut" % (len(socks) - len(answers), len(socks)))
    codes = {}
    for data in answers.values():
        st = parse_raw(data)[0] if data.startswith(b"HTTP/") else data[:60]
        codes[st] = codes.get(st, 0) + 1
    check(codes.get(503, 0) >= 300 - 16 and codes.get(408, 0) >= 1 and set(codes) <= {503, 408},
          "answers to the slow connections: %r" % codes)
    for data in answers.values():
        st, h, body = parse_raw(data)
        is_error(st, h, body, st)
    st, _, body = request(srv, "GET", "/v1/pose")
    check(st == 200, "serving 127.0.0.1 again once they are gone: %d %r" % (st, body))


TESTS = [
    (test_models_refused_without_root, []),
    (test_models_confined_to_roots, ["--model-root", "{root}"]),
    (test_models_fifo_never_blocks, ["--model-root", "{root}"]),
    (test_sigterm_during_a_model_load, ["--model-root", "{root}"]),
    (test_body_must_be_json, []),
    (test_host_checked, ["--allow-host", "twin.example.org"]),
    (test_origin_checked, ["--allow-origin", "https://console.example"]),
    (test_ws_origin_host_and_browser_token, ["--token", "tok-123", "--allow-origin", "https://console.example"]),
    (test_auth_scheme_case_insensitive, ["--token", "s3cret"]),
    (test_every_error_is_json, []),
    (test_head_on_get_routes, []),
    (test_early_errors_reach_uploading_clients, ["--token", "t"]),
    (test_slowloris_per_address_and_head_deadline, ["--max-per-addr", "16", "--head-timeout", "2"]),
]


def run_one(fn, extra, timeout):
    import asyncio
    import shutil
    tmp = tempfile.mkdtemp(prefix="xtwin-security-")
    srv = None
    try:
        layout = roots_layout(tmp)
        big = os.path.join(tmp, "big.json")
        with open(big, "wb") as f:
            f.write(b" " * (4 << 20))
        srv = Server(*[a.replace("{root}", layout[0]) for a in extra])
        srv.layout, srv.big = layout, big
        asyncio.run(asyncio.wait_for(fn(srv, tmp), timeout))
        # SIGTERM after all of it: exits 0, within 1 s by its own clock (a stuck request must not hold it)
        if srv.proc.poll() is None:
            srv.proc.send_signal(15)
            check(srv.proc.wait(60) == 0, "exit status after SIGTERM")
            check(ts.stop_ms(srv) < 1000, "stopped %.1f ms after SIGTERM" % ts.stop_ms(srv))
        shutil.rmtree(srv.dir, ignore_errors=True)
        return None
    except Exception as e:  # noqa: BLE001 - a test's failure, reported and counted
        return ts.failure(e, srv)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(ts.run_main(TESTS, run_one))
