#!/usr/bin/env bash
# The capture table of issue #8 at one batch, in one remote run: our step eager, with
# LibreYOLO's two graphs and with the whole step captured (`profile run`, bf16, COCO128, 640),
# then LibreYOLO 1.6's own profile (eager and `cuda_graph=True`) on the same card.
#
#   BIN=/tmp/libreyolo-run [MODES="eager two_graphs two_graphs_seam two_graphs_update whole_step whole_step_det"] \
#       [WORK=/tmp/NAME] [EXTRA="key=value ..."] bash bench/capture_table.sh BATCH [OUR_LIMIT_S [LIBREYOLO_LIMIT_S]]
#
# EXTRA: overrides added to every one of our runs (e.g. `capture.threshold=1`).
# Modes: eager; two_graphs (LibreYOLO's contract); two_graphs_seam (the same with the seam
# inside the network: the forward graph ends at neck.elan_down2, the heads run eagerly with the
# loss); two_graphs_update (the same with the update
# captured as a third graph, what a data-parallel rank captures); whole_step; whole_step_det
# (the whole step with BURN_DETERMINISTIC_SUM=1: what bit-reproducible sums cost).
#
# Runs on the GPU machine (scripts/gpu.sh remote 'sh:bash bench/capture_table.sh 16'), with
# .gpu/coco128 and .gpu/libreyolo_profile.py copied and LibreYOLO's wheels in .whl/. The run
# directories stay in /tmp (few files are copied back); what comes back is one archive,
# $OUT/NAME.tar.xz (NAME = capture_bBATCH unless WORK=/tmp/NAME is set, so one run can run the
# script several times with other limits), with each run's profile_summary.json (top kernels,
# categories) and LibreYOLO's anchor JSON, plus $OUT/NAME.txt with the step times side by side.
set -uo pipefail
# Step times without CUPTI's kernel tracing (the profiler's default), whose per-kernel cost the
# real half would include; LIBREYOLO_CUPTI set by the caller wins.
export LIBREYOLO_CUPTI=${LIBREYOLO_CUPTI:-0}
batch=${1:?usage: capture_table.sh BATCH [OUR_LIMIT_S [LIBREYOLO_LIMIT_S]]}
ours_limit=${2:-150}
lib_limit=${3:-140}
: "${BIN:?set BIN to the libreyolo-run binary}" "${OUT:?runs on the GPU machine, where \$OUT is set}"
work=${WORK:-/tmp/capture_b$batch}
name=$(basename "$work")
rm -rf "$work" && mkdir -p "$work"
data=$PWD/.gpu/coco128/coco128.yaml
common=(device=0 cache=ram precision.dtype=bf16 "data=$data" "project=$work/ours" profile.warmup=3 profile.steps=10 "batch=$batch")
declare -A modes=(
    [eager]=""
    [two_graphs]="cuda_graph=true"
    [two_graphs_seam]="cuda_graph=true stage.forward.until=neck.elan_down2"
    [two_graphs_update]="cuda_graph=true stage.optimizer.capture=true stage.ema.capture=true"
    [whole_step]="cuda_graph=true stage.loss.capture=true stage.optimizer.capture=true stage.ema.capture=true"
    [whole_step_det]="cuda_graph=true stage.loss.capture=true stage.optimizer.capture=true stage.ema.capture=true"
)
for mode in ${MODES:-eager two_graphs whole_step}; do
    echo "[capture_table $(date +%T)] ours $mode b$batch"
    det=0; [ "$mode" = whole_step_det ] && det=1
    # shellcheck disable=SC2086 # the mode's overrides are words
    BURN_DETERMINISTIC_SUM=$det timeout "$ours_limit" "$BIN" profile run manifests/yolo9t.toml "${common[@]}" "name=$mode" ${modes[$mode]} ${EXTRA:-} \
        > "$work/$mode.log" 2>&1
    echo "[capture_table] exit $? ($mode)"
    tail -n 40 "$work/$mode.log"
done
if [ -d .whl ] && [ "${LIBREYOLO:-1}" = 1 ]; then # LIBREYOLO=0: ours only
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    sed "s|^path: .*|path: $PWD/.gpu/coco128|" .gpu/coco128/coco128.yaml > /tmp/coco128.yaml
    echo "[capture_table $(date +%T)] LibreYOLO b$batch"
    PYTHONPATH=/tmp/site timeout "$lib_limit" python3 .gpu/libreyolo_profile.py /tmp/coco128.yaml "$work/libreyolo" "$batch" bfloat16 \
        > "$work/libreyolo.log" 2>&1
    echo "[capture_table] exit $? (LibreYOLO)"
    grep '^{' "$work/libreyolo.log"
fi
python3 - "$work" "$batch" > "$OUT/$name.txt" 2>&1 <<'EOF'
import glob, json, os, sys
work, batch = sys.argv[1], sys.argv[2]
print(f"| b{batch} bf16 640 COCO128 | step ms | img/s | dataload ms | verdict |")
print("|---|---:|---:|---:|---|")
for path in sorted(glob.glob(f"{work}/ours/*/profile_summary.json")):
    s = json.load(open(path))
    real = s.get("real", s)
    print(f"| ours {os.path.basename(os.path.dirname(path))} | {real.get('step_ms')} | {real.get('img_per_s')} | {real.get('dataload_ms')} | {s.get('bound')} |")
for path in glob.glob(f"{work}/libreyolo/anchor_*.json"):
    for r in json.load(open(path)):
        print(f"| LibreYOLO {r['name']} | {r['step_ms']} | {r['img_per_s']} | {r['dataload_ms']} | {r['bound']} |")
EOF
(
    cd "$work" || exit 1
    # The summaries only: profile.json holds every kernel event (tens of MB at 25k kernels a
    # step); the summary has the top kernels and the categories.
    find . \( -name profile_summary.json -o -name 'anchor_*.json' -o -name '*.log' \) -print0 |
        tar --null -cf - -T - | xz -T0 -3 > "$OUT/$name.tar.xz"
)
cat "$OUT/$name.txt"
