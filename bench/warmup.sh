#!/usr/bin/env bash
# The warm-up of a training step (issue #4's figures; the whole captured step unless MODE names
# another of bench/capture_table.sh's modes, e.g. MODE=eager), from a kernel cache of its own
# and with no driver JIT cache and no home directory caches: cold when the kernel cache is new,
# "warm on a fresh machine" when KERNELS names the cache an earlier run filled.
#
#   [KERNELS=/tmp/warmup-NAME/kernels] [MODE=eager] bash bench/warmup.sh NAME BATCH LIMIT_S [VAR=VALUE ...]
#
# Runs on the GPU machine inside `scripts/gpu.sh remote 'sh:...'` ($BIN, $OUT set); the VAR=VALUE
# words are the run's environment (e.g. CUBECL_CUDA_NVRTC_TARGET=ptx for an A/B). The profile's
# last lines (warm-up, first step, the compilation it paid) are in $OUT/NAME.txt and steps.log.
set -uo pipefail
name=${1:?usage: warmup.sh NAME BATCH LIMIT_S [VAR=VALUE ...]}
batch=${2:?batch} limit=${3:?limit in seconds}
shift 3
dir=/tmp/warmup-$name
rm -rf "$dir" && mkdir -p "$dir/home"
cache=${KERNELS:-$dir/kernels}
mkdir -p "$cache"
echo "[warmup $name] kernel cache $cache ($(du -sh "$cache" | cut -f1)), $*"
env "$@" HOME="$dir/home" LIBREYOLO_KERNEL_CACHE="$cache" CUDA_CACHE_PATH="$dir/nv" \
    WORK="/tmp/$name" MODES="${MODE:-whole_step}" LIBREYOLO=0 bash bench/capture_table.sh "$batch" "$limit"
grep -h -e 'warm-up' -e 'step .* ms' -e 'falling back' -e 'dry run' -e 'cuda_graph:' "/tmp/$name/${MODE:-whole_step}.log" | tee -a "$OUT/$name.txt"
