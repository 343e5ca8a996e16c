#!/usr/bin/python3
"""Soak and load benchmark for xtwin-server: many stream clients plus REST pose updates for a long
time, and how the server holds up over that time.

    /usr/bin/python3 bench/server/soak.py --server build/server/xtwin-server \
        --client build/bench/bench_server_client --out /tmp/soak [--seconds 600] [--clients 32] \
        [--pose-hz 100] [--server-args "--backend cpu --threads 2 --mode fd20-128 --phantom-dim 128 --phantom-spacing 2 --fps 15"]

What runs (all on loopback): the server; bench_server_client with N stream clients reading every
frame with plain sockets (C, so the clients' own speed does not count) and writing one CSV row per
frame and client; a REST driver (this script, 4 threads taking turns) sending PUT /v1/pose at a
fixed --pose-hz on absolute deadlines, a new connection each (the server closes after every
request);
a monitor (this script, one thread) sampling the server's RSS, open descriptors and threads from
/proc and its /metrics every 5 s. At the end SIGTERM, and the server's own stop time.

Report (OUT/report.md, also printed): per window of 60 s: frames, drops (counter gaps and
server-reported), exposure period jitter |dt - T| p50/p99/max, exposure -> arrival latency
p50/p99/max, pose received -> frame arrival p50/p99 (frames whose pose changed), REST pose
latency p50/p99 and failures; RSS and descriptors per window, and the RSS slope (least squares
over the samples after the first minute) in KiB/min.
"""
import argparse
import csv
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time


def pct(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def proc_sample(pid):
    rss = threads = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, len(os.listdir("/proc/%d/fd" % pid)), threads


def metrics(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(xtwin_[a-z_]+(?:_total|_clients)?) ([0-9.e+]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--pose-hz", type=float, default=100)
    ap.add_argument("--window", type=float, default=60)
    ap.add_argument("--server-args",
                    default="--backend cpu --threads 2 --mode fd20-128 --phantom-dim 128 --phantom-spacing 2 --fps 15")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ports = os.path.join(a.out, "ports.json")
    if os.path.exists(ports):
        os.unlink(ports)
    log = open(os.path.join(a.out, "server.log"), "wb")
    cmd = [a.server, "--rest-port", "0", "--ws-port", "0", "--ports-file", ports, "--max-clients",
           str(max(32, a.clients + 2))] + a.server_args.split()
    srv = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    while not os.path.exists(ports):
        if srv.poll() is not None:
            sys.exit("server exited at start")
        time.sleep(0.05)
    p = json.load(open(ports))
    rest, ws = p["rest"], p["ws"]
    time.sleep(2)  # first frames
    t_start = time.monotonic_ns()
    stop = threading.Event()
    samples, poses = [], []

    def monitor():
        while not stop.is_set():
            t = time.monotonic_ns()
            try:
                rss, fds, thr = proc_sample(srv.pid)
            except OSError:
                break
            samples.append((t, rss, fds, thr, metrics(rest), os.getloadavg()[0]))
            stop.wait(5)

    NDRV = 4  # request slots k go to driver k % NDRV: one slow request does not delay the next slot

    def pose_driver(j):
        if a.pose_hz <= 0:
            return
        T = 1e9 / a.pose_hz
        k = j
        while not stop.is_set():
            due = t_start + k * T
            now = time.monotonic_ns()
            if due > now:
                time.sleep((due - now) / 1e9)
            elif now - due > NDRV * T:  # this driver's next slot is gone too: skip, never bunch
                k = (int((now - t_start) / T) // NDRV + 1) * NDRV + j
                continue
            angle = -60 + (k % 1200) * 0.1
            body = json.dumps({"primary_deg": angle})
            t0 = time.monotonic_ns()
            status = 0
            try:
                c = http.client.HTTPConnection("127.0.0.1", rest, timeout=10)
                c.request("PUT", "/v1/pose", body, {"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                status = r.status
                c.close()
            except OSError:
                status = -1
            poses.append((t0, time.monotonic_ns(), status))
            k += NDRV

    threads = [threading.Thread(target=monitor)] + [threading.Thread(target=pose_driver, args=(j,)) for j in range(NDRV)]
    for t in threads:
        t.start()
    frames_csv = os.path.join(a.out, "frames.csv")
    summary = os.path.join(a.out, "client.json")
    rc = subprocess.call([a.client, "--port", str(ws), "--clients", str(a.clients), "--seconds", str(a.seconds),
                          "--pose-hz", "0", "--csv", frames_csv, "--json", summary],
                         stdout=subprocess.DEVNULL)
    stop.set()
    for t in threads:
        t.join()
    final = metrics(rest)
    srv.send_signal(signal.SIGTERM)
    exit_rc = srv.wait(60)
    log.close()
    text = open(os.path.join(a.out, "server.log"), errors="replace").read()
    m = re.search(r"(?:stopped|still stopping) ([0-9.]+) ms after the signal", text)
    stop_ms = float(m.group(1)) if m else float("nan")
    report(a, rc, exit_rc, stop_ms, frames_csv, samples, poses, final, t_start)


def report(a, client_rc, exit_rc, stop_ms, frames_csv, samples, poses, final, t_start):
    W = a.window * 1e9
    rows = []
    with open(frames_csv) as f:
        for r in csv.DictReader(f):
            rows.append({k: int(float(v)) for k, v in r.items()})
    nwin = int(a.seconds / a.window + 0.999)
    per_client = {}
    for r in rows:
        per_client.setdefault(r["client"], []).append(r)
    # exposures (unique counters), from any client
    expo = {}
    for r in rows:
        expo[r["counter"]] = (r["t_sched"], r["t_exposure"])
    counters = sorted(expo)
    period = 0
    if len(counters) > 1:
        steps = [(expo[b][0] - expo[a_][0]) / (b - a_) for a_, b in zip(counters, counters[1:])]
        period = statistics.median(steps)
    win = [dict(frames=0, gaps=0, jit=[], lat=[], plat=[], rest=[], rest_fail=0, rss=[], fds=[]) for _ in range(nwin)]

    def wi(t):
        return max(0, min(nwin - 1, int((t - t_start) // W)))
    for c, rs in per_client.items():
        prev = None
        for r in rs:
            w = win[wi(r["t_arrival"])]
            w["frames"] += 1
            w["lat"].append((r["t_arrival"] - r["t_exposure"]) / 1e6)
            if prev is not None:
                w["gaps"] += r["counter"] - prev["counter"] - 1
                if r["pose_seq"] != prev["pose_seq"]:
                    w["plat"].append((r["t_arrival"] - r["t_pose"]) / 1e6)
            prev = r
    for a_, b in zip(counters, counters[1:]):
        if b == a_ + 1:
            win[wi(expo[b][1])]["jit"].append(abs(expo[b][1] - expo[a_][1] - period) / 1e6)
    for t0, t1, st in poses:
        w = win[wi(t0)]
        if st == 200:
            w["rest"].append((t1 - t0) / 1e6)
        else:
            w["rest_fail"] += 1
    for t, rss, fds, *_ in samples:
        w = win[wi(t)]
        w["rss"].append(rss)
        w["fds"].append(fds)
    # RSS slope after the first minute (least squares), KiB per minute
    pts = [((s[0] - t_start) / 60e9, s[1]) for s in samples if s[0] - t_start >= 60e9]
    slope = float("nan")
    if len(pts) > 2:
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else float("nan")
    all_lat = [x for w in win for x in w["lat"]]
    all_jit = [x for w in win for x in w["jit"]]
    all_plat = [x for w in win for x in w["plat"]]
    all_rest = [x for w in win for x in w["rest"]]
    server_dropped = sum(rs[-1]["dropped"] for rs in per_client.values())
    gaps = sum(w["gaps"] for w in win)
    out = []
    out.append("soak: %d stream clients + PUT /v1/pose at %g Hz for %g s; server %s" % (
        a.clients, a.pose_hz, a.seconds, a.server_args))
    out.append("")
    out.append("| window (s) | frames | counter gaps | period jitter p50/p99/max (ms) | exposure->arrival p50/p99/max (ms) "
               "| pose->frame p50/p99 (ms) | REST PUT p50/p99 (ms), failed | RSS (MiB) | fds |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for i, w in enumerate(win):
        out.append("| %d-%d | %d | %d | %.2f / %.2f / %.2f | %.1f / %.1f / %.1f | %.1f / %.1f | %.1f / %.1f, %d | %s | %s |" % (
            i * a.window, (i + 1) * a.window, w["frames"], w["gaps"], pct(w["jit"], 50), pct(w["jit"], 99),
            max(w["jit"] or [float("nan")]), pct(w["lat"], 50), pct(w["lat"], 99), max(w["lat"] or [float("nan")]),
            pct(w["plat"], 50), pct(w["plat"], 99), pct(w["rest"], 50), pct(w["rest"], 99), w["rest_fail"],
            "%.1f-%.1f" % (min(w["rss"]) / 1024, max(w["rss"]) / 1024) if w["rss"] else "-",
            "%d-%d" % (min(w["fds"]), max(w["fds"])) if w["fds"] else "-"))
    out.append("")
    n_ok = sum(1 for _, _, s in poses if s == 200)
    out.append("- frames received: %d by %d clients (%s per client); counter gaps %d; server-reported drops %d; "
               "exposures skipped by the renderer %d, deadlines missed %d" % (
                   len(rows), len(per_client), "-".join(str(x) for x in sorted({len(v) for v in per_client.values()})),
                   gaps, server_dropped, final.get("xtwin_frames_skipped_total", -1),
                   final.get("xtwin_deadlines_missed_total", -1)))
    out.append("- period jitter |dt - T|: p50 %.3f, p99 %.3f, max %.3f ms (T = %.3f ms)" % (
        pct(all_jit, 50), pct(all_jit, 99), max(all_jit or [float("nan")]), period / 1e6))
    out.append("- exposure -> arrival: p50 %.2f, p99 %.2f, max %.2f ms; pose received -> frame arrival: p50 %.1f, p99 %.1f, "
               "max %.1f ms" % (pct(all_lat, 50), pct(all_lat, 99), max(all_lat or [float("nan")]), pct(all_plat, 50),
                                pct(all_plat, 99), max(all_plat or [float("nan")])))
    out.append("- REST: %d PUT /v1/pose (%.1f/s), %d failed; latency p50 %.2f, p99 %.2f, max %.2f ms; pose updates "
               "applied (server) %d" % (len(poses), len(poses) / a.seconds, len(poses) - n_ok, pct(all_rest, 50),
                                        pct(all_rest, 99), max(all_rest or [float("nan")]),
                                        final.get("xtwin_pose_updates_total", -1)))
    rss = [s[1] for s in samples]
    fds = [s[2] for s in samples]
    out.append("- server RSS %.1f -> %.1f MiB (min %.1f, max %.1f), slope after the first minute %+.1f KiB/min; "
               "descriptors %d-%d; threads %d-%d" % (
                   rss[0] / 1024, rss[-1] / 1024, min(rss) / 1024, max(rss) / 1024, slope, min(fds), max(fds),
                   min(s[3] for s in samples), max(s[3] for s in samples)))
    loads = [s[5] for s in samples]
    out.append("- machine load average (1 min) during the run: %.1f-%.1f (mean %.1f) on %d cores" % (
        min(loads), max(loads), sum(loads) / len(loads), os.cpu_count()))
    out.append("- client exit %d; server exit %d, stopped %.1f ms after SIGTERM" % (client_rc, exit_rc, stop_ms))
    text = "\n".join(out)
    print(text)
    open(os.path.join(a.out, "report.md"), "w").write(text + "\n")


if __name__ == "__main__":
    main()
