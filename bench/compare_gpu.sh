#!/usr/bin/env bash
# bench/compare.py on the GPU machine, in one remote run: installs LibreYOLO 1.6 and
# pycocotools from the wheels in .whl/ (never downloads), points COCO128's yaml at the copy in
# .gpu/coco128, runs the comparison with $BIN and writes the table and the JSON to $OUT.
#
#   scripts/gpu.sh remote '@560:sh:bash bench/compare_gpu.sh [compare.py options]'
#       needs: .gpu/libreyolo-run.xz .gpu/kernels.tar.xz .gpu/coco128 .whl
#
# e.g. `--sizes t --batch 8,16 --dtype bf16 --isolated` (the GPU step alone), or `--throughput 3`
# (whole epochs with the real loader). The full matrix of issue #10 (t and s, b8 and b16, bf16
# and fp16, eager and captured) takes ~45 minutes on one GPU: split it by --sizes / --dtype
# and join the runs' JSON with `python3 bench/compare.py --merge A.json B.json ... --docs`.
# The runs spread over every GPU of the machine (`--gpus`, one run per GPU at a time): on
# two GPUs it does twice the runs in the same time.
set -euo pipefail
: "${BIN:?set BIN to the libreyolo-run binary}" "${OUT:?runs on the GPU machine, where \$OUT is set}"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
sed "s|^path: .*|path: $PWD/.gpu/coco128|" .gpu/coco128/coco128.yaml > /tmp/coco128.yaml
work=$(mktemp -d /tmp/compare.XXXX) # a fresh directory: a warm machine keeps /tmp
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd,)
status=0 # a failed run still leaves the others' figures in the JSON: copied back either way
python3 bench/compare.py "$BIN" /tmp/coco128.yaml "$work" --device cuda --gpus "$gpus" "$@" 2>&1 | grep -v "━" | tee -a "$OUT/compare.txt" || status=$? # appended: several invocations may share a remote run
cp "$work"/*-compare*.json "$OUT/" || true
exit $status
