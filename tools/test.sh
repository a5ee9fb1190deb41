#!/usr/bin/env bash
# Sets up and runs every test that does not need a GPU: builds the CPU-only binary and, when the
# CUDA toolkit is present, the CUDA build too; GPU tests report themselves as skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
JOBS=$(nproc 2>/dev/null || echo 2)
export PATH="$PATH:/usr/local/cuda/bin"

echo "== CPU-only build"
cmake -S . -B build-cpu -DHOTMOE_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-cpu -j"$JOBS"
echo "== tests (CPU-only build)"
(cd build-cpu && ctest --output-on-failure -j"$JOBS")

if command -v nvcc >/dev/null 2>&1; then
  echo "== CUDA build ($(nvcc --version | tail -1))"
  cmake -S . -B build-cuda -DHOTMOE_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build-cuda -j"$JOBS"
  echo "== tests (CUDA build; GPU tests skip without a GPU)"
  (cd build-cuda && ctest --output-on-failure -j"$JOBS")
else
  echo "== CUDA toolkit not found (nvcc): the CUDA build was not attempted"
fi
