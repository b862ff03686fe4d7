#!/usr/bin/env bash
# Issue #11's acceptance in one device call on nvidia-h200-x2: the same training at the same
# global batch on one GPU, on two (device=0,1) and on two processes (a torchrun-style launch),
# then their per-step losses side by side (steps.csv) and their throughput (results.csv,
# epochs after the first).
#
#   BIN=/tmp/libreyolo-run bash bench/ddp_check.sh [EPOCHS [LIMIT_S [KEY=VALUE ...]]]
#
# Runs on the GPU machine (scripts/gpu.sh remote 'sh:bash bench/ddp_check.sh 7'), COCO128 in
# .gpu/coco128. NCCL comes from the machine's PyTorch (nvidia-nccl wheel): cudarc looks for
# `libnccl.so`, which the wheel ships only as `libnccl.so.2`, so a link is made in /tmp/nccl.
# Writes $OUT/ddp_check.txt (the table) and $OUT/ddp_check.tar.xz (both runs' CSVs and logs).
set -uo pipefail
epochs=${1:-7}
limit=${2:-200}
shift $(( $# > 2 ? 2 : $# ))
: "${BIN:?set BIN to the libreyolo-run binary}" "${OUT:?runs on the device machine, where \$OUT is set}"
nccl=$(find / -name 'libnccl.so*' -not -path '/proc/*' 2>/dev/null | head -n 1)
echo "[ddp_check] NCCL: ${nccl:-not found}"
mkdir -p /tmp/nccl && [ -n "$nccl" ] && ln -sf "$nccl" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Each replica's stage trace: a run that stalls shows which collective one rank never reached.
export LIBREYOLO_LOG=info,libreyolo_run::train=debug
nvidia-smi topo -m 2>/dev/null | head -n 4
work=/tmp/ddp_check
rm -rf "$work" && mkdir -p "$work"
common=(manifests/yolo9t.toml "data=$PWD/.gpu/coco128/coco128.yaml" cache=ram batch=16 "epochs=$epochs" val.enabled=false
    augment.no_aug_epochs=0 "project=$work" exist_ok=true "$@")
# Two GPUs first: the new path, whose failure a short call most needs to show.
for run in two:0,1 one:0; do
    name=${run%%:*} devices=${run#*:}
    echo "[ddp_check $(date +%T)] $name: device=$devices"
    start=$(date +%s)
    timeout "$limit" "$BIN" "${common[@]}" "device=$devices" "name=$name" > "$work/$name.log" 2>&1
    echo "[ddp_check] exit $? after $(( $(date +%s) - start ))s ($name)"
    grep -v "Tuning\|━\|autotune\|DEBUG" "$work/$name.log" | tail -n 12
    for r in 0 1; do grep "DEBUG.*rank=$r" "$work/$name.log" | tail -n 1; done
    tail -n 4 "$work/$name/train.log" 2>/dev/null
done
# The same on two processes, as torchrun starts them (rank 0 serves NCCL's identifier).
echo "[ddp_check $(date +%T)] procs: RANK=0,1 WORLD_SIZE=2"
start=$(date +%s)
for rank in 0 1; do
    RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29531 \
        timeout "$limit" "$BIN" "${common[@]}" name=procs > "$work/procs_$rank.log" 2>&1 &
done
wait
echo "[ddp_check] after $(( $(date +%s) - start ))s (procs)"
for r in 0 1; do grep -v "Tuning\|━\|autotune\|DEBUG" "$work/procs_$r.log" | tail -n 6; grep DEBUG "$work/procs_$r.log" | tail -n 1; done
python3 - "$work" > "$OUT/ddp_check.txt" 2>&1 <<'EOF'
import csv, os, sys
work = sys.argv[1]
def rows(name, file):
    path = os.path.join(work, name, file)
    return list(csv.DictReader(open(path))) if os.path.exists(path) else []
one, two, procs = rows("one", "steps.csv"), rows("two", "steps.csv"), rows("procs", "steps.csv")
keys = ("box_loss", "dfl_loss", "cls_loss")
gap = max((abs(float(a[k]) - float(b[k])) / max(abs(float(a[k])), 1e-9) for a, b in zip(two, procs) for k in keys), default=float("nan"))
print(f"two processes: {len(procs)} steps; max relative difference to two threads: {gap:.3e}")
print("| step | 1 GPU box / dfl / cls | 2 GPUs box / dfl / cls | max rel. diff |")
print("|---:|---|---|---:|")
worst = 0.0
for i, (a, b) in enumerate(zip(one, two)):
    keys = ("box_loss", "dfl_loss", "cls_loss")
    rel = max(abs(float(a[k]) - float(b[k])) / max(abs(float(a[k])), 1e-9) for k in keys)
    if i < 50:
        worst = max(worst, rel)
    if i < 10 or i % 8 == 0:
        print(f"| {i} | {' / '.join(f'{float(a[k]):.4f}' for k in keys)} | {' / '.join(f'{float(b[k]):.4f}' for k in keys)} | {rel:.2e} |")
print(f"\nsteps compared: {min(len(one), len(two), 50)} (1 GPU {len(one)}, 2 GPUs {len(two)}); max relative difference over the first 50: {worst:.3e}")
def speed(name):
    r = rows(name, "results.csv")[1:]  # the first epoch carries the warm-up
    return sum(float(x["images_per_s"]) for x in r) / len(r) if r else float("nan")
s1, s2 = speed("one"), speed("two")
print(f"throughput (images/s, epochs 2+): 1 GPU {s1:.1f}, 2 GPUs {s2:.1f}, scaling {s2 / s1:.2f}x")
EOF
cat "$OUT/ddp_check.txt"
(cd "$work" && find . \( -name '*.csv' -o -name '*.log' -o -name train.log \) -print0 | tar --null -cf - -T - | xz -T0 -3 > "$OUT/ddp_check.tar.xz")
