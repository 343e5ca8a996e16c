#!/bin/sh
# Server benchmark driver. Starts xtwin-server on ephemeral loopback ports and runs
# bench_server_client against it.
#
#   run_bench.sh gpu SERVER CLIENT OUTDIR [SECONDS]  60 fps, fd20-1024 uint16, 4 clients (default 60 s)
#   run_bench.sh chain SERVER CLIENT OUTDIR [SECONDS] the same 60 fps run with the imaging chain on (raw frames)
#   run_bench.sh chain-dose SERVER CLIENT OUTDIR [SECONDS] the chain run with dose-rate control, scatter and the
#                                                    grid on (issue 11), set over REST before the clients connect
#   run_bench.sh cpu SERVER CLIENT OUTDIR [SECONDS]  fd20-512 on the CPU backend: the highest frame rate
#                                                    sustained (no skipped exposure, no dropped frame)
#   run_bench.sh biplane SERVER CLIENT OUTDIR [SECONDS] issue 25: FD20 full (plane A) + FD15 full (plane B) at
#                                                    30 fps interleaved with the chain, two clients per plane;
#                                                    then FD20 full single-plane at 30 fps, four clients
#   run_bench.sh full SERVER CLIENT OUTDIR [SECONDS]  the single-plane run of biplane alone (BENCH_BIPLANE_SINGLE=0
#                                                    leaves it out of biplane)
#   run_bench.sh transport SERVER CLIENT OUTDIR [SECONDS] the transport alone: --synthetic frames (no render) of
#                                                    BENCH_MODE (fd20: 9.5 MB) at BENCH_FPS (30) on BENCH_BACKEND
#                                                    (cpu), four clients, 20 s; prints render done -> last byte
#                                                    per client (xtwin_frame_send_seconds) besides the clients' JSON
#   run_bench.sh virtual SERVER CLIENT OUTDIR [SECONDS] --clock virtual (issue 24): fd20-1024 fluoroscopy
#                                                    (fluoro_normal: 15 fps, the chain, dose-rate control) for
#                                                    SECONDS of real time with no stream client, then one; prints
#                                                    virtual seconds per real second (frames / 15 / SECONDS)
# Writes OUTDIR/*.json (client summaries), OUTDIR/*.metrics (the server's /metrics at the end),
# OUTDIR/*.log (server output), OUTDIR/gpu60.csv (one row per frame and client: bench_client.c's
# dump_csv). XT_BENCH_SERVER_ARGS adds server options to every run (e.g. "--stream-senders 0": the
# service thread writes every frame, as before the sender threads). GPU_AB=SECONDS adds two short runs that each undo one fix: the libwebsockets client
# (--lws, its 4 KiB default reads) and a one-thread uint16 conversion (--convert-threads 1).
set -u
kind=$1 server=$2 client=$3 out=$4 secs=${5:-}
mkdir -p "$out"

metrics() { # port file
  if command -v curl >/dev/null 2>&1; then curl -s "http://127.0.0.1:$1/metrics" >"$2"
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c "import urllib.request,sys;sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$1/metrics').read().decode())" >"$2"
  fi
}

# start NAME ARGS...: sets PID REST WS
start() {
  name=$1; shift
  rm -f "$out/$name.ports"
  # The benchmarks' scene stays the Shepp-Logan head (256^3, 1 mm) that every number in
  # docs/BENCHMARKS.md before issue 26 used; the server's default became the thorax with a guidewire.
  # XT_BENCH_SCENE="" runs the server's default scene instead.
  # shellcheck disable=SC2086
  "$server" --rest-port 0 --ws-port 0 --ports-file "$out/$name.ports" ${XT_BENCH_SCENE---phantom head} "$@" \
    ${XT_BENCH_SERVER_ARGS:-} >"$out/$name.log" 2>&1 &
  PID=$!
  i=0
  while [ ! -s "$out/$name.ports" ]; do
    i=$((i + 1)); sleep 0.1
    if [ $i -gt 1200 ] || ! kill -0 $PID 2>/dev/null; then echo "server $name did not start:"; cat "$out/$name.log"; return 1; fi
  done
  REST=$(sed 's/.*"rest": \([0-9]*\).*/\1/' "$out/$name.ports")
  WS=$(sed 's/.*"ws": \([0-9]*\).*/\1/' "$out/$name.ports")
}

stop() { kill -TERM $PID; wait $PID; echo "server exit status $?"; }

# send_p METRICS_FILE: p50 and p99 of xtwin_frame_send_seconds (render done -> a client's last byte
# handed to the kernel), interpolated within the histogram's buckets (so only as fine as they are)
send_p() {
  python3 - "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def q(name, p):
    b = [(float(m.group(1)), float(m.group(2))) for m in re.finditer(
        r'^%s_bucket\{le="([^"]+)"\} (\S+)' % name, text, re.M) if m.group(1) != "+Inf"]
    n = float(re.search(r'^%s_count (\S+)' % name, text, re.M).group(1))
    lo_le, lo_c = 0.0, 0.0
    for le, c in b:
        if c >= p * n:
            return (lo_le + (le - lo_le) * (p * n - lo_c) / max(c - lo_c, 1e-9)) * 1e3
        lo_le, lo_c = le, c
    return float("inf")
for name, what in (("xtwin_frame_publish_seconds", "render done -> published (the worker)"),
                   ("xtwin_stream_wake_seconds", "published -> the service thread running"),
                   ("xtwin_frame_handoff_seconds", "render done -> the service thread starts the send"),
                   ("xtwin_frame_send_seconds", "render done -> last byte sent")):
    m = re.search(r'^%s_count (\S+)' % name, text, re.M)
    if not m:
        print("no %s in /metrics (a server from before it)" % name)
        continue
    print("%s (%s, %d counts): p50 %.2f ms, p99 %.2f ms" % (what, name, float(m.group(1)), q(name, 0.5), q(name, 0.99)))
PY
}

request() { # METHOD PATH BODY: one REST request to the running server
  python3 -c "import urllib.request as u,sys
r=u.Request('http://127.0.0.1:$REST'+sys.argv[2],data=sys.argv[3].encode(),method=sys.argv[1],headers={'Content-Type':'application/json'})
u.urlopen(r).read()" "$1" "$2" "$3"
}

# the single-plane run of "biplane": FD20 full at 30 fps with the chain, four clients
full30() {
  start full30 --backend cuda --mode fd20 --fps 30 --chain --verbose 1 || exit 1
  sleep 3
  "$client" --port "$WS" --clients 4 --seconds "$secs" --pose-hz 10 --json "$out/full30.json"
  metrics "$REST" "$out/full30.metrics"
  stop
  echo "== full30"; cat "$out/full30.json"
  grep -E '^xtwin_(frames|deadlines|render_errors|client_frames)|^xtwin_(jitter|period)_seconds' "$out/full30.metrics" | grep -v bucket
  send_p "$out/full30.metrics"
}

case $kind in
gpu)
  secs=${secs:-60}
  start gpu60 --backend cuda --mode fd20-1024 --fps 60 --pixel-format uint16 --verbose 1 || exit 1
  sleep 2 # let the first frames (and the GPU's clocks) settle
  "$client" --port "$WS" --clients 4 --seconds "$secs" --pose-hz 10 --json "$out/gpu60.json" --csv "$out/gpu60.csv"
  metrics "$REST" "$out/gpu60.metrics"
  stop
  cat "$out/gpu60.json"
  grep -E '^xtwin_(frames|deadlines|render_errors|client_frames)|^xtwin_(render|convert)_seconds_(sum|count)' "$out/gpu60.metrics"
  # GPU_AB=SECONDS: shorter runs that each undo one change, for the record (docs/server.md).
  if [ -n "${GPU_AB:-}" ]; then
    start ab_lws --backend cuda --mode fd20-1024 --fps 60 --pixel-format uint16 || exit 1
    sleep 2
    "$client" --port "$WS" --clients 4 --seconds "$GPU_AB" --pose-hz 10 --lws --rx-buf 4096 --json "$out/ab_lws.json"
    stop
    start ab_conv1 --backend cuda --mode fd20-1024 --fps 60 --pixel-format uint16 --convert-threads 1 || exit 1
    sleep 2
    "$client" --port "$WS" --clients 4 --seconds "$GPU_AB" --pose-hz 10 --json "$out/ab_conv1.json"
    metrics "$REST" "$out/ab_conv1.metrics"
    stop
    for f in ab_lws ab_conv1; do echo "== $f"; grep -E '"frames"|exposure_to|render_done|sent_to|pose_to' "$out/$f.json"; done
    grep -E '^xtwin_(render|convert)_seconds_(sum|count)' "$out/ab_conv1.metrics"
  fi
  ;;
chain)
  secs=${secs:-60}
  start chain60 --backend cuda --mode fd20-1024 --fps 60 --pixel-format uint16 --chain --verbose 1 || exit 1
  sleep 2
  "$client" --port "$WS" --clients 4 --seconds "$secs" --pose-hz 10 --json "$out/chain60.json" --csv "$out/chain60.csv"
  metrics "$REST" "$out/chain60.metrics"
  stop
  cat "$out/chain60.json"
  grep -E '^xtwin_(frames|deadlines|render_errors|client_frames)|^xtwin_(render|convert)_seconds_(sum|count)' "$out/chain60.metrics"
  ;;
chain-dose)
  secs=${secs:-60}
  start chaindose60 --backend cuda --mode fd20-1024 --fps 60 --pixel-format uint16 --chain --verbose 1 || exit 1
  body='{"chain": {"drc": 1, "scatter": 1, "grid": 1}}' # no protocol: a preset also sets its own frame rate
  if command -v curl >/dev/null 2>&1; then
    curl -s -X PUT -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$REST/v1/acquisition"
  else
    python3 -c "import urllib.request,sys;r=urllib.request.Request('http://127.0.0.1:$REST/v1/acquisition',data=sys.argv[1].encode(),method='PUT',headers={'Content-Type':'application/json'});sys.stdout.write(urllib.request.urlopen(r).read().decode())" "$body"
  fi
  echo
  sleep 2
  "$client" --port "$WS" --clients 4 --seconds "$secs" --pose-hz 10 --json "$out/chaindose60.json" --csv "$out/chaindose60.csv"
  metrics "$REST" "$out/chaindose60.metrics"
  stop
  cat "$out/chaindose60.json"
  grep -E '^xtwin_(frames|deadlines|render_errors|client_frames|dose)|^xtwin_(render|convert)_seconds_(sum|count)' "$out/chaindose60.metrics"
  ;;
cpu)
  secs=${secs:-10}
  best=0
  for fps in ${FPS_LIST:-1 2 3 4 5 6 8 10 12 15 20 24 30}; do
    start cpu$fps --backend cpu --mode fd20-512 --fps "$fps" || exit 1
    sleep 1
    "$client" --port "$WS" --clients 1 --seconds "$secs" --pose-hz 0 --json "$out/cpu$fps.json"
    metrics "$REST" "$out/cpu$fps.metrics"
    stop
    gaps=$(sed -n 's/.*"counter_gaps": \([0-9]*\).*/\1/p' "$out/cpu$fps.json" | head -1)
    dropped=$(sed -n 's/.*"server_dropped": \([0-9]*\).*/\1/p' "$out/cpu$fps.json" | head -1)
    frames=$(sed -n 's/.*"frames": \([0-9]*\).*/\1/p' "$out/cpu$fps.json" | head -1)
    skipped=$(sed -n 's/^xtwin_frames_skipped_total \([0-9]*\)/\1/p' "$out/cpu$fps.metrics")
    echo "fps $fps: frames $frames gaps $gaps dropped $dropped skipped(server) $skipped"
    if [ "${gaps:-1}" = 0 ] && [ "${dropped:-1}" = 0 ] && [ "${skipped:-1}" = 0 ]; then best=$fps; else break; fi
  done
  echo "highest sustained rate at 512x512 on the CPU backend: $best fps"
  echo "$best" >"$out/cpu_best_fps.txt"
  ;;
biplane)
  # Issue 25's targets: FD20 full on plane A and FD15 full on plane B, 30 fps each, interleaved, the
  # chain on, two clients per plane (each plane's first client moves its own C-arm at 10 Hz); then
  # the single-plane run: FD20 full at 30 fps with the chain, four clients.
  secs=${secs:-60}
  start biplane30 --backend cuda --planes 2 --mode fd20 --mode-b fd15 --fps 30 --chain --verbose 1 || exit 1
  sleep 3
  "$client" --port "$WS" --clients 2 --seconds "$secs" --pose-hz 10 --json "$out/biplane30_a.json" &
  CA=$!
  "$client" --port "$WS" --clients 2 --seconds "$secs" --pose-hz 10 --path "/v1/stream?planes=b" --plane-b \
    --json "$out/biplane30_b.json"
  wait $CA
  metrics "$REST" "$out/biplane30.metrics"
  stop
  for f in biplane30_a biplane30_b; do echo "== $f"; cat "$out/$f.json"; done
  grep -E '^xtwin_(frames|deadlines|render_errors|client_frames)|^xtwin_(render|convert|jitter|period)_seconds' "$out/biplane30.metrics" | grep -v bucket
  send_p "$out/biplane30.metrics"
  [ "${BENCH_BIPLANE_SINGLE:-1}" = 1 ] && full30
  ;;
full)
  secs=${secs:-60}
  full30
  ;;
transport)
  secs=${secs:-20}
  start transport --backend "${BENCH_BACKEND:-cpu}" --synthetic --mode "${BENCH_MODE:-fd20}" --fps "${BENCH_FPS:-30}" \
    --phantom-dim 32 --verbose 1 || exit 1
  sleep 2
  "$client" --port "$WS" --clients 4 --seconds "$secs" --pose-hz 10 --json "$out/transport.json"
  metrics "$REST" "$out/transport.metrics"
  stop
  cat "$out/transport.json"
  grep -E '^xtwin_(frames|client_frames)|^xtwin_frame_send_seconds' "$out/transport.metrics"
  send_p "$out/transport.metrics"
  ;;
virtual)
  secs=${secs:-20}
  for nc in 0 1; do
    start virtual$nc --backend "${BENCH_BACKEND:-cuda}" --mode "${BENCH_MODE:-fd20-1024}" --chain --clock virtual --no-autostart --verbose 1 || exit 1
    request PUT /v1/acquisition '{"chain": {"protocol": "fluoro_normal"}}'
    if [ $nc = 1 ]; then
      "$client" --port "$WS" --clients 1 --seconds "$secs" --pose-hz 1 --json "$out/virtual1.json" &
      CPID=$!
      sleep 1
    fi
    request POST /v1/acquisition/start '{}'
    sleep "$secs"
    metrics "$REST" "$out/virtual$nc.metrics"
    stop
    [ $nc = 1 ] && wait $CPID
    frames=$(grep '^xtwin_frames_rendered_total' "$out/virtual$nc.metrics" | awk '{print $2}')
    python3 -c "import sys; f=float(sys.argv[1]); s=float(sys.argv[2]); print('virtual clock, %s stream client(s): %d frames in %g s real = %.1f s virtual at 15 fps: %.1fx real time' % (sys.argv[3], f, s, f/15, f/15/s))" "$frames" "$secs" "$nc"
  done
  ;;
*) echo "usage: $0 gpu|chain|chain-dose|cpu|virtual|biplane|transport SERVER CLIENT OUTDIR [SECONDS]"; exit 2 ;;
esac
