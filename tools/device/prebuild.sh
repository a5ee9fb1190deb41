#!/usr/bin/env bash
# Run HERE (not on the device): builds the device's binaries on this machine (the same CUDA 13.0
# and GCC 13 as the device; Release, sm_90) and packs them, stripped, into build-pre/bin.txz, which
# `run` carries to the device (carry: [".deps", "build-pre"]); there, PREBUILT=1 makes
# stream_check.sh and prefill_check.sh unpack them into build-dev/ instead of building (~90 s of
# every call's device time). The tests' paths are compiled relative to the repository root (the
# device runs them from there). KTRACE=1 also builds the timeline build's bench_decode (build-kt).
#   bash tools/device/prebuild.sh [TARGETS...]      (default: the targets the device scripts run)
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/cuda/bin"
T=${*:-"hotmoe hotmoe-gen bench_decode bench_launch test_gpu_gemv test_gpu_model test_gpu_prefill test_gpu_stream test_gpu_ops"}
J=${JOBS:-$(nproc)}
cmake -S . -B build-dev -DHOTMOE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
      -DHM_TESTS_DIR=tests -DHM_TEST_BUILD_DIR=build-dev >/dev/null
cmake --build build-dev -j"$J" --target $T
# a target's binary in build dir $1: at its top, or in tests/ (where cmake puts the tests)
bin_of() { if [ -x "$1/$2" ]; then echo "$1/$2"; else echo "$1/tests/$2"; fi; }
files=""
for t in $T; do
  f=$(bin_of build-dev $t)
  [ -x "$f" ] || { echo "prebuild: no binary for $t" >&2; exit 1; }
  files="$files $f"
done
if [ -n "${KTRACE:-}" ]; then
  cmake -S . -B build-kt -DHOTMOE_CUDA=ON -DHOTMOE_KTRACE=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build-kt -j"$J" --target bench_decode
  files="$files build-kt/bench_decode"
fi
# ALT=dir: also another build's bench_decode (e.g. a worktree of the previous main, built there) as
# build-alt/bench_decode, for stream_check's alt config (the same run on both binaries in one call;
# tools/device/build_alt.sh COMMIT builds one and prints its ALT). ALTS="name=dir ...": more of
# them, as build-alt-name/ (stream_check's config alt-name), e.g. compile-time variants of this
# commit; a dir's test_gpu_gemv / test_gpu_model go with it (run by hand there). build-alt*/COMMIT
# says what each is: dir/COMMIT when there, else the commit of dir's worktree, else its name.
alts="${ALT:+=$ALT} ${ALTS:-}"   # name=dir; ALT's name is empty
for a in $alts; do [ -x "${a#*=}/bench_decode" ] || { echo "prebuild: no ${a#*=}/bench_decode" >&2; exit 1; }; done
rm -rf build-pre && mkdir -p build-pre/stage
for f in $files; do mkdir -p "build-pre/stage/$(dirname "$f")"; cp "$f" "build-pre/stage/$f"; strip "build-pre/stage/$f"; done
for a in $alts; do
  n=${a%%=*} d=${a#*=}; o=build-pre/stage/build-alt${n:+-$n}; mkdir -p $o
  for t in bench_decode test_gpu_gemv test_gpu_model; do
    f=$(bin_of "$d" $t)
    if [ -x "$f" ]; then cp "$f" $o/ && strip $o/$t; fi
  done
  if [ -f "$d/COMMIT" ]; then cp "$d/COMMIT" $o/
  else git -C "$d" rev-parse HEAD > $o/COMMIT 2>/dev/null || echo "${n:-alt}" > $o/COMMIT; fi
done
git rev-parse HEAD > build-pre/stage/PREBUILT_COMMIT
git diff --quiet HEAD -- . ':!build-pre' || echo "dirty" >> build-pre/stage/PREBUILT_COMMIT
# xz -9 on one thread: its 64 MiB window spans the binaries, which share the library's GPU code (~8 MB
# each), so each binary past the first costs ~1 MB instead of gzip's ~5 (43 MB -> 11 MB for 7 targets + an alt)
if command -v xz >/dev/null; then pk=build-pre/bin.txz; (cd build-pre/stage && tar cf - . | xz -9 -T1 > ../bin.txz)
else pk=build-pre/bin.tgz; (cd build-pre/stage && tar czf ../bin.tgz .); fi
rm -rf build-pre/stage
du -h $pk
# what `run` sends: the tracked and untracked-not-ignored files, and the carried paths; past 64 MiB it refuses the call
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
deps=$(du -sb .deps 2>/dev/null | cut -f1 || true); sent=$(( tree + ${deps:-0} + $(stat -c %s $pk) ))
echo "carry: [\".deps\", \"build-pre\"] and set PREBUILT=1; the call sends $(( sent / 1048576 )) MiB of run's 64 (the tree $(( tree / 1048576 )), .deps $(( ${deps:-0} / 1048576 )))"
[ $sent -le $(( 64 * 1048576 )) ] || echo "prebuild: WARNING: over run's 64 MiB: pack fewer alts or leave their tests out" >&2
