#!/usr/bin/env bash
# Issue #11 diagnosis on nvidia-h200-x2 (docs/gpu.md, next calls 1): one epoch on two GPUs with
# sync_bn=false, then with sync_bn=true and the threads' stacks after 45 s. BIN=the binary.
nccl=$(find /usr/lib /usr/local -name 'libnccl.so*' 2>/dev/null | head -n 1)
mkdir -p /tmp/nccl && ln -sf "$nccl" /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl
D="manifests/yolo9t.toml data=$PWD/.gpu/coco128/coco128.yaml cache=ram batch=16 epochs=1 val.enabled=false augment.no_aug_epochs=0 project=/tmp/dg exist_ok=true device=0,1"
echo "== (a) sync_bn=false"; s=$(date +%s)
timeout 75 $BIN $D name=a sync_bn=false > /tmp/a.log 2>&1; echo "exit $? after $(( $(date +%s)-s ))s"; grep -v "Tuning\|autotune\|━" /tmp/a.log | tail -5; cat /tmp/dg/a/steps.csv 2>/dev/null | head -3
echo "== (b) sync_bn=true, stacks after 45s"; NCCL_DEBUG=WARN $BIN $D name=b > /tmp/b.log 2>&1 & pid=$!
sleep 45; command -v gdb && timeout 30 gdb -batch -ex "thread apply all bt 8" -p $pid 2>/dev/null | grep -E "^Thread|^#" | grep -v "futex_wait\b" | head -120
if ! command -v gdb >/dev/null; then for t in /proc/$pid/task/*; do echo "$(cat $t/comm) $(cat $t/wchan 2>/dev/null) $(awk '{print $3}' $t/stat)"; done | sort | uniq -c | sort -rn | head -30; fi
kill -9 $pid; grep -v "Tuning\|autotune\|━" /tmp/b.log | tail -8; cat /tmp/dg/b/steps.csv 2>/dev/null | head
