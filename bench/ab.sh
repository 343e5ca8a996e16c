#!/usr/bin/env bash
# bench/ab.sh: two builds side by side on one GPU machine, alternated, so that a refactor's timings
# are compared on the same card in the same call (the guide: no benchmark may move by more than the
# machine's noise; state it). Each round runs, for OLD then NEW:
#   xtwin-chain-bench --frames 300 --scenes ac          the imaging chain, (a) 1024^2 and (c) FD20 full
#   xtwin-bench --scenes acd --no-variants              the projectors, (d) a batch of 1000 poses
#   xtwin dataset --render-only, two specs              the dataset's render (line integrals and one
#                                                       label channel, fd20-512, 20,000 frames; and
#                                                       the chain's raw and processed, fd20-256, 2,000)
# Any tool missing from a build's folder is skipped for both.
#
#   bench/ab.sh OLD_BIN NEW_BIN ROUNDS LOGDIR     (LD_LIBRARY_PATH set by the caller)
#
# Logs go to LOGDIR/<round>-<old|new>-<tool>.log; a table of the figures each run printed comes last.
set -uo pipefail
OLD=$1 NEW=$2 ROUNDS=$3 LOG=$4
mkdir -p "$LOG"
W=${XT_AB_DIR:-/tmp/xtab}
rm -rf "$W" && mkdir -p "$W"
cat >"$W/mono.json" <<'J'
{"seed": 1, "frames": 20000, "backend": "cuda", "detector": {"mode": "fd20-512"},
 "models": [{"name": "head", "phantom": "head-labels", "size": 256, "spacing_mm": 1,
             "perturb": {"translate_mm": 10, "rotate_deg": 10}}],
 "poses": {"primary_deg": [-180, 180], "secondary_deg": [-40, 40], "table_mm": [0, 0, [-20, 20]]},
 "labels": {"channels": [{"name": "bone", "model": "head", "labels": ["bone"]}]},
 "write": {"lineint": true, "labels": true, "segmentation": false},
 "output": {"shard_frames": 1000}}
J
cat >"$W/chain.json" <<'J'
{"seed": 2, "frames": 2000, "backend": "cuda", "detector": {"mode": "fd20-256"},
 "models": [{"name": "head", "phantom": "head-labels", "size": 128, "spacing_mm": 2}],
 "poses": {"primary_deg": [-180, 180], "secondary_deg": [-40, 40]},
 "chain": {"kv": [60, 90], "dose_ngy": [20, 80]},
 "write": {"lineint": false, "raw": true, "processed": true},
 "output": {"shard_frames": 500}}
J
# XT_AB_LOCAL=1: a rehearsal on a machine without a GPU (cpu backend, a few small frames)
if [ "${XT_AB_LOCAL:-0}" = 1 ]; then
  sed -i 's/"cuda"/"cpu"/; s/"frames": 20*,/"frames": 8,/; s/"size": [0-9]*/"size": 32/; s/"spacing_mm": [0-9]*/"spacing_mm": 8/' \
    "$W/mono.json" "$W/chain.json"
fi
have() { [ -x "$OLD/$1" ] && [ -x "$NEW/$1" ]; }
for r in $(seq 1 "$ROUNDS"); do
  for side in old new; do
    B=$OLD
    [ "$side" = new ] && B=$NEW
    p="$LOG/$r-$side"
    echo "== round $r $side ($(cat "$B/../COMMIT" 2>/dev/null | head -1))"
    have xtwin-chain-bench && "$B/xtwin-chain-bench" --frames 300 --scenes ac >"$p-chain.log" 2>&1
    have xtwin-bench && "$B/xtwin-bench" --scenes acd --no-variants >"$p-bench.log" 2>&1
    if have xtwin; then
      "$B/xtwin" dataset "$W/mono.json" --render-only --progress none >"$p-ds-mono.log" 2>&1
      "$B/xtwin" dataset "$W/chain.json" --render-only --progress none >"$p-ds-chain.log" 2>&1
    fi
  done
done
echo "== summary (grep of each log's figures)"
for f in "$LOG"/*.log; do
  printf '%s: ' "$(basename "$f" .log)"
  grep -hE 'frames/s|ms/frame|ms a frame| ms |mono|chain' "$f" | tail -n 12 | tr '\n' '|' | cut -c1-1500
  echo
done
