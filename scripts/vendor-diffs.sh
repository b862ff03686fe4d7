#!/usr/bin/env bash
# Writes vendor/patches/CRATE.diff: each patched vendored crate against the commit that added it
# exactly as published, so a patch reads (and re-applies onto a new upstream version) as one file.
# Run from the repository root after changing a vendored crate; commit the .diff with the change.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
declare -A PUBLISHED=(
  [burn-cubecl]=3a614f3    # vendor: burn-cubecl 0.22.1 as published on crates.io
  [burn-autodiff]=1ff3c8b  # vendor: burn-autodiff 0.22.1 exactly as published
  [cubecl-cuda]=efaa215    # vendor: cubecl-cuda 0.11.3 exactly as published
  [cubecl-opt]=8ed71c9     # vendor: cubecl-opt 0.11.3 exactly as published
)
mkdir -p vendor/patches
# A scratch index, so that marking new files for the diff leaves the user's index alone.
index=$(mktemp)
trap 'rm -f "$index"' EXIT
export GIT_INDEX_FILE=$index
git read-tree HEAD
for crate in "${!PUBLISHED[@]}"; do
  # Against the working tree, new files included (intent-to-add shows them to git diff); plain
  # a/ b/ prefixes and no external diff whatever the user's git configuration, for `git apply`.
  git add -N "vendor/$crate"
  git -c diff.noprefix=false -c diff.mnemonicPrefix=false diff --no-ext-diff --no-color "${PUBLISHED[$crate]}" -- "vendor/$crate" \
    > "vendor/patches/$crate.diff"
  echo "vendor/patches/$crate.diff: $(grep -c '^diff --git' "vendor/patches/$crate.diff") files, $(wc -l < "vendor/patches/$crate.diff") lines"
done
