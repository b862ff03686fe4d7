#!/usr/bin/env bash
# Whether a captured step computes eager's result, told by the state each run moved summed on
# the host (the capture check's debug line), not only by the check's device-summed verdict.
# For each VARIANT (environment assignments, comma-separated; "-" for none) a `profile run` of
# MANIFEST with the whole step captured on one fixed batch, in a fresh kernel cache, once with
# the dry run and once without (LIBREYOLO_PRECOMPILE=0). Prints per run: the check's verdict,
# the device-summed figures (eager -> replayed) and the host-summed state moved by the last eager
# run and by the replay (they must agree). Found MobileNetV4-s's fault on 2026-12-07
# (bench/results/2026-12-07-h100-mobilenetv4s-replay-wgrad-vectors.json):
#
#   BIN=... OUT=... bash bench/replay_check.sh manifests/mobilenetv4s.toml "data=/tmp/crops imgsz=224" - BURN_WGRAD_MMA=gather
#
# EXTRA: more overrides; LIMIT_S (each run's limit, 120); DEVICE (0); PRECOMPILE (the dry-run
# settings to try, "1 0"); CACHE (a kernel cache each run starts from, copied, instead of an empty
# one: compiled kernels and autotune results of an earlier run). A CPU smoke run: DEVICE=cpu with
# the variant LIBREYOLO_CAPTURE_SOFTWARE=1 and data "... imgsz=64".
set -uo pipefail
: "${BIN:?set BIN to the libreyolo-run binary}" "${OUT:?set OUT to an output directory}"
manifest=$1
data=$2
shift 2
work=$(mktemp -d /tmp/replay_check.XXXX)
k=0
for variant in "${@:--}"; do
    for precompile in ${PRECOMPILE:-1 0}; do
        k=$((k + 1))
        envs=()
        [ "$variant" != - ] && IFS=, read -r -a envs <<< "$variant"
        [ "$precompile" = 0 ] && envs+=(LIBREYOLO_PRECOMPILE=0)
        [ -n "${CACHE:-}" ] && cp -a "$CACHE" "$work/cache$k"
        echo "=== $(basename "$manifest") ${envs[*]:-(defaults)} ${EXTRA:-} (cache $work/cache$k) $(date +%T)"
        # shellcheck disable=SC2086 # data and EXTRA are lists of overrides
        env "${envs[@]}" LIBREYOLO_KERNEL_CACHE="$work/cache$k" LIBREYOLO_LOG=info,libreyolo_run::step::record=debug \
            timeout "${LIMIT_S:-120}" "$BIN" profile run "$manifest" $data precision.dtype=bf16 cuda_graph=true data.fixed_batch=true \
            batch=16 "device=${DEVICE:-0}" cache=ram seed=0 profile.warmup=3 profile.steps=4 exist_ok=true "project=$work" "name=r$k" ${EXTRA:-} \
            > "$OUT/replay_check_${work##*.}_$k.log" 2>&1
        echo "exit $?"
        grep -E "captured training|capture disabled|warm-up runs|summed on the host" "$OUT/replay_check_${work##*.}_$k.log" | sed 's/^.*cuda_graph: //' | cut -c1-1200
    done
done
