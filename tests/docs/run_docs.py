#!/usr/bin/python3
"""test_docs: the documentation's examples run as written.

Every fenced block of README.md and docs/*.md marked runnable by an HTML comment on the line
before its opening fence is run, on the CPU, in a fresh working folder that holds what the
examples expect beside them:

  <!-- runnable -->                 a sh block: run with bash (set -e, pipefail)
  <!-- runnable: server -->         the same with an xtwin-server started first (CPU, small); its
                                    ports replace 8710 and 8711 in the block
  <!-- runnable: transcript -->     a transcript: the lines starting "$ " are run
  <!-- runnable: file=NAME -->      the block is written to NAME (a spec the next blocks use)

The folder has build-release -> the build under test (the paths the README names), api, tests,
scripts -> the source tree, an empty docs/ (the console screenshot lands there), the programs
xtwin, xtwin-server, xtwin-health on the PATH, and the sample data tests/docs/make_sample.py
writes: ct.nii.gz, seg.nii.gz. A block fails when it exits non-zero or prints a warning; exit 77
of a block (a test that skips itself: no chromium) is reported as skipped. Exit 0 pass, 1 fail.

Usage: run_docs.py --build BUILD --source SRC --out DIR [--only FILE]"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

MARK = re.compile(r"^<!--\s*runnable(?::\s*(.*?))?\s*-->\s*$")
WARN = re.compile(r"warning", re.I)


def blocks(path):
    """(line, kind, arg, text) of each marked block of a Markdown file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = MARK.match(lines[i].strip())
        if m and i + 1 < len(lines) and lines[i + 1].startswith("```"):
            spec = (m.group(1) or "").strip()
            j = i + 2
            body = []
            while j < len(lines) and not lines[j].startswith("```"):
                body.append(lines[j])
                j += 1
            kind, arg = "sh", None
            if spec == "server":
                kind = "server"
            elif spec == "transcript":
                kind = "transcript"
            elif spec.startswith("file="):
                kind, arg = "file", spec[5:]
            elif spec:
                raise SystemExit("%s:%d: unknown runnable marker %r" % (path, i + 1, spec))
            out.append((i + 1, kind, arg, "\n".join(body) + "\n"))
            i = j
        i += 1
    return out


def start_server(work, bindir):
    ports = os.path.join(work, "ports.json")
    log = open(os.path.join(work, "server.log"), "w")
    p = subprocess.Popen([os.path.join(bindir, "xtwin-server"), "--backend", "cpu", "--rest-port", "0", "--ws-port", "0",
                          "--ports-file", ports, "--mode", "fd20-128", "--phantom-dim", "64", "--phantom-spacing", "3"],
                         stdout=log, stderr=subprocess.STDOUT, cwd=work)
    for _ in range(600):
        if os.path.exists(ports):
            return p, json.load(open(ports))
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    raise RuntimeError("xtwin-server did not start:\n" + open(os.path.join(work, "server.log")).read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", help="one Markdown file (relative to the source)")
    a = ap.parse_args()
    src, build = os.path.abspath(a.source), os.path.abspath(a.build)
    work = os.path.join(os.path.abspath(a.out), "work")
    bindir = os.path.join(os.path.abspath(a.out), "bin")
    shutil.rmtree(os.path.abspath(a.out), ignore_errors=True)
    os.makedirs(work)
    os.makedirs(bindir)
    os.makedirs(os.path.join(work, "docs"))
    os.symlink(build, os.path.join(work, "build-release"))
    for d in ("api", "tests", "scripts"):
        os.symlink(os.path.join(src, d), os.path.join(work, d))
    for prog, rel in (("xtwin", "tools/xtwin"), ("xtwin-server", "server/xtwin-server"), ("xtwin-health", "docker/xtwin-health")):
        if os.path.exists(os.path.join(build, rel)):
            os.symlink(os.path.join(build, rel), os.path.join(bindir, prog))
    subprocess.run([sys.executable, os.path.join(src, "tests", "docs", "make_sample.py"), work], check=True,
                   stdout=subprocess.DEVNULL)
    # HOME: the examples that install under ~ install into the working folder
    env = dict(os.environ, PATH=bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin"), HOME=work)

    files = [a.only] if a.only else ["README.md"] + sorted(os.path.relpath(f, src) for f in glob.glob(os.path.join(src, "docs", "*.md")))
    ran = skipped = failed = 0
    t_all = time.time()
    for rel in files:
        for line, kind, arg, text in blocks(os.path.join(src, rel)):
            where = "%s:%d" % (rel, line)
            if kind == "file":
                with open(os.path.join(work, arg), "w") as f:
                    f.write(text)
                print("  %s: wrote %s" % (where, arg))
                continue
            if kind == "transcript":
                text = "\n".join(l[2:] for l in text.split("\n") if l.startswith("$ ")) + "\n"
            srv = None
            if kind == "server":
                srv, ports = start_server(work, bindir)
                text = text.replace(":8710", ":%d" % ports["rest"]).replace(":8711", ":%d" % ports["ws"])
            t0 = time.time()
            try:
                r = subprocess.run(["bash", "-c", "set -eo pipefail\n" + text], cwd=work, env=env, timeout=240,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
                rc, out = r.returncode, r.stdout
            except subprocess.TimeoutExpired as e:
                rc, out = -1, (e.stdout or b"").decode("utf-8", "replace") + "\n(timed out after 240 s)"
            finally:
                if srv:
                    srv.terminate()
                    try:
                        srv.wait(10)
                    except subprocess.TimeoutExpired:
                        srv.kill()
            dt = time.time() - t0
            warn = [l for l in out.split("\n") if WARN.search(l)]
            if rc == 77:
                skipped += 1
                print("  SKIP %s (%.1f s): %s" % (where, dt, out.strip().split("\n")[-1]))
            elif rc != 0 or warn:
                failed += 1
                print("  FAIL %s (%.1f s): exit %d%s\n----\n%s----\n%s" % (
                    where, dt, rc, ", a warning: " + warn[0] if warn else "", text, out[-3000:]))
            else:
                ran += 1
                print("  ok   %s (%.1f s)" % (where, dt))
    print("test_docs: %d blocks ran, %d skipped, %d failed in %.1f s" % (ran, skipped, failed, time.time() - t_all))
    if ran + skipped + failed == 0:
        print("test_docs: no runnable block found")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
