#!/usr/bin/python3
"""POST /v1/models: paths confined before any file access, and unique model names (issue 22,
points 1 and 4), over a real socket against the real binary.

    /usr/bin/python3 tests/server/test_model_paths.py --server build/server/xtwin-server [test ...]

Paths. With --model-root R, a path outside R answers 403 PERM with one and the same body (the path
sent substituted) whether it names a regular file, a folder, a FIFO, a mode-000 file or nothing,
for every model kind (NIfTI, MetaImage, NRRD, DICOM file / folder / #SERIES / @LIST, NanoVDB,
the three mixture formats, no suffix at all), reached directly, by '..' out of R, through a
symlinked folder or a symlink in R (dangling ones included), and for @LIST files inside R naming
entries outside (also after an entry inside R that is not DICOM: every entry is confined before
any is read). The oracle that nothing outside was touched is the kernel's: the server runs under
`strace -f -e trace=%file` (every system call that takes a file name) and no call between two
marker requests names an outside path; a control request inside R shows that the trace sees the
loader's own accesses. A path inside R that does not exist answers 404 NOTFOUND, as
docs/server.md promises; a root named through a symlinked parent still works by either path.

Names. A second model with a name already loaded answers 409 EXISTS naming the name, and the
first model is untouched (its source and size, from GET /v1/models); "replace" is not an accepted
key (400). Unnamed models with one file name get distinct default names ("head.mha", then
"head.mha~2", ...), at start and by POST; two start-up models given one name stop the start with
an error naming the name and both paths.
Exit 0: all passed; 1: a failure; 77: python3-websockets missing.
"""
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_stream as ts  # noqa: E402  (exits 77 when python3-websockets is missing)
from test_security import JSON, is_error, mha, post_model, request  # noqa: E402
from test_stream import Failure, Server, check  # noqa: E402

# Every suffix a reader is picked by, and none (DICOM is sniffed by content).
EXTS = [".nii", ".nii.gz", ".mha", ".mhd", ".nrrd", ".nhdr", ".dcm", ".nvdb", ".xgmm", ".gmm", ".gmm.json", ""]
KINDS = ["file", "dir", "pipe", "locked", "missing"]  # what the outside name is
OUTSIDE_MSG = "<P>: outside the model folders (--model-root)"


def outside_layout(tmp, root):
    """Outside R: for every suffix a file (bytes a reader would reject: reading it gives 400, not
    403), a folder, a FIFO, a mode-000 file, and a name that does not exist."""
    out = os.path.join(tmp, "outside-" + uuid.uuid4().hex[:8])
    os.makedirs(out)
    for ext in EXTS:
        with open(os.path.join(out, "file" + ext), "wb") as f:
            f.write(b"\0" * 128 + b"DICM" + b"not a model" * 8)
        os.makedirs(os.path.join(out, "dir" + ext))
        with open(os.path.join(out, "dir" + ext, "a.dcm"), "wb") as f:
            f.write(b"\0" * 128 + b"DICM")
        os.mkfifo(os.path.join(out, "pipe" + ext))
        p = os.path.join(out, "locked" + ext)
        with open(p, "wb") as f:
            f.write(b"x" * 64)
        os.chmod(p, 0)
    os.symlink(out, os.path.join(root, "out"))  # a folder in R that is a symlink out of it
    return out


def refused_paths(root, out):
    """(path sent, entry outside or None): every way to name something outside R."""
    rel = os.path.relpath(out, root)  # "../outside-xxxx"
    paths = [("/etc/passwd", None), ("/root", None), ("/root/nonexistent", None), ("/nonexistent/x", None),
             ("/", None), (root + "/..", None), (os.path.join(root, "..", "x"), None)]
    for ext in EXTS:
        for kind in KINDS:
            name = kind + ext
            paths += [(os.path.join(out, name), None),                     # directly
                      (os.path.join(root, rel, name), None),               # '..' out of R
                      (os.path.join(root, "out", name), None),             # through a symlinked folder
                      (os.path.join(root, "sub", "..", "out", name), None),
                      (os.path.join(root, "link-" + name), None),          # a symlink in R (dangling too)
                      ("@" + os.path.join(out, name), None),               # an @LIST outside
                      ("@" + os.path.join(root, "list-" + name), os.path.join(out, name)),  # entries outside
                      ("@" + os.path.join(root, "rel-" + name), os.path.join(root, rel, name))]
            if kind == "dir":  # DICOM: PATH#SERIES
                paths += [(os.path.join(out, name) + "#1", None), (os.path.join(root, "out", name) + "#1", None)]
    paths.append(("@" + os.path.join(root, "mixed.list"), os.path.join(out, "file.dcm")))
    return paths


def inside_links(root, out):
    os.makedirs(os.path.join(root, "sub"), exist_ok=True)
    rel = os.path.relpath(out, root)
    for ext in EXTS:
        for kind in KINDS:
            name = kind + ext
            os.symlink(os.path.join(out, name), os.path.join(root, "link-" + name))
            with open(os.path.join(root, "list-" + name), "w") as f:
                f.write(os.path.join(out, name) + "\n")
            with open(os.path.join(root, "rel-" + name), "w") as f:
                f.write(os.path.join(rel, name) + "\n")
    with open(os.path.join(root, "inside.dcm"), "wb") as f:  # inside R, not DICOM: reading it fails (400)
        f.write(b"not dicom at all" * 16)
    with open(os.path.join(root, "mixed.list"), "w") as f:
        f.write("inside.dcm\n" + os.path.join(out, "file.dcm") + "\n")


def normalised(body, sent, entry):
    """The error with the path sent (and the list entry) replaced: what must not vary."""
    e = dict(body["error"])
    msg = e["message"]
    if entry:
        msg = msg.replace(entry, "<E>", 1)
    e["message"] = msg.replace(sent, "<P>", 1)
    return json.dumps(e, sort_keys=True)


def strace_works():
    try:
        r = subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=%file", "true"],
                           capture_output=True, timeout=60)
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


class TracedServer(Server):
    """The real binary under `strace -f -e trace=%file`: every system call that takes a file name,
    with the name, in a log read once the server has exited. LeakSanitizer cannot run under a
    tracer (it ptraces itself), so leaks are not checked here (test_server_security does)."""

    def __init__(self, log, *extra):
        wrapper = os.path.join(os.path.dirname(log), "traced-server")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" exec strace -f -qq '
                    '-e signal=none -e trace=%%file -o %s %s "$@"\n' % (log, ts.SERVER))
        os.chmod(wrapper, 0o755)
        real, ts.SERVER = ts.SERVER, wrapper
        try:
            super().__init__(*extra)
        finally:
            ts.SERVER = real

    def server_pid(self):
        """The traced server: strace's child."""
        try:
            with open("/proc/%d/task/%d/children" % (self.proc.pid, self.proc.pid)) as f:
                kids = f.read().split()
            return int(kids[0]) if kids else None
        except (OSError, ValueError):
            return None

    def stop(self, timeout=60):
        """SIGTERM to the server itself (strace would forward it and exit by the signal); strace
        exits with the server's status."""
        pid = self.server_pid()
        check(pid is not None, "no traced server process")
        os.kill(pid, signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise Failure("traced server did not exit within %g s of SIGTERM" % timeout)
        check(rc == 0, "traced server exited %d: %s" % (rc, self.output()))

    def kill(self):
        pid = self.server_pid() if self.proc.poll() is None else None
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        super().kill()


def touched(log, begin, end):
    """(file name, whole call) for the traced calls between the two marker requests; a call that
    another thread's interrupted ("<unfinished ...>" ... "<... resumed>") is joined again."""
    calls, on, open_ = [], False, {}
    pat = re.compile(r'"((?:[^"\\]|\\.)*)"')
    with open(log, errors="replace") as f:
        for line in f:
            pid, _, rest = line.strip().partition(" ")  # "PID  call": the pid is padded to 5 columns
            rest = rest.lstrip()
            if rest.endswith("<unfinished ...>"):
                open_[pid] = rest[:-len("<unfinished ...>")]
                continue
            if rest.startswith("<... ") and pid in open_:
                rest = open_.pop(pid) + rest[rest.index("resumed>") + len("resumed>"):]
            m = pat.search(rest)
            if not m:
                continue
            name = m.group(1)
            if begin in name:
                on = True
            elif end in name:
                break
            elif on:
                calls.append((name, rest))
    check(on, "the begin marker is not in the trace")
    return calls


def follows_links(call):
    """Whether the call follows a symbolic link at its last component (a lookup of the link itself
    does not: readlink, lstat, AT_SYMLINK_NOFOLLOW, O_NOFOLLOW)."""
    return not (call.startswith("readlink") or call.startswith("lstat") or "AT_SYMLINK_NOFOLLOW" in call
                or "O_NOFOLLOW" in call)


def outside_calls(calls, root, out):
    """The calls that looked at something outside R: a name under the outside folder (after a
    lexical '..'), through the symlinked folder R/out, one of the fixed outside names, or a
    symlink in R out of it followed rather than read."""
    fixed = {"/etc/passwd", "/root", "/nonexistent", "/nonexistent/x", os.path.dirname(root) + "/x"}
    bad = []
    for name, call in calls:
        n = os.path.normpath(name)
        if (n == out or n.startswith(out + "/") or n in fixed or n.startswith("/root/")
                or name.startswith(os.path.join(root, "out") + "/")):
            bad.append(call)
        elif (name == os.path.join(root, "out") or os.path.basename(name).startswith("link-")) and follows_links(call):
            bad.append(call)
    return bad


# ---- paths --------------------------------------------------------------------------------------

def test_outside_refused_before_any_access(tmp):
    if not strace_works():
        return "SKIP strace is missing or cannot trace here (scripts/install-deps installs it)"
    root = os.path.join(tmp, "models")
    os.makedirs(root)
    out = outside_layout(tmp, root)
    inside_links(root, out)
    mha(os.path.join(root, "ok.mha"))
    log = os.path.join(tmp, "strace.log")
    srv = TracedServer(log, "--model-root", root)
    try:
        mark = uuid.uuid4().hex
        begin, end = os.path.join(root, "BEGIN-" + mark), os.path.join(root, "END-" + mark)
        is_error(*post_model(srv, begin + ".mha"), 404, "NOTFOUND")
        bodies, wrong = {}, []
        for sent, entry in refused_paths(root, out):
            st, h, body = post_model(srv, sent, timeout=60)
            if st != 403:  # collected, so that the trace is judged as well
                wrong.append("%s: %d %.200s" % (sent, st, body))
                continue
            is_error(st, h, body, 403, "PERM")
            bodies.setdefault("list entry" if entry else "path", {}).setdefault(
                normalised(body, sent, entry), []).append(sent)
        st, _, body = post_model(srv, os.path.join(root, "ok.mha"))  # the control: read, and seen read
        check(st == 201, "ok.mha inside the root: %d %r" % (st, body))
        is_error(*post_model(srv, end + ".mha"), 404, "NOTFOUND")
        st, _, body = request(srv, "GET", "/v1/models")
        check(st == 200 and len(body["models"]) == 2, "models: %r" % [m["name"] for m in body["models"]])
        srv.stop()
    finally:
        srv.kill()
    names = touched(log, "BEGIN-" + mark, "END-" + mark)
    bad = outside_calls(names, root, out)
    check(not wrong and not bad, "%d of %d outside paths not answered 403, e.g.:\n    %s\n"
          "%d file-name system calls on paths outside the root, e.g.:\n    %s" % (
              len(wrong), len(refused_paths(root, out)), "\n    ".join(wrong[:6]), len(bad), "\n    ".join(bad[:10])))
    for what, seen in bodies.items():
        check(len(seen) == 1, "403 bodies for a %s outside differ: %s" % (
            what, "; ".join("%s (e.g. %s)" % (b, v[0]) for b, v in seen.items())))
    want = json.dumps({"message": OUTSIDE_MSG, "name": "PERM", "status": 403}, sort_keys=True)
    check(list(bodies["path"]) == [want], "403 body %s, want %s" % (list(bodies["path"]), want))
    check(any(n == os.path.join(root, "ok.mha") for n, _ in names),
          "the trace does not show ok.mha being read: the oracle is blind")
    print("    %d refused paths, one 403 body each way; %d file-name calls traced, none outside"
          % (sum(len(v) for s in bodies.values() for v in s.values()), len(names)))


def test_missing_inside_is_404(tmp):
    root = os.path.join(tmp, "models")
    os.makedirs(os.path.join(root, "sub"))
    os.symlink(os.path.join(root, "ghost.mha"), os.path.join(root, "dangling.mha"))  # dangling, inside
    os.symlink(os.path.join(root, "sub"), os.path.join(root, "subdir"))
    mha(os.path.join(root, "ok.mha"))
    srv = Server("--model-root", root)
    try:
        for p in ("nope.mha", "nope.nvdb", "nope.xgmm", "nope.gmm.json", "nope", "nope.dcm", "sub/nope.nii.gz",
                  "nodir/x.mha", "dangling.mha", "subdir/nope.nrrd", "sub/../nope.mha", "subdir/../nope.mha",
                  "nodir#1", "ok.mha/x.mha"):
            st, h, body = post_model(srv, os.path.join(root, p))
            is_error(st, h, body, 404, "NOTFOUND")
        is_error(*post_model(srv, "@" + os.path.join(root, "nope.list")), 404, "NOTFOUND")
        st, _, body = post_model(srv, os.path.join(root, "subdir", "..", "ok.mha"))  # the kernel's '..': R/ok.mha
        check(st == 201, "subdir/../ok.mha (R/ok.mha): %d %r" % (st, body))
        srv.stop()
    finally:
        srv.kill()


def test_root_named_through_a_symlink(tmp):
    """--model-root given through a symlinked parent (/data -> /mnt/disk/data): the client may name
    files by that path or the resolved one; the link's target beside the root stays outside."""
    real = os.path.join(tmp, "disk")
    os.makedirs(os.path.join(real, "models"))
    os.symlink(real, os.path.join(tmp, "data"))
    mha(os.path.join(real, "models", "ok.mha"))
    mha(os.path.join(real, "beside.mha"))
    srv = Server("--model-root", os.path.join(tmp, "data", "models"))
    try:
        for i, p in enumerate((os.path.join(tmp, "data", "models", "ok.mha"), os.path.join(real, "models", "ok.mha"))):
            st, _, body = request(srv, "POST", "/v1/models", json.dumps({"path": p, "name": "m%d" % i}), JSON)
            check(st == 201, "%s: %d %r" % (p, st, body))
        for p in (os.path.join(tmp, "data", "beside.mha"), os.path.join(real, "beside.mha"),
                  os.path.join(tmp, "data", "models", "..", "beside.mha")):
            is_error(*post_model(srv, p), 403, "PERM")
        is_error(*post_model(srv, os.path.join(tmp, "data", "models", "nope.mha")), 404, "NOTFOUND")
        srv.stop()
    finally:
        srv.kill()


# ---- names --------------------------------------------------------------------------------------

def models_of(srv):
    st, _, body = request(srv, "GET", "/v1/models")
    check(st == 200, "GET /v1/models: %d %r" % (st, body))
    return body["models"]


def test_names_unique(tmp):
    root = os.path.join(tmp, "models")
    for d in ("a", "b", "c"):
        os.makedirs(os.path.join(root, d))
        mha(os.path.join(root, d, "head.mha"), n={"a": 8, "b": 6, "c": 4}[d])
    srv = Server("--model-root", root)
    try:
        a, b, c = (os.path.join(root, d, "head.mha") for d in "abc")
        post = lambda body: request(srv, "POST", "/v1/models", json.dumps(body), JSON)  # noqa: E731
        st, _, body = post({"path": a, "name": "ct"})
        check(st == 201, "first 'ct': %d %r" % (st, body))
        st, h, body = post({"path": b, "name": "ct"})
        is_error(st, h, body, 409, "EXISTS")
        check('"ct"' in body["error"]["message"], "the 409 names the name: %r" % body)
        ct = [m for m in models_of(srv) if m["name"] == "ct"]
        check(len(ct) == 1 and ct[0]["source"] == a and ct[0]["dim"] == [8, 8, 8],
              "the first 'ct' untouched (source %s, 8^3): %r" % (a, ct))
        st, h, body = post({"path": b, "name": "ct", "replace": True})
        is_error(st, h, body, 400, "INVAL")
        # unnamed: the file name, made unique
        for p in (a, b, c):
            st, _, body = post({"path": p})
            check(st == 201, "unnamed %s: %d %r" % (p, st, body))
        got = {m["name"]: (m["source"], m["dim"][0]) for m in models_of(srv) if m.get("source", "").startswith(root)}
        want = {"ct": (a, 8), "head.mha": (a, 8), "head.mha~2": (b, 6), "head.mha~3": (c, 4)}
        check(got == want, "names %r, want %r" % (got, want))
        names = [m["name"] for m in models_of(srv)]
        check(len(names) == len(set(names)), "names not unique: %r" % names)
        # a given name is never made unique: it collides with a default name as with any other
        st, h, body = post({"path": c, "name": "head.mha~2"})
        is_error(st, h, body, 409, "EXISTS")
        check(len(models_of(srv)) == len(names), "nothing added by the refused requests")
        srv.stop()
    finally:
        srv.kill()


def test_names_at_start(tmp):
    root = os.path.join(tmp, "models")
    for d in ("a", "b"):
        os.makedirs(os.path.join(root, d))
        mha(os.path.join(root, d, "head.mha"))
    a, b = (os.path.join(root, d, "head.mha") for d in "ab")
    srv = Server("--model", a, "--model", b)  # unnamed, one file name: distinct default names
    try:
        got = sorted((m["name"], m["source"]) for m in models_of(srv))
        check(got == [("head.mha", a), ("head.mha~2", b)], "models at start: %r" % got)
        srv.stop()
    finally:
        srv.kill()
    cfg = os.path.join(tmp, "dup.json")
    with open(cfg, "w") as f:
        json.dump({"models": [{"path": a, "name": "ct"}, {"path": b, "name": "ct"}]}, f)
    try:
        srv = Server("--config", cfg)
    except Failure as e:
        text = str(e)
        check("server exited at start" in text, "start: %s" % text)
        check('"ct"' in text and a in text and b in text, "the start-up error names the name and both paths: %s" % text)
        return None
    srv.kill()
    raise Failure("two start-up models named 'ct': the server started")


def test_phantom_name_taken_at_start(tmp):
    """The built-in phantom's name is as unique as any other: a start-up model that takes it
    fails the start when the phantom is asked for too."""
    root = os.path.join(tmp, "models")
    os.makedirs(root)
    a = os.path.join(root, "head.mha")
    mha(a)
    cfg = os.path.join(tmp, "clash.json")
    with open(cfg, "w") as f:
        json.dump({"models": [{"path": a, "name": "head"}], "phantom": "head"}, f)
    try:
        srv = Server("--config", cfg)
    except Failure as e:
        text = str(e)
        check('"head"' in text and a in text, "the start-up error names the name and the path: %s" % text)
        return None
    srv.kill()
    raise Failure("a start-up model named like the phantom, with --phantom head: the server started")


TESTS = [
    (test_outside_refused_before_any_access, []),
    (test_missing_inside_is_404, []),
    (test_root_named_through_a_symlink, []),
    (test_names_unique, []),
    (test_names_at_start, []),
    (test_phantom_name_taken_at_start, []),
]


def run_one(fn, extra, timeout):
    tmp = tempfile.mkdtemp(prefix="xtwin-model-paths-")
    try:
        r = fn(tmp)
        return r if isinstance(r, str) else None
    except Exception as e:  # noqa: BLE001 - a test's failure, reported and counted
        return ts.failure(e, None)
    finally:
        for d, _, files in os.walk(tmp):  # mode-000 files: removable anyway, but be tidy as non-root
            for f in files:
                p = os.path.join(d, f)
                if not os.path.islink(p) and stat.S_ISREG(os.lstat(p).st_mode):
                    os.chmod(p, 0o600)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(ts.run_main(TESTS, run_one))
