#!/usr/bin/python3
"""What the stream's transport copies: a server streaming synthetic FD20 full-resolution frames
(9.5 MB) to two Python clients for 4 s, its sendto/mmap/munmap under strace. Counts the frame
sends the kernel took only in part (libwebsockets then copies the remainder into a buffer of its
own) and the large mmaps (docs/BENCHMARKS.md, "Full-resolution frames without a copy per client").

    /usr/bin/python3 bench/server/transport_copies.py build/server/xtwin-server
"""
import sys, json, subprocess, time, os, re, collections
sys.path.insert(0, "api/python")
from xtwin.stream import Stream
binary = sys.argv[1]; pf = "/tmp/cmp_ports.json"
if os.path.exists(pf): os.remove(pf)
srv = subprocess.Popen([binary, "--rest-port", "0", "--ws-port", "0", "--ports-file", pf, "--backend", "cpu", "--threads", "1",
   "--phantom-dim", "32", "--synthetic", "--mode", "fd20", "--fps", "5"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while not os.path.exists(pf): time.sleep(0.05)
time.sleep(0.3)
url = "ws://127.0.0.1:%d/v1/stream" % json.load(open(pf))["ws"]
st = subprocess.Popen(["strace", "-f", "-e", "trace=sendto,mmap,munmap", "-o", "/tmp/cmp_strace.txt", "-p", str(srv.pid)],
                      stderr=subprocess.DEVNULL)
time.sleep(0.5)
n = 0
with Stream(url) as a, Stream(url) as b:
    a.next_frame(30); b.next_frame(30)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 4:
        a.next_frame(30); b.next_frame(30); n += 1
st.terminate(); st.wait(); srv.terminate(); srv.wait()
sends = collections.Counter(); big_mmaps = 0; lines = open("/tmp/cmp_strace.txt").read().splitlines()
sent = []
for l in lines:
    m = re.search(r"sendto\(.*, (\d+), MSG_NOSIGNAL, NULL, 0\) = (\d+)$", l)
    if m and int(m.group(1)) > 4096: sent.append((int(m.group(1)), int(m.group(2))))
    m = re.search(r"mmap\(NULL, (\d+),", l)
    if m and int(m.group(1)) > 1 << 20: big_mmaps += 1
partial = [s for s in sent if s[1] < s[0]]
print("%s: %d frame pairs; %d sendto (%d partial), %d mmaps > 1 MiB; largest asks %s" % (
    os.path.basename(binary), n, len(sent), len(partial), big_mmaps, sorted(set(s[0] for s in sent))[-4:]))
print("  first sends:", sent[:8])
