#!/usr/bin/env bash
# Sets up hotmoe and runs the main job on the bundled demo model (a tiny random-weight
# Qwen3-MoE converted to GGUF by hotmoe itself at build time).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)"
./build/hotmoe inspect
./build/hotmoe generate -p "${1:-Once upon a time}" -n 48 --temp 0.8 --seed 42
