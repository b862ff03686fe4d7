#!/usr/bin/env bash
# The seam table of docs/manifest.md on a GPU: each marking of the YOLOv9-t step run with
# `profile run` (bf16, COCO128 at 640, one batch replayed: data.fixed_batch), its step time and
# whether its capture held (captured once, no fallback); then the whole step and LibreYOLO's
# contract by this build and an older one (OLD_BIN with its own OLD_MANIFEST), alternating,
# ROUNDS times, for the before/after ratio in one run.
#
#   BIN=/tmp/libreyolo-run [OLD_BIN=/tmp/old OLD_MANIFEST=.gpu/old-yolo9t.toml] [ROUNDS=2] \
#       [ROWS="whole_step contract ..."] bash bench/seam_table.sh BATCH [LIMIT_S]
#
# ROWS: only these rows of the table (all by default).
#
# Runs on the GPU machine (scripts/gpu.sh remote 'sh:bash bench/seam_table.sh 16') with
# .gpu/coco128 copied. Writes $OUT/seams_bBATCH.txt (the table) and $OUT/seams_bBATCH.tar.xz
# (each run's log and profile_summary.json).
set -uo pipefail
# Step times without CUPTI's kernel tracing (the profiler's default), whose per-kernel cost the
# real half would include; LIBREYOLO_CUPTI set by the caller wins.
export LIBREYOLO_CUPTI=${LIBREYOLO_CUPTI:-0}
batch=${1:?usage: seam_table.sh BATCH [LIMIT_S]}
limit=${2:-120}
: "${BIN:?set BIN to the libreyolo-run binary}" "${OUT:?runs on the GPU machine, where \$OUT is set}"
work=/tmp/seams_b$batch
rm -rf "$work" && mkdir -p "$work"
data=$PWD/.gpu/coco128/coco128.yaml
common=(device=0 cache=ram precision.dtype=bf16 "data=$data" "project=$work/runs" profile.warmup=4 profile.steps=12 data.fixed_batch=true "batch=$batch" cuda_graph=true)
# Every stage's mark, then the extra overrides of the row.
marks() { for s in forward loss backward optimizer ema; do case " $1 " in *" $s "*) echo -n "stage.$s.capture=true " ;; *) echo -n "stage.$s.capture=false " ;; esac; done; }
rows=(
    "eager|"
    "whole_step|forward loss backward optimizer ema"
    "forward|forward"
    "forward_loss|forward loss"
    "forward_loss_backward|forward loss backward"
    "loss|loss"
    "contract|forward backward"
    "contract_update|forward backward optimizer ema"
    "backward_optimizer|backward optimizer"
    "optimizer_ema|optimizer ema"
    "two_segments|forward optimizer ema"
    "until_neck|forward backward|stage.forward.until=neck.elan_down2"
    "until_neck_rest|forward loss backward optimizer ema|stage.forward.until=neck.elan_down2"
)
run() { # name binary manifest overrides...
    local name=$1 bin=$2 manifest=$3
    shift 3
    echo "[seam_table $(date +%T)] $name"
    # shellcheck disable=SC2068 # overrides are words
    timeout "$limit" "$bin" profile run "$manifest" "${common[@]}" "name=$name" $@ > "$work/$name.log" 2>&1
    echo "[seam_table] exit $? ($name)"
    grep -E "cuda_graph|falling back|error" "$work/$name.log" | head -5
}
for row in "${rows[@]}"; do
    IFS='|' read -r name stages extra <<< "$row"
    [ -n "${ROWS:-}" ] && case " $ROWS " in *" $name "*) ;; *) continue ;; esac
    if [ "$name" = eager ]; then
        run "$name" "$BIN" manifests/yolo9t.toml cuda_graph=false
    else
        # shellcheck disable=SC2046 # marks are words
        run "$name" "$BIN" manifests/yolo9t.toml $(marks "$stages") $extra
    fi
done
if [ -n "${OLD_BIN:-}" ]; then
    for round in $(seq 1 "${ROUNDS:-2}"); do
        # shellcheck disable=SC2046
        run "old_whole_step_$round" "$OLD_BIN" "$OLD_MANIFEST" $(marks "forward loss backward optimizer ema")
        # shellcheck disable=SC2046
        run "new_whole_step_$round" "$BIN" manifests/yolo9t.toml $(marks "forward loss backward optimizer ema")
        # shellcheck disable=SC2046
        run "old_contract_$round" "$OLD_BIN" "$OLD_MANIFEST" $(marks "forward backward")
        # shellcheck disable=SC2046
        run "new_contract_$round" "$BIN" manifests/yolo9t.toml $(marks "forward backward")
    done
fi
python3 - "$work" "$batch" > "$OUT/seams_b$batch.txt" 2>&1 <<'EOF'
import glob, json, os, re, sys
work, batch = sys.argv[1], sys.argv[2]
print(f"| b{batch} bf16 640, one batch replayed | step ms | img/s | captured | region |")
print("|---|---:|---:|---|---|")
for log in sorted(glob.glob(f"{work}/*.log"), key=os.path.getmtime):
    name = os.path.basename(log)[:-4]
    text = open(log).read()
    summary = f"{work}/runs/{name}/profile_summary.json"
    real = json.load(open(summary)).get("real", {}) if os.path.exists(summary) else {}
    captured = re.findall(r"captured training (?:step )?(.*?) at input shape", text)
    fallback = "falling back" in text or "ignored" in text
    held = "no" if fallback else ("yes" if captured else "-")
    print(f"| {name} | {real.get('step_ms', 'n/a')} | {real.get('img_per_s', 'n/a')} | {held} | {captured[0] if captured else ''} |")
EOF
(cd "$work" && find . \( -name profile_summary.json -o -name '*.log' \) -print0 | tar --null -cf - -T - | xz -T0 -3 > "$OUT/seams_b$batch.tar.xz")
cat "$OUT/seams_b$batch.txt"
