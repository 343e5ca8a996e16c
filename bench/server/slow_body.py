#!/usr/bin/python3
"""The slow-body attack of issue 22 against xtwin-server, and what it costs the server:

    /usr/bin/python3 bench/server/slow_body.py --server build/server/xtwin-server [--seconds 60] \
        [--connections 300] [--addrs 10] [--period 5] [--token T] [--server-args "..."]

The attack (tests/server/test_http_strict.py's SlowBodies): --connections connections from
--addrs loopback addresses (127.0.0.2, ...), each a complete "PUT /v1/pose" head with
Content-Length: 60000 and no token, then one body byte every --period s; whatever the server
answers or closes is replaced at once by a new connection. Meanwhile GET /v1/health from
127.0.0.1 every 0.2 s (with --token when given), and every second the server's RSS and open
descriptors from /proc.

Printed (a Markdown table for docs/BENCHMARKS.md): /v1/health time to answer p50/p99/max and
failures, before and during the attack; the attack's connections open (mean, peak), opened and
how the server answered them; the server's open descriptors and RSS, before and at their peak
during the attack. Run it against an older binary to see the attack work (it passes no option
that binary lacks unless --server-args does).
"""
import argparse
import http.client
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "server"))
from test_http_strict import SlowBodies  # noqa: E402

BASE = ["--backend", "cpu", "--threads", "2", "--phantom-dim", "128", "--phantom-spacing", "2", "--mode", "fd20-128",
        "--fps", "30"]


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))] if v else float("nan")


def proc_sample(pid):
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir("/proc/%d/fd" % pid))


def health(port, token):
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=("127.0.0.1", 0))
    try:
        c.request("GET", "/v1/health", headers={"Authorization": "Bearer " + token} if token else {})
        r = c.getresponse()
        r.read()
        st = r.status
    except (OSError, http.client.HTTPException) as e:
        st = type(e).__name__
    finally:
        c.close()
    return time.monotonic() - t0, st


def phase(srv, port, token, seconds, attack=None):
    """Health probes every 0.2 s and /proc samples every second for `seconds`."""
    probes, samples = [], []
    t_end = time.monotonic() + seconds
    next_sample = 0.0
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        probes.append(health(port, token))
        if t0 >= next_sample:
            samples.append(proc_sample(srv.pid) + ((attack.open,) if attack else (0,)))
            next_sample = t0 + 1.0
        time.sleep(max(0.0, 0.2 - (time.monotonic() - t0)))
    return probes, samples


def summary(probes):
    ok = [dt for dt, st in probes if st == 200]
    bad = {}
    for _, st in probes:
        if st != 200:
            bad[st] = bad.get(st, 0) + 1
    if not ok:
        return "%d probes, none answered: %s" % (len(probes), bad)
    return "%d probes, p50 %.1f ms, p99 %.1f ms, max %.1f ms, failed %s" % (
        len(probes), pct(ok, 50) * 1e3, pct(ok, 99) * 1e3, max(ok) * 1e3, bad or "none")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--connections", type=int, default=300)
    ap.add_argument("--addrs", type=int, default=10)
    ap.add_argument("--period", type=float, default=5.0)
    ap.add_argument("--token", default="")
    ap.add_argument("--server-args", default="")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="xtwin-slow-body-")
    ports = os.path.join(tmp, "ports.json")
    args = [a.server, "--rest-port", "0", "--ws-port", "0", "--ports-file", ports] + BASE + shlex.split(a.server_args)
    if a.token:
        args += ["--token", a.token]
    log = open(os.path.join(tmp, "server.log"), "wb")
    srv = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        t_end = time.monotonic() + 60
        while not os.path.exists(ports):
            if srv.poll() is not None or time.monotonic() > t_end:
                sys.exit("server did not start: " + open(os.path.join(tmp, "server.log")).read()[-2000:])
            time.sleep(0.05)
        time.sleep(0.2)
        port = json.load(open(ports))["rest"]
        base_probes, base_samples = phase(srv, port, a.token, 10)
        attack = SlowBodies(port, a.connections, a.addrs, a.period)
        attack.start()
        t_build = time.monotonic() + 30
        while attack.opened < a.connections and time.monotonic() < t_build:
            time.sleep(0.05)
        probes, samples = phase(srv, port, a.token, a.seconds, attack)
        attack.stop()
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(30)
        except subprocess.TimeoutExpired:
            srv.kill()
    rss0 = max(s[0] for s in base_samples)
    fd0 = max(s[1] for s in base_samples)
    opens = [s[2] for s in samples]
    print("server: %s %s" % (a.server, " ".join(args[7:])))
    print("attack: %d connections from %d addresses, PUT head with Content-Length: 60000, a body byte every %g s, "
          "%g s%s" % (a.connections, a.addrs, a.period, a.seconds, ", server has --token" if a.token else ""))
    print()
    print("| | before the attack | during the attack |")
    print("|---|---|---|")
    print("| GET /v1/health from 127.0.0.1 | %s | %s |" % (summary(base_probes), summary(probes)))
    print("| attack connections open (mean / peak) | - | %.0f / %d |" % (sum(opens) / max(1, len(opens)), attack.peak))
    print("| attack connections opened; the server's answers | - | %d; %s |"
          % (attack.opened, ", ".join("%s: %d" % kv for kv in sorted(attack.answers.items(), key=str)) or "none"))
    print("| server descriptors open (max) | %d | %d |" % (fd0, max(s[1] for s in samples)))
    print("| server RSS (max) | %.1f MiB | %.1f MiB (+%.1f) |"
          % (rss0 / 1024, max(s[0] for s in samples) / 1024, (max(s[0] for s in samples) - rss0) / 1024))


if __name__ == "__main__":
    main()
