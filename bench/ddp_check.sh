#!/usr/bin/env bash
# Issue #11's acceptance in one remote run on two GPUs: the same training at the same
# global batch on one GPU (twice: the spread of two one-GPU runs is the tolerance), on two
# (device=0,1) and on two processes (a torchrun-style launch), then bench/ddp_compare.py: their
# per-step losses side by side (steps.csv) and their throughput (results.csv, epochs after the
# first).
#
#   BIN=/tmp/libreyolo-run [RUNS="two one one_again procs"] [WORK=/tmp/ddp_check] bash bench/ddp_check.sh [EPOCHS [LIMIT_S [KEY=VALUE ...]]]
#
# Runs on the GPU machine (scripts/gpu.sh remote 'sh:bash bench/ddp_check.sh 7'), COCO128 in
# .gpu/coco128. NCCL comes from the machine's PyTorch (nvidia-nccl wheel): cudarc looks for
# `libnccl.so`, which the wheel ships only as `libnccl.so.2`, so a link is made in /tmp/nccl.
# Writes $OUT/NAME.txt (the table) and $OUT/NAME.tar.xz (the runs' CSVs and logs), NAME the
# last part of WORK (default ddp_check), so one remote run can compare several settings.
set -uo pipefail
epochs=${1:-7}
limit=${2:-200}
shift $(( $# > 2 ? 2 : $# ))
: "${BIN:?set BIN to the libreyolo-run binary}" "${OUT:?runs on the GPU machine, where \$OUT is set}"
nccl=$(find / -name 'libnccl.so*' -not -path '/proc/*' 2>/dev/null | head -n 1)
echo "[ddp_check] NCCL: ${nccl:-not found}"
mkdir -p /tmp/nccl && [ -n "$nccl" ] && ln -sf "$nccl" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Each replica's stage trace: a run that stalls shows which collective one rank never reached.
export LIBREYOLO_LOG=info,libreyolo_run::train=debug
nvidia-smi topo -m 2>/dev/null | head -n 4
work=${WORK:-/tmp/ddp_check}
tag=$(basename "$work")
rm -rf "$work" && mkdir -p "$work"
common=(manifests/yolo9t.toml "data=$PWD/.gpu/coco128/coco128.yaml" cache=ram batch=16 "epochs=$epochs" val.enabled=false
    augment.no_aug_epochs=0 "project=$work" exist_ok=true "$@")
# RUNS picks the runs (all four take ~500 s at 7 epochs: split them over two remote runs if needed;
# the comparison reads whatever run directories exist).
runs=${RUNS:-two one one_again procs}
for name in $runs; do
    [ "$name" = procs ] && continue
    devices=0; [ "$name" = two ] && devices=0,1
    echo "[ddp_check $(date +%T)] $name: device=$devices"
    start=$(date +%s)
    timeout "$limit" "$BIN" "${common[@]}" "device=$devices" "name=$name" > "$work/$name.log" 2>&1
    echo "[ddp_check] exit $? after $(( $(date +%s) - start ))s ($name)"
    grep -v "Tuning\|━\|autotune\|DEBUG" "$work/$name.log" | tail -n 12
    for r in 0 1; do grep "DEBUG.*rank=$r" "$work/$name.log" | tail -n 1; done
    tail -n 4 "$work/$name/train.log" 2>/dev/null
done
# The same on two processes, as torchrun starts them (rank 0 serves NCCL's identifier).
if [[ " $runs " == *" procs "* ]]; then
    echo "[ddp_check $(date +%T)] procs: RANK=0,1 WORLD_SIZE=2"
    start=$(date +%s)
    for rank in 0 1; do
        RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29531 \
            timeout "$limit" "$BIN" "${common[@]}" name=procs > "$work/procs_$rank.log" 2>&1 &
    done
    wait
    echo "[ddp_check] after $(( $(date +%s) - start ))s (procs)"
    for r in 0 1; do grep -v "Tuning\|━\|autotune\|DEBUG" "$work/procs_$r.log" | tail -n 6; grep DEBUG "$work/procs_$r.log" | tail -n 1; done
fi
python3 bench/ddp_compare.py "$work" > "$OUT/$tag.txt" 2>&1
cat "$OUT/$tag.txt"
(cd "$work" && find . \( -name '*.csv' -o -name '*.log' -o -name train.log \) -print0 | tar --null -cf - -T - | xz -T0 -3 > "$OUT/$tag.tar.xz")
