#!/usr/bin/env bash
# Issue #11 diagnosis on a two-GPU machine: one epoch on two GPUs with sync_bn=false, then with
# sync_bn=true, each with every replica's stage trace (LIBREYOLO_LOG=...=debug) so a hang shows
# which collective one rank reached and the other did not, and the threads' stacks when it is
# still running at the end (the stall watchdog waits longer than the limit, or it would exit
# before the stacks are taken). BIN=the binary; runs under scripts/gpu.sh remote 'sh:...'.
#   bash bench/ddp_diagnose.sh [LIMIT_S_PER_RUN [KEY=VALUE ...]]
limit=${1:-150}
shift $(( $# > 1 ? 1 : $# ))
nccl=$(find /usr/lib /usr/local -name 'libnccl.so*' 2>/dev/null | head -n 1)
mkdir -p /tmp/nccl && ln -sf "$nccl" /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl
export LIBREYOLO_LOG=info,libreyolo_run::train=debug LIBREYOLO_DDP_STALL_S=$((limit + 60)) NCCL_DEBUG=WARN
D="manifests/yolo9t.toml data=$PWD/.gpu/coco128/coco128.yaml cache=ram batch=16 epochs=1 val.enabled=false augment.no_aug_epochs=0 project=/tmp/dg exist_ok=true device=0,1 $*"
clog=${LIBREYOLO_KERNEL_CACHE:-/tmp}/compilations.log; touch $clog
for run in a:false b:true; do
    name=${run%%:*} sync=${run#*:}
    echo "== ($name) sync_bn=$sync"; s=$(date +%s); n0=$(wc -l < $clog)
    $BIN $D name=$name sync_bn=$sync > /tmp/$name.log 2>&1 & pid=$!
    while kill -0 $pid 2>/dev/null && [ $(( $(date +%s) - s )) -lt $((limit - 10)) ]; do sleep 2; done
    if kill -0 $pid 2>/dev/null; then
        echo "still running after $(( $(date +%s) - s ))s: stacks"
        if command -v gdb >/dev/null; then
            timeout 20 gdb -batch -ex "thread apply all bt 10" -p $pid 2>/dev/null | grep -E "^Thread|^#" | grep -iE "^Thread|nccl|cuStream|cuCtx|nvrtc|all_reduce|comm_init|sync|wait|libreyolo" | head -150
        else
            for t in /proc/$pid/task/*; do echo "$(cat $t/comm) $(cat $t/wchan 2>/dev/null) $(awk '{print $3}' $t/stat)"; done | sort | uniq -c | sort -rn | head -30
        fi
        kill -9 $pid
    fi
    wait $pid; echo "exit $? after $(( $(date +%s) - s ))s"
    grep -v "Tuning\|autotune\|━\|DEBUG" /tmp/$name.log | tail -8
    echo "kernels compiled: $(( $(wc -l < $clog) - n0 ))"
    for r in 0 1; do echo "-- rank $r: stages seen $(grep -c "rank=$r" /tmp/$name.log), last:"; grep "rank=$r" /tmp/$name.log | tail -3; done
    head -4 /tmp/dg/$name/steps.csv 2>/dev/null; wc -l /tmp/dg/$name/steps.csv 2>/dev/null
done
