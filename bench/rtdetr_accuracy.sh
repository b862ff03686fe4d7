#!/usr/bin/env bash
# RT-DETR-r18's trained accuracy on the GPU machine (issue #38): one engine's seeds side by side
# on the card, each from LibreYOLO's initial network of its seed, on `make_shapes.py`'s dataset
# (320 train / 80 val images at 320 px): 50 epochs at batch 8 = 2,000 steps, validation every 5
# epochs. Run it once per engine; both steps are host-bound and the card has 16 cores.
#
#   BIN=/tmp/libreyolo-run OUT=/tmp/out bash bench/rtdetr_accuracy.sh ours|libreyolo|both [SEEDS] [LIMIT_S]
#
# SEEDS: "0 1" by default; LIMIT_S: each training's limit (train_compare.py --limit, 520).
# Measured on an H100 on 2026-12-06: four trainings at once (`both '0 1' 540`) slow each one
# (LibreYOLO ~22 s an epoch, ours ~10.5): 33 and 35 epochs in 540 s. One engine's two seeds at
# once: LibreYOLO ~7 s an epoch (50 in ~370 s); ours ~9 s after a first epoch of ~130 s of
# kernel compilation (41 and 44 epochs in 555 s; the cache it filled now travels in .gpu/, and
# `$BIN train manifests/rtdetrr18.toml resume=true project=/tmp/acc/oursSEED name=ours` on the
# same machine finishes a stopped one). `bench/loss_curves.py` compares the per-epoch rows.
# EXTRA: more train_compare.py arguments, which win over these (a CPU smoke run: EXTRA="--epochs
# 1 --imgsz 128 --device cpu --dtype f32" SHAPES="--train 16 --val 8 --size 128").
# Needs .gpu/coco128 and .whl/ (scripts/gpu.sh wheels). Trainings write under /tmp/acc; $OUT
# gets each seed's report (train-compare-*.json, its console output), results.csv and logs, not
# the weights (too large to bring back).
set -uo pipefail
engine=${1:?usage: rtdetr_accuracy.sh ours|libreyolo|both [SEEDS] [LIMIT_S]}
seeds=${2:-0 1}
limit=${3:-520}
: "${BIN:?set BIN to the libreyolo-run binary}" "${OUT:?set OUT to the output directory}"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
mkdir -p /tmp/acc
# shellcheck disable=SC2086 # SHAPES and EXTRA are argument lists
[ -f /tmp/shapes/shapes.yaml ] || python3 bench/make_shapes.py .gpu/coco128 /tmp/shapes ${SHAPES:-}
for seed in $seeds; do
    python3 bench/train_compare.py "$BIN" /tmp/shapes/shapes.yaml "/tmp/acc/$engine$seed" --family rtdetr --size r18 \
        --epochs 50 --batch 8 --imgsz 320 --eval-interval 5 --init-from-libreyolo --seed "$seed" --engines "$engine" \
        --workers 4 --limit "$limit" --no-cross-val ${EXTRA:-} > "/tmp/acc/$engine$seed.txt" 2>&1 &
    sleep 1
done
wait
# The reports and the per-epoch rows (loss curves) come back; weights stay.
for seed in $seeds; do
    dir=/tmp/acc/$engine$seed
    mkdir -p "$OUT/$engine$seed"
    cp "$dir.txt" "$dir"/train-compare-*.json "$OUT/$engine$seed/" 2>/dev/null
    for run in ours libreyolo; do # the per-epoch rows: ours writes both files, LibreYOLO the second
        for f in results.csv metrics.jsonl; do
            [ -f "$dir/$run/$f" ] && cp "$dir/$run/$f" "$OUT/$engine$seed/$run-$f"
        done
    done
    for log in "$dir"/*.log; do # libreyolo-run.log, libreyolo.log: each training's console
        [ -f "$log" ] && tail -c 200000 "$log" > "$OUT/$engine$seed/$(basename "$log")"
    done
    tail -n 20 "$dir.txt"
done
