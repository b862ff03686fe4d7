#!/usr/bin/env bash
# The op-level table (docs/history/): every op of YOLOv9-t's training step at its exact
# shapes, timed by libreyolo-run and by PyTorch on the same device in the same run, as ratios.
#
#   bench/ops.sh BIN OUT_DIR [BATCH] [DEVICE] [DTYPES]
#     BIN      the libreyolo-run binary (on the GPU machine: the one scripts/gpu.sh unpacked)
#     BATCH    default 16; DEVICE default 0 (cpu for a smoke run); DTYPES default f32,bf16
#     GRAPH=1  time replays of each op captured as a CUDA graph, on both sides (the kernels'
#              GPU time without launch cost, as in a captured training step)
# Writes OUT_DIR/ops_spec_bB.json, ops_ours_bB.json, ops_table_bB.json and prints the table;
# a JSON copy goes to bench/results/ when run from the repository.
set -euo pipefail
bin=${1:?usage: bench/ops.sh BIN OUT_DIR [BATCH] [DEVICE] [DTYPES]}
out=${2:?usage: bench/ops.sh BIN OUT_DIR [BATCH] [DEVICE] [DTYPES]}
batch=${3:-16}
device=${4:-0}
dtypes=${5:-f32,bf16}
imgsz=${IMGSZ:-640}
graph=$([ "${GRAPH:-0}" = 1 ] && echo --graph || true)
mkdir -p "$out"
cd "$(dirname "$0")/.."
"$bin" bench --device "$device" --batch "$batch" --imgsz "$imgsz" ops --spec "$out/ops_spec_b$batch.json"
"$bin" bench --device "$device" --batch "$batch" --imgsz "$imgsz" ops --dtype "$dtypes" $graph --json "$out/ops_ours_b$batch.json"
torch_device=$([ "$device" = cpu ] && echo cpu || echo "cuda:$device")
python3 bench/torch_ops.py "$out/ops_spec_b$batch.json" "$out/ops_ours_b$batch.json" "$out/ops_table_b$batch.json" \
    --device "$torch_device" --dtypes "$dtypes" $graph
