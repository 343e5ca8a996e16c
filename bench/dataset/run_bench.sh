#!/usr/bin/env bash
# bench/dataset/run_bench.sh: the `xtwin dataset` benchmark of issue 12, one device call.
#
#   run_bench.sh single BIN LOGDIR    one GPU: CUDA correctness, --devices 0 == --devices 0,0 and
#                                     --io direct == buffered byte for byte, dd oflag=direct, the
#                                     render rate (--render-only) and end-to-end runs to local disk
#   run_bench.sh workers BIN LOGDIR   one GPU, --per-device 1 and 2 (multi-mode spec, render, RAM)
#   run_bench.sh scale BIN LOGDIR     two GPUs: render-only and to RAM (/dev/shm) with 1 or 2 GPUs
#                                     and 1 or 2 workers each, dd and the local disk with 1 and 2 GPUs
#
# BIN holds xtwin, test_dataset_cuda and xtwin-d2h-probe (built elsewhere; LD_LIBRARY_PATH set by the caller).
# The spec: 512^2 (fd20-512), the 256^3 1 mm head as labels, random poses and perturbations, line
# integrals + one label channel (bone path length), no segmentation: 2 MiB + ~2.5 kB per frame.
# A short table comes last; everything else goes to LOGDIR.
set -uo pipefail
MODE=$1 BIN=$2 LOG=$3
mkdir -p "$LOG"
W=${XT_BENCH_DIR:-/tmp/xtds}
rm -rf "$W"
mkdir -p "$W"
declare -a ROWS=()
row() { ROWS+=("$(printf '%-44s %s' "$1" "$2")"); }
X="$BIN/xtwin"
# XT_BENCH_LOCAL=1: a rehearsal of the script on a machine without a GPU (cpu backend, tiny frames).
BACKEND=cuda MODE_NAME=fd20-512 SIZE=256 SPACING=1
if [ "${XT_BENCH_LOCAL:-0}" = 1 ]; then BACKEND=cpu MODE_NAME=fd20-128 SIZE=32 SPACING=8; fi
dv() { [ "$BACKEND" = cuda ] && echo "--devices $1"; } # --devices is for the cuda backend

spec() { # frames shard_frames -> $W/bench.json
  cat >"$W/bench.json" <<EOF
{"seed": 1, "frames": $1, "backend": "$BACKEND", "detector": {"mode": "$MODE_NAME"},
 "models": [{"name": "head", "phantom": "head-labels", "size": $SIZE, "spacing_mm": $SPACING,
             "perturb": {"translate_mm": 10, "rotate_deg": 10}}],
 "poses": {"primary_deg": [-180, 180], "secondary_deg": [-40, 40], "table_mm": [0, 0, [-20, 20]]},
 "labels": {"channels": [{"name": "bone", "model": "head", "labels": ["bone"]}]},
 "write": {"lineint": true, "labels": true, "segmentation": false},
 "output": {"shard_frames": $2}}
EOF
}

# A spec with two detector modes, two label channels, intensity and a landmark.
devspec() {
  cat >"$W/dev.json" <<EOF
{"seed": 77, "frames": ${XT_BENCH_DEV_FRAMES:-600}, "backend": "$BACKEND", "detector": {"modes": ["fd20-256", "fd20-128"]},
 "models": [{"name": "head", "phantom": "head-labels", "size": $((SIZE / 2)), "spacing_mm": $((SPACING * 2)),
             "perturb": {"translate_mm": 10, "rotate_deg": 10}}],
 "poses": {"primary_deg": [-180, 180], "secondary_deg": [-40, 40]},
 "labels": {"channels": [{"name": "bone", "model": "head", "labels": ["bone"]},
                         {"name": "brain", "model": "head", "labels": ["brain"]}]},
 "landmarks": [{"name": "top", "model": "head", "position_mm": [0, 0, 80]}],
 "write": {"intensity": true}, "output": {"shard_frames": 50}}
EOF
}

# "wrote N frames in S shards, G GB in T s: F frames/s" -> F ; render-only: "... frames/s; ..."
fps_of() { sed -nE 's/.*(wrote|rendered) [0-9]+ frames in [^:]*: ([0-9]+) frames\/s.*/\2/p' "$1" | tail -1; }
bn_of() { sed -nE 's/.*bottleneck: (.*)/\1/p' "$1" | tail -1; }

{
  echo "== machine"
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  nproc
  free -g | head -2
  df -h "$W" /dev/shm
  findmnt -T "$W" -o SOURCE,FSTYPE,OPTIONS | tail -1
  date -u +%FT%TZ
} 2>&1 | tee "$LOG/machine.txt"

if [ "$MODE" = single ]; then
  echo "== test_dataset_cuda"
  if "$BIN/test_dataset_cuda" 2>&1 | tee "$LOG/test_dataset_cuda.log"; then
    row "test_dataset_cuda (CUDA vs exact chords)" "$(tail -1 "$LOG/test_dataset_cuda.log")"
  else
    row "test_dataset_cuda (CUDA vs exact chords)" "FAILED: $(tail -1 "$LOG/test_dataset_cuda.log")"
  fi

  echo "== --devices 0 vs 0,0; --io direct vs buffered (byte for byte)"
  devspec
  "$X" dataset "$W/dev.json" --out "$W/d1" $(dv 0) --progress none 2>"$LOG/dev1.log"
  "$X" dataset "$W/dev.json" --out "$W/d2" $(dv 0,0) --writers 3 --progress none 2>"$LOG/dev2.log"
  "$X" dataset "$W/dev.json" --out "$W/d3" $(dv 0) --io direct --progress none 2>"$LOG/dev3.log"
  NSH=$(ls "$W/d1/shards"/*.tar 2>/dev/null | wc -l)
  if diff -r "$W/d1" "$W/d2" >/dev/null && diff -r "$W/d1" "$W/d3" >/dev/null && [ "$NSH" -ge 1 ]; then
    row "--devices 0,0 and --io direct == --devices 0" "identical ($NSH shards, $(du -sh "$W/d1" | cut -f1))"
  else
    row "--devices 0,0 and --io direct == --devices 0" "DIFFER (see dev*.log)"
  fi
  cp "$W/d1/manifest-00000-of-00001.jsonl" "$LOG/dev_manifest.jsonl"
  rm -rf "$W"/d1 "$W"/d2 "$W"/d3

  echo "== dd oflag=direct"
  dd if=/dev/zero of="$W/dd.bin" bs=64M count=${XT_BENCH_DD_BLOCKS:-64} oflag=direct 2>&1 | tee "$LOG/dd.txt"
  rm -f "$W/dd.bin"
  DD=$(sed -nE 's/^([0-9]+) bytes .* copied, ([0-9.]+) s.*/\1 \2/p' "$LOG/dd.txt" | awk '{printf "%.0f", $1 / $2}')
  row "dd oflag=direct, $((${XT_BENCH_DD_BLOCKS:-64} / 16)) GiB in 64 MiB blocks" "$(awk -v b="$DD" 'BEGIN{printf "%.3f GB/s", b / 1e9}')"

  N=${XT_BENCH_FRAMES:-8000}
  spec "$N" 100
  "$X" dataset "$W/bench.json" --dry-run --out "$W/run" 2>&1 | tee "$LOG/dryrun.txt"
  "$X" dataset "$W/bench.json" --render-only $(dv 0) --progress none 2>&1 | tee "$LOG/render_only.txt"
  GPU=$(fps_of "$LOG/render_only.txt")
  row "render only (GPU batch rate), $N frames" "$GPU frames/s"
  for io in buffered direct; do
    "$X" dataset "$W/bench.json" --out "$W/run" $(dv 0) --io $io --progress lines 2>&1 | tee "$LOG/e2e_$io.txt"
    BPF=$(python3 -c "import json,glob; L=[json.loads(l) for l in open(glob.glob('$W/run/manifest-*')[0])]; print(sum(e['bytes'] for e in L) / sum(e['frames'] for e in L))")
    E=$(fps_of "$LOG/e2e_$io.txt")
    LIM=$(awk -v g="$GPU" -v d="$DD" -v b="$BPF" 'BEGIN{x = d / b; printf "%.0f", (g < x ? g : x)}')
    row "end to end, local disk, --io $io" "$E frames/s; min(GPU $GPU, dd/bytes $(awk -v d="$DD" -v b="$BPF" 'BEGIN{printf "%.0f", d / b}')) = $LIM; ratio $(awk -v e="$E" -v l="$LIM" 'BEGIN{printf "%.2f", e / l}'); bottleneck $(bn_of "$LOG/e2e_$io.txt")"
    rm -rf "$W/run"
  done
  row "bytes per frame (tar, with headers)" "$BPF"
fi

if [ "$MODE" = scale ]; then
  # Workers per GPU (--per-device, default 2): each worker's render_batch runs kernel, copy-out and
  # host copy in turn, so a second worker per GPU overlaps them.
  XT_BENCH_DEV_FRAMES=${XT_BENCH_DEV_FRAMES:-3000} devspec
  "$X" dataset "$W/dev.json" --out "$W/m1" --devices 0 --per-device 1 --progress none 2>&1 | tee "$LOG/modes_1.txt"
  "$X" dataset "$W/dev.json" --out "$W/m2" --devices 0,1 --progress none 2>&1 | tee "$LOG/modes_2.txt"
  row "two modes, 2 channels: 1 GPU x 1 worker" "$(fps_of "$LOG/modes_1.txt") frames/s; $(bn_of "$LOG/modes_1.txt")"
  row "two modes, 2 channels: 2 GPUs x 2 workers" "$(fps_of "$LOG/modes_2.txt") frames/s; $(bn_of "$LOG/modes_2.txt")"
  if diff -r "$W/m1" "$W/m2" >/dev/null; then row "  byte for byte" "identical ($(ls "$W/m1/shards"/*.tar | wc -l) shards)"
  else row "  byte for byte" "DIFFER"; fi
  rm -rf "$W/m1" "$W/m2"
  # The host's own ceiling for the frames' copies out of each GPU and out of both at once.
  if [ "$BACKEND" = cuda ] && [ -x "$BIN/xtwin-d2h-probe" ]; then
    "$BIN/xtwin-d2h-probe" --devices 0,1 --seconds 3 2>&1 | tee "$LOG/d2h.txt"
    row "device-to-host copies, both GPUs at once" "$(sed -nE 's/^all 2 together: *(.*)/\1/p' "$LOG/d2h.txt")"
  fi
  # 60,000 frames (3-6 s a run): at 12,000 the runs lasted 0.5-1 s and the GPUs' clocks ramping up
  # from idle weighed on the two-GPU runs more than on the one-GPU runs (1.66-1.80x for 1.87-1.94x).
  N=${XT_BENCH_FRAMES:-60000}
  spec "$N" 100
  for cfg in "0 1" "0,1 1" "0 2" "0,1 2"; do
    set -- $cfg
    T="$LOG/ro_$2_${1/,/_}.txt"
    "$X" dataset "$W/bench.json" --render-only --devices $1 --per-device $2 --progress none 2>&1 | tee "$T"
    row "render only, --devices $1 --per-device $2, $N frames" "$(fps_of "$T") frames/s"
  done
  for pd in 1 2; do
    row "  two GPUs / one, --per-device $pd" "$(awk -v a="$(fps_of "$LOG/ro_${pd}_0.txt")" -v b="$(fps_of "$LOG/ro_${pd}_0_1.txt")" \
      'BEGIN{if (a > 0) printf "%.2fx", b / a; else print "-"}')"
  done
  # To RAM: the disk out of the way, as many frames as /dev/shm holds comfortably.
  FREE=$(df -B1 --output=avail /dev/shm | tail -1)
  NS=$(awk -v f="$FREE" 'BEGIN{n = int(f * 0.7 / 2104000 / 100) * 100; if (n > 8000) n = 8000; print n}')
  spec "$NS" 100
  for cfg in "0 1" "0 2" "0,1 1" "0,1 2"; do
    set -- $cfg
    T="$LOG/shm_$2_${1/,/_}.txt"
    "$X" dataset "$W/bench.json" --out /dev/shm/xtds --devices $1 --per-device $2 --progress none 2>&1 | tee "$T"
    row "end to end, /dev/shm, --devices $1 --per-device $2, $NS frames" "$(fps_of "$T") frames/s; $(bn_of "$T")"
    rm -rf /dev/shm/xtds
  done
  dd if=/dev/zero of="$W/dd.bin" bs=64M count=${XT_BENCH_DD_BLOCKS:-64} oflag=direct 2>&1 | tee "$LOG/dd.txt"
  rm -f "$W/dd.bin"
  row "dd oflag=direct, 64 MiB blocks" "$(sed -nE 's/^([0-9]+) bytes .* copied, ([0-9.]+) s.*/\1 \2/p' "$LOG/dd.txt" | awk '{printf "%.3f GB/s", $1 / $2 / 1e9}')"
  spec 4000 100
  for dev in 0 0,1; do
    T="$LOG/disk_${dev/,/_}.txt"
    "$X" dataset "$W/bench.json" --out "$W/run" --devices $dev --progress none 2>&1 | tee "$T"
    row "end to end, local disk, --devices $dev, 4000 frames" "$(fps_of "$T") frames/s; $(bn_of "$T")"
    rm -rf "$W/run"
  done
fi
if [ "$MODE" = workers ]; then
  # One GPU, 1 or 2 workers: the multi-mode spec, the render rate, and end to end into RAM.
  XT_BENCH_DEV_FRAMES=${XT_BENCH_DEV_FRAMES:-3000} devspec
  for pd in 1 2; do
    "$X" dataset "$W/dev.json" --out "$W/m$pd" --devices 0 --per-device $pd --progress none 2>&1 | tee "$LOG/modes_$pd.txt"
    row "two modes, 2 channels, --per-device $pd" "$(fps_of "$LOG/modes_$pd.txt") frames/s; $(bn_of "$LOG/modes_$pd.txt")"
  done
  if diff -r "$W/m1" "$W/m2" >/dev/null; then row "  byte for byte" "identical"; else row "  byte for byte" "DIFFER"; fi
  rm -rf "$W/m1" "$W/m2"
  spec 12000 100
  for pd in 1 2; do
    "$X" dataset "$W/bench.json" --render-only --devices 0 --per-device $pd --progress none 2>&1 | tee "$LOG/ro_$pd.txt"
    row "render only, --per-device $pd" "$(fps_of "$LOG/ro_$pd.txt") frames/s"
  done
  spec 8000 100
  for pd in 1 2; do
    "$X" dataset "$W/bench.json" --out /dev/shm/xtds --devices 0 --per-device $pd --progress none 2>&1 | tee "$LOG/shm_$pd.txt"
    row "end to end, /dev/shm, --per-device $pd" "$(fps_of "$LOG/shm_$pd.txt") frames/s; $(bn_of "$LOG/shm_$pd.txt")"
    rm -rf /dev/shm/xtds
  done
fi
rm -rf "$W"

echo
echo "== summary ($MODE)"
printf '%s\n' "${ROWS[@]}" | tee "$LOG/summary.txt"
