#!/usr/bin/env bash
# Where the captured step's GPU time goes, per family (issues #35-#37): for each NAME below,
# `profile run` of its manifest with the whole step captured (one real batch replayed,
# data.fixed_batch), CUPTI timing every kernel inside the graph replays, then `profile kernels`
# and `profile phases` of it. One remote run gathers them all:
#
#   scripts/gpu.sh remote '@540:sh:bash bench/kernel_tables.sh yolo9t mobilenetv4s resnet18 yoloxt'
#
# Writes $OUT/kernels_NAME.txt (the tables, the run's capture lines and peak memory),
# $OUT/kernels_NAME.json (`profile kernels --json`) and $OUT/kernels_NAME.log.xz (the run's
# log). Needs .gpu/coco128 (or COCO, a folder of that layout); the classifiers train on
# `bench/make_crops.py`'s crops of it (made here). BATCH (16), DTYPE (bf16), TOP (40), LIMIT_S
# (each run's limit, 150), DEVICE (0) and EXTRA (more overrides, after these) as environment
# variables; a CPU smoke run: DEVICE=cpu EXTRA="imgsz=64 profile.warmup=1 profile.steps=2".
set -uo pipefail
: "${BIN:?set BIN to the libreyolo-run binary}" "${OUT:?runs on the GPU machine, where \$OUT is set}"
batch=${BATCH:-16}
dtype=${DTYPE:-bf16}
top=${TOP:-40}
limit=${LIMIT_S:-150}
# shellcheck disable=SC2206 # EXTRA is a list of overrides
extra=(${EXTRA:-})
coco=$(realpath "${COCO:-.gpu/coco128}")
sed "s|^path: .*|path: $coco|" "$coco/coco128.yaml" > /tmp/coco128.yaml
work=$(mktemp -d /tmp/kernels.XXXX) # a fresh directory: a warm machine keeps /tmp
for name in "$@"; do
    case "$name" in
    mobilenetv4* | resnet*)
        [ -d /tmp/crops ] || python3 bench/make_crops.py "$coco" /tmp/crops > /dev/null
        data=(data=/tmp/crops imgsz=224) ;;
    *) data=(data=/tmp/coco128.yaml imgsz=640) ;;
    esac
    echo "[kernel_tables $(date +%T)] $name"
    timeout "$limit" "$BIN" profile run "manifests/$name.toml" "${data[@]}" device="${DEVICE:-0}" cache=ram "batch=$batch" \
        "precision.dtype=$dtype" cuda_graph=true data.fixed_batch=true profile.warmup=4 profile.steps=12 "project=$work" "name=$name" "${extra[@]}" \
        > "$work/$name.log" 2>&1
    rc=$?
    {
        echo "# $name, batch $batch, $dtype, whole step captured: exit $rc"
        # the capture's and replays' lines first: a warning's several lines must not crowd them out
        grep -E "cuda_graph|CUPTI" "$work/$name.log" | head -12
        grep -E "ERROR|WARN" "$work/$name.log" | grep -v "cuda_graph" | head -4
        grep -o '"peak_memory_mb": *[0-9.]*' "$work/$name/profile.json" | head -1
        "$BIN" profile phases "$work/$name/profile.json"
        "$BIN" profile kernels "$work/$name/profile.json" --top "$top"
    } > "$OUT/kernels_$name.txt" 2>&1
    "$BIN" profile kernels "$work/$name/profile.json" --top "$top" --json > "$OUT/kernels_$name.json" 2> /dev/null
    xz -c "$work/$name.log" > "$OUT/kernels_$name.log.xz" # the whole run's log, for what the tables do not say
    tail -n 3 "$work/$name.log"
done
