#!/usr/bin/env bash
# LibreYOLO's `compile` modes in this engine (engine/src/compile.rs): the GPU step of each, one
# real batch replayed, all in one run on one machine and one kernel cache (so a mode that
# autotunes pays it once, in the first run that needs it; the later ones find it cached).
#
#   bash bench/compile_modes.sh DATA_YAML [MANIFEST] [BATCH]
#
# Runs on the GPU machine ($BIN the binary, $OUT the results folder). Each mode's line
# (median and fastest step, warm-up to the measured window, whether it captured) is printed and
# appended to $OUT/compile_modes.txt; the profiles stay in /tmp/compile-modes/MODE.
set -uo pipefail
# Step times without CUPTI's kernel tracing (the profiler's default), whose per-kernel cost the
# real half would include; LIBREYOLO_CUPTI set by the caller wins.
export LIBREYOLO_CUPTI=${LIBREYOLO_CUPTI:-0}
data=${1:?usage: compile_modes.sh DATA_YAML [MANIFEST] [BATCH]}
manifest=${2:-manifests/yolo9t.toml} batch=${3:-16}
work=/tmp/compile-modes
mkdir -p "$work" "$OUT"
# mode | extra settings | window (warm-up steps, measured steps) | time limit, s
runs=(
  "false||10 48|100"
  "true||10 48|100"
  "reduce-overhead|cuda_graph=false|10 48|100"
  "max-autotune||10 48|300"
  "max-autotune-no-cudagraphs|cuda_graph=false|4 12|120"
)
echo "| compile= | settings | median step ms | fastest ms | warm-up s | window steps that replayed a graph |" | tee -a "$OUT/compile_modes.txt"
for run in "${runs[@]}"; do
  IFS='|' read -r mode extra window limit <<< "$run"
  read -r warmup steps <<< "$window"
  name="$mode${extra:+_no_cuda_graph}"
  # A run cut short by its limit must not leave an earlier run's profile to be read.
  rm -rf "${work:?}/$name"
  timeout "$limit" "$BIN" profile run "$manifest" "data=$data" "batch=$batch" device=0 workers=8 cache=ram \
    precision.dtype=bf16 precision.amp=true seed=0 data.fixed_batch=true "profile.warmup=$warmup" "profile.steps=$steps" \
    "project=$work" "name=$name" exist_ok=true "compile=$mode" $extra > "$work/$name.log" 2>&1
  rc=$?
  python3 - "$work/$name/profile.json" "$mode" "$extra" "$rc" <<'PY' | tee -a "$OUT/compile_modes.txt"
import json, sys
path, mode, extra, rc = sys.argv[1:]
try:
    p = json.load(open(path))
except OSError:
    print(f"| {mode} | {extra} | - | - | - | (exit {rc}, no profile) |")
    sys.exit()
real, window = p["real"], p.get("window", {})
replayed = f"{window.get('replayed_steps', '?')} of {window['real_steps'] + window['synced_steps']}" if p['meta']['capture'] else "no graphs"
print(f"| {mode} | {extra} | {real['step_ms_median']:.1f} | {real['step_ms_min']:.1f} | {window.get('warmup_s') or float('nan'):.1f} | {replayed} |")
PY
  grep -h "compile=" "$work/$name.log" | head -2
done
