#!/usr/bin/env bash
# Runs libreyolo-run on a GPU machine that has no Rust toolchain (or no network): the binary is
# built here, stripped and xz-compressed into .gpu/ (kept out of git, copied to the GPU machine
# with the repository), and unpacked there. Compiled kernels and autotune results travel back
# and forth so warm-up is paid once. See docs/gpu.md.
#
# Here (CPU machine):
#   [SMALL=1] scripts/gpu.sh pack         # cargo build --release, strip --strip-debug, xz -> .gpu/libreyolo-run.xz,
#                                         # plus .gpu/parity and .gpu/coco128 (fixtures and data)
#   scripts/gpu.sh keep-cache DIR         # after a remote run: DIR/kernels.tar.xz into .gpu/ (stale PTX dropped)
#   scripts/gpu.sh wheels                 # LibreYOLO 1.6 (less unused assets), pycocotools and scipy's assignment solver as
#                                         # wheels in .whl/ (needs network), for the comparisons
# There (the GPU machine, with .gpu/ copied and OUT set to an output directory):
#   bash scripts/gpu.sh remote 'ARGS' ['@SECONDS:ARGS' ...]
#                                         # unpack, restore the kernel cache, run `libreyolo-run ARGS` for
#                                         # each quoted argument list (or 'sh:COMMAND', run by bash with
#                                         # $BIN set to the binary), each under its @SECONDS limit, or
#                                         # $STEP_TIMEOUT, default 540; output in $OUT/steps.log), then
#                                         # save the warm-up logs and (SAVE_CACHE=0 skips it) the kernel
#                                         # cache to $OUT. Under an outer time limit, keep the sum of
#                                         # the step limits well below it, or both are lost.
set -euo pipefail
cd "$(dirname "$0")/.."
GPU_DIR=.gpu

case "${1:-}" in
pack)
    cargo build --release # from the root: the workspace feature set (docs/build.md)
    mkdir -p "$GPU_DIR"
    # --strip-debug keeps the symbol table (+3.5 MB compressed): LIBREYOLO_HOST_PROFILE names
    # functions only with it.
    # SMALL=1: --strip-all and xz -9e (19.7 MB instead of 24.2), so the wheels fit beside
    # (the comparisons with LibreYOLO: bench/rtdetr_accuracy.sh, bench/train_compare.py).
    if [ "${SMALL:-0}" = 1 ]; then
        strip --strip-all -o "$GPU_DIR/libreyolo-run" target/release/libreyolo-run
        xz -9e -T0 -f "$GPU_DIR/libreyolo-run"
    else
        strip --strip-debug -o "$GPU_DIR/libreyolo-run" target/release/libreyolo-run
        xz -6 -T0 -f "$GPU_DIR/libreyolo-run"
    fi
    # The parity fixture and COCO128 travel too: the GPU machine has no ../shared.
    rm -rf "$GPU_DIR/parity" "$GPU_DIR/coco128"
    # SMALL=1 leaves the parity fixture (13.5 MB) out too: room for the wheels.
    if [ "${SMALL:-0}" != 1 ]; then
        cp -r ../shared/parity "$GPU_DIR/parity" && rm -f "$GPU_DIR"/parity/*.py
    fi
    cp -r ../shared/data/coco128 "$GPU_DIR/coco128"
    du -sh "$GPU_DIR"/*
    ;;
wheels)
    # The GPU machine's Python (3.12) has PyTorch but no network. Whole, scipy's wheel is 35 MB,
    # which with the binary and COCO128 outgrows a 64 MiB transfer; LibreYOLO's DETR losses
    # only import `scipy.optimize.linear_sum_assignment`, whose extension (`_lsap`) needs
    # nothing but numpy: a wheel of that extension, unchanged, two one-line modules, and the
    # modules LibreYOLO imports but never calls for a detector, each saying it is not there.
    py=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
    mkdir -p .whl
    python3 -m pip download -q --no-deps "${py[@]}" -d .whl libreyolo==1.6.0 pycocotools
    # Without the tokenizers of its CLIP and SigLIP2 models and its two sample images (5.9 MB
    # that no detector or classifier reads), binary, COCO128 and wheels fit one transfer.
    zip -q -d .whl/libreyolo-1.6.0-py3-none-any.whl 'libreyolo/models/siglip2/siglip2_tokenizer.model' \
        'libreyolo/models/clip/bpe_simple_vocab_16e6.txt.gz' 'libreyolo/assets/*.jpg'
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps "${py[@]}" -d "$tmp" scipy
    whole=$(ls "$tmp"/scipy-*.whl)
    version=$(basename "$whole" | cut -d- -f2)
    (cd "$tmp" && unzip -q "$whole" 'scipy/optimize/_lsap.*.so' && rm "$whole")
    echo '"""scipy cut to scipy.optimize.linear_sum_assignment (its _lsap extension, unchanged)."""' > "$tmp/scipy/__init__.py"
    echo 'from ._lsap import linear_sum_assignment  # noqa: F401' > "$tmp/scipy/optimize/__init__.py"
    # LibreYOLO imports scipy.linalg, .sparse and .spatial when its package loads (its tracker
    # and its edge/point validators); its detectors never call them. So those imports succeed,
    # and any name taken from them raises ImportError when used, saying why.
    for mod in linalg sparse sparse/csgraph spatial spatial/distance spatial/transform; do
        mkdir -p "$tmp/scipy/$mod"
        dotted=scipy.$(echo "$mod" | tr / .)
        cat > "$tmp/scipy/$mod/__init__.py" << EOF_SHIM
"""$dotted is not in this cut of scipy (scripts/gpu.sh wheels): LibreYOLO imports it when its
package loads; its detectors' training and validation never call it. Any name taken from it
raises ImportError when used."""


def __getattr__(name):
    def missing(*args, **kwargs):
        raise ImportError(f"$dotted.{name}: this scipy is cut to scipy.optimize.linear_sum_assignment (scripts/gpu.sh wheels)")

    return missing
EOF_SHIM
    done
    info="$tmp/scipy-$version.dist-info"
    mkdir -p "$info"
    printf 'Metadata-Version: 2.1\nName: scipy\nVersion: %s\n' "$version" > "$info/METADATA"
    printf 'Wheel-Version: 1.0\nGenerator: scripts/gpu.sh\nRoot-Is-Purelib: false\nTag: cp312-cp312-manylinux_2_28_x86_64\n' > "$info/WHEEL"
    (cd "$tmp" && python3 - "$info" << 'EOF_RECORD'
import base64, hashlib, os, sys
rows = []
for root, _, files in os.walk("."):
    for f in files:
        p = os.path.join(root, f)[2:]
        data = open(p, "rb").read()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{p},sha256={digest},{len(data)}")
record = os.path.join(os.path.basename(sys.argv[1]), "RECORD")
open(record, "w").write("\n".join(rows + [f"{record},,"]) + "\n")
EOF_RECORD
    )
    rm -f .whl/scipy-*.whl
    (cd "$tmp" && zip -qr "$OLDPWD/.whl/scipy-$version-cp312-cp312-manylinux_2_28_x86_64.whl" scipy "scipy-$version.dist-info")
    rm -rf "$tmp"
    ls -l .whl
    ;;
keep-cache)
    src="${2:?usage: scripts/gpu.sh keep-cache DIR_WITH_kernels.tar.xz}"
    tmp=$(mktemp -d)
    tar -xJf "$src/kernels.tar.xz" -C "$tmp"
    # The PTX entries of builds before CUBIN are never read by this build's default target,
    # yet were 161 of the cache's 218 MB unpacked (2026-12-01): packing that back took over a
    # minute on the card and cut a run short. Dropped here, where sqlite3 is at hand.
    if command -v sqlite3 > /dev/null && [ -f "$tmp/default.db" ]; then
        sqlite3 "$tmp/default.db" "PRAGMA wal_checkpoint(TRUNCATE); DELETE FROM entries WHERE namespace LIKE '%/ptx_sm%'; VACUUM;" > /dev/null
        rm -f "$tmp"/default.db-*shm
    fi
    rm -f "$GPU_DIR/kernels.tar.xz"
    tar -cJf "$GPU_DIR/kernels.tar.xz" -C "$tmp" .
    rm -rf "$tmp"
    ls -l "$GPU_DIR/kernels.tar.xz"
    ;;
remote)
    shift
    : "${OUT:?remote mode runs on the GPU machine, where \$OUT is set}"
    bin=/tmp/libreyolo-run
    xz -dc "$GPU_DIR/libreyolo-run.xz" > "$bin" && chmod +x "$bin"
    export LIBREYOLO_KERNEL_CACHE=/tmp/libreyolo-kernels
    # The driver's PTX -> SASS JIT cache, inside the kernel cache: only PTX kernels use it (the
    # CUBIN ones our cubecl-cuda emits by default do not; CUBECL_CUDA_NVRTC_TARGET=ptx for A/B).
    export CUDA_CACHE_PATH=$LIBREYOLO_KERNEL_CACHE/nv-compute-cache CUDA_CACHE_MAXSIZE=4294967296
    # A machine that ran an earlier remote run still has that run's cache: the copied one goes
    # into an empty directory, never over it (its SQLite write-ahead log mixed into the new
    # database: "Invalid page type", then a poisoned device, on 2026-12-01). The earlier run's
    # cache is kept as it is when it grew from this same copied cache with this same binary
    # (the mark below): it holds everything the copy does, plus the kernels that run compiled
    # (e.g. RT-DETR's ~130 s of them before a `resume=true` in the next command).
    sources=("$GPU_DIR/libreyolo-run.xz")
    [ -f "$GPU_DIR/kernels.tar.xz" ] && sources+=("$GPU_DIR/kernels.tar.xz")
    origin=$(cat "${sources[@]}" | sha256sum | cut -d' ' -f1)
    if [ -f "$LIBREYOLO_KERNEL_CACHE/.origin" ] && [ "$(cat "$LIBREYOLO_KERNEL_CACHE/.origin")" = "$origin" ]; then
        echo "[gpu.sh] kernel cache of the earlier run on this machine kept: $(du -sh "$LIBREYOLO_KERNEL_CACHE" | cut -f1)"
    else
        rm -rf "$LIBREYOLO_KERNEL_CACHE"
        mkdir -p "$LIBREYOLO_KERNEL_CACHE"
        if [ -f "$GPU_DIR/kernels.tar.xz" ]; then
            tar -xJf "$GPU_DIR/kernels.tar.xz" -C "$LIBREYOLO_KERNEL_CACHE"
            echo "[gpu.sh] kernel cache restored: $(du -sh "$LIBREYOLO_KERNEL_CACHE" | cut -f1)"
        else
            echo "[gpu.sh] no kernel cache copied: cold start"
        fi
        echo "$origin" > "$LIBREYOLO_KERNEL_CACHE/.origin"
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    status=0
    set +e # a failing step must not skip the others nor the cache upload
    for step in "$@"; do
        limit=${STEP_TIMEOUT:-540}
        case "$step" in @*:*) limit=${step%%:*}; limit=${limit#@}; step=${step#*:} ;; esac
        echo "[gpu.sh $(date +%T)] libreyolo-run $step (limit ${limit}s)" | tee -a "$OUT/steps.log"
        start=$(date +%s)
        case "$step" in
        sh:*) # a shell command, with $BIN the unpacked binary (e.g. bench/ops.sh "$BIN" "$OUT")
            BIN=$bin timeout "$limit" bash -c "${step#sh:}" >> "$OUT/steps.log" 2>&1 ;;
        *) # shellcheck disable=SC2086 # each step is an argument list
            eval "timeout $limit \"$bin\" $step" >> "$OUT/steps.log" 2>&1 ;;
        esac
        rc=$?
        echo "[gpu.sh $(date +%T)] exit $rc after $(( $(date +%s) - start ))s: $step" | tee -a "$OUT/steps.log"
        [ "$rc" = 0 ] || status=$rc
    done
    set -e
    # The warm-up logs first (small, and what a cut-short run most needs back), then the cache
    # without the driver's JIT cache (hundreds of MB; unused with CUBIN kernels), and
    # only if it is under 16 MB (a limit of the transfer this script was written for).
    for log in autotune-decisions.jsonl compilations.log; do
        [ -f "$LIBREYOLO_KERNEL_CACHE/$log" ] && xz -c "$LIBREYOLO_KERNEL_CACHE/$log" > "$OUT/$log.xz"
    done
    # Some transfers return at most 8 files and drop the rest (2026-12-01: the kernel cache and
    # steps.log were lost that way): beyond 4 files of the steps' own, they travel as one tar.
    own=$(cd "$OUT" && ls -A | grep -v -x -e steps.log -e autotune-decisions.jsonl.xz -e compilations.log.xz || true)
    # Files, not entries: a step's output folder counts for every file in it.
    count=$(cd "$OUT" && find . -type f ! -path ./steps.log ! -path ./autotune-decisions.jsonl.xz ! -path ./compilations.log.xz | grep -c . || true)
    if [ "$count" -gt 4 ]; then
        # shellcheck disable=SC2086 # one name a line, none with spaces (our own outputs)
        (cd "$OUT" && tar -cf outputs.tar $own && rm -rf $own)
        echo "[gpu.sh] the steps' $count outputs bundled into outputs.tar"
    fi
    if [ "${SAVE_CACHE:-1}" = 1 ]; then
        tar -cJf /tmp/kernels.tar.xz --exclude=./nv-compute-cache --exclude=./.origin -C "$LIBREYOLO_KERNEL_CACHE" .
        size=$(stat -c %s /tmp/kernels.tar.xz)
        if [ "$size" -lt 16000000 ]; then
            mv /tmp/kernels.tar.xz "$OUT/kernels.tar.xz"
            echo "[gpu.sh] kernel cache saved: $size bytes"
        else
            echo "[gpu.sh] kernel cache not saved: $size bytes is over what the transfer returns"
        fi
    fi
    echo "[gpu.sh] exit status $status"
    exit $status
    ;;
*)
    sed -n '2,16p' "$0"
    exit 2
    ;;
esac
