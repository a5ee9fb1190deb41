#!/usr/bin/env bash
# Sets up and runs every test that does not need a GPU: the CPU-only build and, when the CUDA
# toolkit is present, the CUDA build (GPU tests report themselves as skipped without a GPU); then
# every CPU test once more under AddressSanitizer + UBSan (leaks included; the HTTP server end to end among them).
# Test-only references (openai/anthropic SDKs, prometheus_client, gguf, jinja2) come from PyPI into
# a virtual environment; without network those parts print SKIP.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
JOBS=$(nproc 2>/dev/null || echo 2)
export PATH="$PATH:/usr/local/cuda/bin"

# test-only Python references, in a venv of our own
PY=python3
if [ ! -x .venv-test/bin/python3 ]; then
  python3 -m venv .venv-test >/dev/null 2>&1 || { SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo;
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null 2>&1 && python3 -m venv .venv-test; } || true
fi
if [ -x .venv-test/bin/python3 ]; then
  .venv-test/bin/python3 -m pip install -q --disable-pip-version-check openai anthropic prometheus_client gguf jinja2 numpy \
    >/dev/null 2>&1 || echo "== PyPI not reachable: SDK/reference checks will print SKIP"
  PY="$PWD/.venv-test/bin/python3"
fi
export HM_DISCONNECTS=1000

echo "== CPU-only build"
cmake -S . -B build-cpu -DHOTMOE_CUDA=OFF -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v $PY)" >/dev/null
cmake --build build-cpu -j"$JOBS"
echo "== tests (CPU-only build)"
(cd build-cpu && ctest --output-on-failure -j"$JOBS")

if command -v nvcc >/dev/null 2>&1; then
  echo "== CUDA build ($(nvcc --version | tail -1))"
  cmake -S . -B build-cuda -DHOTMOE_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v $PY)" >/dev/null
  cmake --build build-cuda -j"$JOBS"
  echo "== tests (CUDA build; GPU tests skip without a GPU)"
  (cd build-cuda && ctest --output-on-failure -j"$JOBS" -E "^test_server$")   # test_server_curl: serve starts in this build too
else
  echo "== CUDA toolkit not found (nvcc): the CUDA build was not attempted"
fi

echo "== sanitizer build (ASan + UBSan, leaks included): every CPU test again, the HTTP server end to end among them"
cmake -S . -B build-asan -DHOTMOE_CUDA=OFF -DHOTMOE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DPython3_EXECUTABLE="$(command -v $PY)" >/dev/null
cmake --build build-asan -j"$JOBS"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j"$JOBS")
