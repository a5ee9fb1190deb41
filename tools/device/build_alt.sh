#!/usr/bin/env bash
# Run HERE (not on the device): builds bench_decode of another commit (e.g. the previous main) in a
# worktree under /tmp, for the device's A/B in one call (machines differ by 1-2% between calls):
#   bash tools/device/build_alt.sh COMMIT        (~17 min on a 2-core machine; prints the ALT path)
#   ALT=<that path> bash tools/device/prebuild.sh ...   then stream_check's config `alt`
# The worktree stays until `git worktree remove --force /tmp/hm-alt-<commit>` (it is not in the repository).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 1 ] || { echo "usage: bash tools/device/build_alt.sh COMMIT" >&2; exit 2; }
c=$(git rev-parse --short "$1")
wt=/tmp/hm-alt-$c
export PATH="$PATH:/usr/local/cuda/bin"
[ -d "$wt" ] || git worktree add --detach "$wt" "$c" >/dev/null
cmake -S "$wt" -B "$wt/build-alt" -DHOTMOE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$wt/build-alt" -j"${JOBS:-$(nproc)}" --target bench_decode >/dev/null
echo "ALT=$wt/build-alt"
