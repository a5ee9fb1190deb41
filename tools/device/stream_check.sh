#!/usr/bin/env bash
# ON THE DEVICE, in one `run` call: the offload paths ([stream] expert cache, [cpu-workers] CPU
# experts). Build; test_gpu_stream on the fixtures, generated tiny models and a3b (exactness
# against the all-resident executor); synthetic routing traces fitted per model class; then
# BENCH.md's S5 (a3b, 8 GiB) and S1/S2 (air, 24 GiB): all resident, --cold stream and --cold cpu
# under natural and replayed routing, beside the planner's prediction, in the same call.
# TEST_ENV="K=V ...": the GPU tests run under those settings.
#   run: [CONFIGS="resident stream ..."] bash tools/device/stream_check.sh [RUNS] [GEN] [MODELS]     (carry: .deps)
# PREBUILT=1 (carry .deps and build-pre, made here by tools/device/prebuild.sh with the same targets):
# no build on the device (~90 s of the call). Compare against the previous main IN THE SAME CALL
# (machines differ by 1-2% between calls): ALT=dir prebuild.sh packs that build's bench_decode and
# the config `alt` runs it (ALTS="name=dir ...": several, configs `alt-name`); the carry limit (64 MiB)
# then leaves room for about two GPU tests, or five more bench_decode.
# CARD=H200 (env.sh): stop at once, rc 3, unless nvidia-smi names GPU 0 with that (a call for an H200 may get an H100).
set -uo pipefail
RUNS=${1:-3}; GEN=${2:-512}; MODELS=${3:-"a3b:8 air:24"}
OUT=${OUT:-/tmp/hotmoe-out}; mkdir -p "$OUT"
# everything written under $OUT goes back as one archive (the device returns a limited number of files)
pack() { [ -n "${SMI_PID:-}" ] && kill "$SMI_PID" 2>/dev/null; (cd "$OUT" && ls | grep -v '^logs.tgz$' | tar czf logs.tgz -T - 2>/dev/null && ls | grep -v '^logs.tgz$' | xargs rm -rf); }
trap pack EXIT
source tools/device/env.sh
t0=$(date +%s)
BUDGET=${BUDGET:-570}          # seconds this script may take (one run call: 600)
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
# a config's settings (K=V+K2=V2) exported, and env_restore puts each back as it was before (set to its old value, or unset):
# a setting given to the whole call (e.g. HOTMOE_UPLOAD_THREADS=16 before the script) holds again for the configs after it
env_set() { ENV_OLD=(); local kv n; for kv in ${1//+/ }; do n=${kv%%=*}; ENV_OLD+=("$n=${!n-__unset__}"); export "$kv"; done; }
env_restore() { local kv; for kv in "${ENV_OLD[@]}"; do [ "${kv#*=}" = __unset__ ] && unset "${kv%%=*}" || export "$kv"; done; ENV_OLD=(); }
# bench_gemv only when a `gemv` config asks for it (with PREBUILT=1 a missing target means a build: ~130 s)
case " ${CONFIGS:-} $MODELS " in *gemv*) BG=" bench_gemv" ;; *) BG="" ;; esac
# EXTRAS=1: bench_decode's replays after the runs (steps without logits, greedy both ways: ~3 x RUNS x GEN steps, ~9 s of an
# air config); by default --quick leaves them out
QUICK="--quick ${BD_ARGS:-}"; [ -n "${EXTRAS:-}" ] && QUICK="${BD_ARGS:-}"   # BD_ARGS: more bench_decode flags for every config, e.g. "--prompt 2048"
TARGETS=${TARGETS:-"hotmoe hotmoe-gen bench_decode test_gpu_stream$BG"}   # TARGETS=all: everything (and ctest of the GPU tests)
[ -n "${GPU_TESTS:-}" ] && TARGETS="$TARGETS $GPU_TESTS"   # e.g. GPU_TESTS="test_gpu_gemv test_gpu_model": built and run below
if [ "$TARGETS" != all ] && hm_prebuilt $TARGETS; then :   # PREBUILT=1: tools/device/prebuild.sh's binaries (env.sh)
else
  cmake -S . -B build-dev -DHOTMOE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
  if [ "$TARGETS" = all ]; then cmake --build build-dev -j"$(nproc)" >"$OUT/build.log" 2>&1
  else cmake --build build-dev -j"$(nproc)" --target $TARGETS >"$OUT/build.log" 2>&1; fi || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
fi
echo "== built in $(( $(date +%s) - t0 )) s"
df -h /tmp | tail -1; df -h /dev/shm 2>/dev/null | tail -1
if [ "$TARGETS" = all ]; then
  (cd build-dev && timeout 240 ctest --output-on-failure -j4 -R "test_gpu_(model|ops|prefill|gemv|decode_emu)" >"$OUT/ctest.log" 2>&1); grep -E "tests passed|\*\*\*Failed|Timeout" "$OUT/ctest.log"
fi
# the models in RAM (/dev/shm) when it has room for air (52.7 GB) and some, and flash (115 GB) is not asked for: the generator
# then writes at memory speed instead of the disk's (air: 39 s at 1.36 GB/s in session 40); else /tmp. HOTMOE_MODELS=dir picks.
shm_gb=$(df -B1G --output=avail /dev/shm 2>/dev/null | tail -1 | tr -d ' '); shm_gb=${shm_gb:-0}
case " $MODELS " in *flash*) shm_gb=0 ;; esac
[ -z "${HOTMOE_MODELS:-}" ] && [ "$shm_gb" -ge 56 ] 2>/dev/null && HOTMOE_MODELS=/dev/shm/hotmoe-models
M=${HOTMOE_MODELS:-/tmp/hotmoe-models}; mkdir -p "$M"; echo "== models in $M (/dev/shm: ${shm_gb} GB free)"
G=./build-dev/hotmoe-gen; H=./build-dev/hotmoe; B=./build-dev/bench_decode
MIXES="q4_k_m q8_0"   # test_gpu_model takes every quant type: GPU vs CPU under the reference kernels, fast error <= 2x the CPU's
case " ${GPU_TESTS:-} " in *" test_gpu_model "*) MIXES="$MIXES f32 bf16 q4_0 q6_k q5_k_m q3_k_m q2_k mxfp4 iq4_xs" ;; esac
for mix in $MIXES; do [ -f "$M/tiny-$mix.gguf" ] || $G --shape tiny --mix $mix --seed 1 -o "$M/tiny-$mix.gguf" >/dev/null 2>&1; done
for mix in q4_k_m q3_k_m; do [ -f "$M/tinyglm-$mix.gguf" ] || $G --shape tinyglm --mix $mix --seed 2 -o "$M/tinyglm-$mix.gguf" >/dev/null 2>&1; done
# head dim 128 (air's and a3b's; the tiny shapes have 64): test_gpu_model's only fixture on that attention path (named outside the
# tinyglm-* glob, so test_gpu_stream and test_gpu_prefill keep their sets)
case " ${GPU_TESTS:-} " in *" test_gpu_model "*) [ -f "$M/hd128-tinyglm.gguf" ] || $G --shape tinyglm --custom heads=8,kv_heads=2,head_dim=128,rot=64 --mix q4_k_m --seed 3 -o "$M/hd128-tinyglm.gguf" >/dev/null 2>&1 ;; esac
for t in ${GPU_TESTS:-}; do
  args=""; case $t in test_gpu_model) args="$(ls "$M"/tiny-*.gguf) $M/tinyglm-q4_k_m.gguf $M/tinyglm-q3_k_m.gguf $M/hd128-tinyglm.gguf" ;; test_gpu_prefill) args="$(ls "$M"/tiny-*.gguf "$M"/tinyglm-*.gguf)" ;; esac
  env ${TEST_ENV:-} timeout ${GPU_TEST_S:-150} ./build-dev/tests/$t $args >"$OUT/$t.log" 2>&1; echo "== $t rc=$? at $(( $(date +%s) - t0 )) s"
  grep -E "^FAIL" "$OUT/$t.log" | head -10; tail -1 "$OUT/$t.log"
done
[ -z "${NO_TEST:-}" ] && { env ${TEST_ENV:-} timeout ${TEST_S:-200} ./build-dev/tests/test_gpu_stream "$M"/tiny-q4_k_m.gguf "$M"/tiny-q8_0.gguf "$M"/tinyglm-*.gguf >"$OUT/stream_test.log" 2>&1; echo "== test_gpu_stream rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAIL|passed" "$OUT/stream_test.log"; tail -1 "$OUT/stream_test.log"; }
# the GPU server check runs beside the big model's generation (CPU-bound); its result is printed before the benchmarks
[ -z "${NO_SERVE:-}" ] && { timeout 150 python3 tools/device/serve_check.py ./build-dev/hotmoe tests/fixtures/qwen3moe >"$OUT/serve_check.log" 2>&1 & }
SERVE_PID=${!:-}
for spec in $MODELS; do
  # spec: shape:GiB[:config,config] (the configs, when given, replace $CONFIGS for this model)
  IFS=: read -r shape gib mcfg <<<"$spec"; mcfg=${mcfg//,/ }; f="$M/$shape.gguf"; T="$M/$shape.hmrt"; NAT="$M/$shape-natural.hmrt"
  case $shape in a3b) nl=48 ;; tiny) nl=4 ;; *) nl=46 ;; esac   # layers, for the per-layer timelines (ktrace, timeline)
  if [ ! -f "$f" ]; then rm -f "$M"/a3b.gguf "$M"/air.gguf "$M"/flash.gguf; $G --shape $shape --seed 1 -o "$f" >"$OUT/gen-$shape.log" 2>&1; fi
  [ -f "$T" ] || $H simulate --generate $shape --tokens 4096 --seed 7 --write "$T" >"$OUT/trace-$shape.log" 2>&1
  [ "$shape" = a3b ] && [ -n "${A3B_TEST:-}" ] && { timeout 120 ./build-dev/tests/test_gpu_stream --quick "$f" >"$OUT/stream_test_a3b.log" 2>&1; grep -E "FAIL|passed" "$OUT/stream_test_a3b.log"; }
  [ -z "${NO_SERVE:-}" ] && [ -n "${SERVE_PID:-}" ] && { wait $SERVE_PID; echo "== serve_check rc=$?"; cat "$OUT/serve_check.log"; SERVE_PID=; }
  echo "== $shape at $gib GiB ($(( $(date +%s) - t0 )) s)"
  plans() {   # the planner's prediction, with DEVICE.md's HBM rate and with this build's measured decode GB/s
    local hbm; hbm=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['gb_s'])" "$OUT/decode-$shape-resident.json" 2>/dev/null || echo 0)
    local rt=uniform; [ -n "${1:-}" ] && rt=$1
    for cold in stream cpu auto; do for rate in default $hbm; do
      local extra=""; [ "$rate" = default ] || extra="--hbm-gbs $rate --hbm-eff 1 --gpu-layer-us 0"
      [ $rt = uniform ] || extra="$extra --routing $rt"
      local pj="$OUT/plan-$shape-$cold-$rate-$(basename $rt).json"
      $H plan -m "$f" --gpu-mem $gib --cold $cold --ctx $((128 + GEN)) --decode-pos $((128 + GEN / 2)) $extra --json >"$pj" 2>"$OUT/plan-$shape-$cold.err"
      python3 - "$pj" "$cold (HBM $rate, routing $(basename $rt))" <<'PY' 2>&1 | tail -1
import json, sys
j = json.load(open(sys.argv[1])); g = j['gpus'][0]; L = [x for x in j['layers'] if x.get('moe')][0]
n = lambda v: len(v) if isinstance(v, list) else v
print('plan %s: decode %.1f tok/s (%s), VRAM %.3f GiB, pinned %.2f GiB, per layer %d static + %d slots, %d stream, %d cpu'
      % (sys.argv[2], j['decode']['tok_s'], j['decode']['bottleneck'], g['total'] / 2**30, j['host']['pinned'] / 2**30,
         n(L['static']), n(L['slots']), n(L['stream']), n(L['cpu'])))
PY
    done; done
  }
  # the SM clock while a config runs (SMI=0: not sampled): nvidia-smi every 250 ms beside bench_decode, summed up after
  # it as the clock's min / median / max over the samples with the GPU busy (utilization >= 90%) and the most power drawn
  # (the H200's decode has more time outside its bandwidth than the H100's: bench/README.md, fifty-first pass)
  smi_on() { SMI_PID=; [ "${SMI:-1}" = 0 ] && return; command -v nvidia-smi >/dev/null || return
             nvidia-smi --query-gpu=utilization.gpu,clocks.sm,power.draw --format=csv,noheader,nounits -lms 250 >"$1" 2>/dev/null & SMI_PID=$!; }
  smi_off() { [ -n "${SMI_PID:-}" ] || return 0; kill $SMI_PID 2>/dev/null; wait $SMI_PID 2>/dev/null; SMI_PID=
              awk -F', *' '$1 >= 90 {print $2 + 0, $3 + 0}' "$1" | sort -n | awk '{c[NR] = $1; if ($2 > p) p = $2} END {if (NR)
                printf "clocks: SM %d / %d / %d MHz (min / median / max over %d busy samples of 250 ms), up to %.0f W\n",
                       c[1], c[int((NR + 1) / 2)], c[NR], NR, p}'; }
  run() { local tag=${1//\//-}${TAGSFX:-}; tag=${tag//\//-}; shift;   # (a / in a setting, e.g. HOTMOE_DIAG_SKIP=attn/post, not in file names)
          local k=2 tg=$tag; while [ -e "$OUT/decode-$shape-$tag.log" ]; do tag=$tg-$k; k=$((k + 1)); done   # a config run again keeps its own logs
          local lim=$(( $(left) - 3 )); [ $lim -lt 15 ] && { echo "-- $tag: no time left"; return; }
          smi_on "$OUT/smi-$shape-$tag.csv"
          timeout $lim $B -m "$f" --device cuda --runs $RUNS --gen $GEN --json "$OUT/decode-$shape-$tag.json" $QUICK "$@" >"$OUT/decode-$shape-$tag.log" 2>&1;
          echo "-- $tag: $*"; grep -E "^gpu|^hotmoe|^CPU workers|^\| /|^\| [0-9]|streams|^--prefetch|^sampler|^steps without|^greedy steps|^tokens of" "$OUT/decode-$shape-$tag.log"
          smi_off "$OUT/smi-$shape-$tag.csv"; }
  one() { local c=$1   # one config (envc-K=V+K2=V2@config: that config under those settings, its logs tagged with them)
    case $c in
      resident) run resident; plans ;;
      sref) run resident-sref --sampler-ref ;;   # the reference sampler (plain argmax loop) in the decode loop
      hargmax) run resident-hargmax --host-argmax ;;   # greedy with the logits copied out and the argmax on the host
      gstreams) for n in 2 4; do run gstreams$n --streams $n; run gstreams$n-hargmax --streams $n --host-argmax; done ;;   # batched greedy, resident
      samp) run resident-samp --temp 0.8 --top-p 0.95 ;;   # sampling, top of the vocabulary sorted
      samp-ref) run resident-samp-ref --temp 0.8 --top-p 0.95 --sampler-ref ;;   # sampling, the whole vocabulary sorted
      plans-replay) plans "$T" ;;
      gprof) export HOTMOE_GPU_PROFILE=2; run gprof --runs 1; unset HOTMOE_GPU_PROFILE   # where a decode step's GPU time goes, in graph mode
             grep -A14 "^gpu profile" "$OUT/decode-$shape-gprof.log" | head -16 ;;
      gemv) OMP_PROC_BIND=spread OMP_PLACES=cores timeout $(( $(left) - 3 )) ./build-dev/bench_gemv --size 2048 --runs 3 --threads 16 --isa avx2,avx512 \
              --types Q3_K,Q4_0,Q2_K,Q4_K,Q6_K,IQ4_XS --json "$OUT/gemv.json" >"$OUT/gemv.log" 2>&1; tail -14 "$OUT/gemv.log" ;;   # the CPU kernels at 16 threads    # the planner's prediction for the replayed trace (placement from its counts)
      profile) run profile --runs 1 --prompt-seed 777 --record-routing "$NAT"; cp "$NAT" "$OUT/" 2>/dev/null; plans "$NAT" ;;    # natural routing of another prompt than the measured runs': the profiling run
      stream-ov) run stream-ov --gpu-mem $gib --cold stream --overlap-misses ;;   # copies beside the hits' GEMVs (vs stream)
      cpu-ov) run cpu-ov --gpu-mem $gib --cold cpu --overlap-misses ;;            # (vs cpu)
      stream-pf) run stream-pf --gpu-mem $gib --cold stream --overlap-misses --prefetch ;;   # + the next layer's experts copied ahead
      cpu-hostfn) run cpu-hostfn --gpu-mem $gib --cold cpu --cpu-handoff hostfn ;;   # the hand-off by graph host nodes (vs cpu: mapped flags)
      cpu-pf) run cpu-pf --gpu-mem $gib --cold cpu --overlap-misses --prefetch ;;
      stream-prof) run stream-prof --gpu-mem $gib --cold stream --routing "$NAT" ;;   # placement from the profile, natural routing
      cpu-prof) run cpu-prof --gpu-mem $gib --cold cpu --routing "$NAT" ;;
      auto-prof) run auto-prof --gpu-mem $gib --routing "$NAT" ;;
      stream) run stream --gpu-mem $gib --cold stream ;;
      stream-replay) run stream-replay --gpu-mem $gib --cold stream --routing "$T" --replay-routing "$T" ;;
      cpu) run cpu --gpu-mem $gib --cold cpu ;;
      cpu-replay) run cpu-replay --gpu-mem $gib --cold cpu --routing "$T" --replay-routing "$T" ;;
      auto) run auto --gpu-mem $gib ;;
      auto-replay) run auto-replay --gpu-mem $gib --routing "$T" --replay-routing "$T" ;;
      all-cpu-experts) run all-cpu-experts --gpu-mem $gib --cold cpu --static-experts 0 --cache-slots 0 ;;
      no-swap) run no-swap --gpu-mem $gib --cold cpu --no-swap ;;
      exchange) run exchange --gpu-mem $gib --cold cpu --swap-interval 64 ;;
      prefill) run prefill --prefill 8192 ;;                                              # BENCH.md prefill, all in VRAM
      prefill-budget) run prefill-budget --prefill 8192 --gpu-mem $gib --cold stream --prefill-chunk 4096 ;;   # S1/S5 prefill
      prefill-staged) run prefill-staged --prefill 8192 --gpu-mem $gib --cold stream --prefill-chunk 4096 --staging 80 ;;
      s6) run s6 --gpu-mem $gib --cold stream --static-experts 40 --cache-slots 148 ;;   # BENCH.md S6 (flash:96, x2 kind for RAM)
      s3) run s3 --gpus 0,1 --gpu-mem 16,16 --cold cpu ;;          # nvidia-h200-x2: BENCH.md S3
      s3-one) run s3-one --gpu-mem 32 --cold cpu ;;                  # the same budget on one GPU
      s3-streams) for n in 2 4; do run s3-streams$n --runs 1 --gpus 0,1 --gpu-mem 16,16 --cold cpu --streams $n; done ;;
      streams-cpu) for n in 2 4; do run streams-cpu$n --runs 1 --gpu-mem $gib --cold cpu --streams $n; done ;;   # S2 at 2 and 4 sequences, natural routing
      streams) for n in 2 4; do run streams$n --runs 1 --gpu-mem $gib --cold cpu --routing "$NAT" --streams $n; done ;;   # 2 and 4 sequences together
      no-swap-prof) run no-swap-prof --gpu-mem $gib --cold cpu --no-swap --routing "$NAT" ;;   # the exchange's "before": the profile's placement, fixed
      exchange-prof) run exchange-prof --gpu-mem $gib --cold cpu --swap-interval 64 --routing "$NAT" ;;
      batch-res) for n in 2 4; do run batch-res$n --runs 1 --streams $n; done; run nobatch-res4 --runs 1 --streams 4 --no-batch ;;   # batched decode vs one step per sequence
      batch-cpu) for n in 2 4; do run batch-cpu$n --runs 1 --gpu-mem $gib --cold cpu --streams $n; done; run nobatch-cpu4 --runs 1 --gpu-mem $gib --cold cpu --streams 4 --no-batch ;;
      batch-stream) run batch-stream4 --runs 1 --gpu-mem $gib --cold stream --streams 4; run nobatch-stream4 --runs 1 --gpu-mem $gib --cold stream --streams 4 --no-batch ;;
      s3-batch) for n in 2 4; do run s3-batch$n --runs 1 --gpus 0,1 --gpu-mem 16,16 --cold cpu --streams $n; done ;;
      all-cpu-experts1) run all-cpu-experts --runs 1 --gpu-mem $gib --cold cpu --static-experts 0 --cache-slots 0 ;;
      no-swap-replay) run no-swap-replay --gpu-mem $gib --cold cpu --no-swap --routing "$T" --replay-routing "$T" ;;   # the exchange's "before" under the replayed trace
      alt|alt-*) n=${c#alt}; B0=$B; B=./build-alt$n/bench_decode   # the same run on another build's binary (prebuild.sh ALT=DIR: alt; ALTS="name=DIR ...": alt-name), A/B in one call
             [ -x $B ] && { echo "-- alt$n is $(cat build-alt$n/COMMIT 2>/dev/null)"; run resident-alt$n; } || echo "-- alt$n: no $B (prebuild.sh ALT= or ALTS=)"; B=$B0 ;;
      sweep) for v in ${SWEEP:-HM_BASE=s1 HOTMOE_ATT_WARPS=0 HOTMOE_RN_CLUSTER=0 HOTMOE_RN_WIDE=0 HOTMOE_QKV_PAIR=0 HOTMOE_PDL_TRIGGER=0 \
               HOTMOE_PDL_TRIGGER=1 HOTMOE_PDL_TRIGGER=2 HOTMOE_PREWAIT=0 HOTMOE_ROUTER_NORM_ROWS=2 HOTMOE_OWARM=0 \
               HOTMOE_Q8_BPS3=0 HM_BASE=s2}; do one "env-$v"; done ;;   # each old switch again against main (SWEEP="K=V K2=V2+K3=V3 ...": others)
      env-*) kvs=${c#env-}; env_set "$kvs"; run resident-$kvs   # resident under environment settings, e.g. env-HOTMOE_XQ=0+HOTMOE_Q8_LANES=0 (as they were again after the run)
             env_restore ;;
      pfenv-*) kvs=${c#pfenv-}; env_set "$kvs"; run prefill-$kvs --prefill 8192   # the prefill under environment settings
             env_restore ;;
      benchair) for v in ${BENCHAIR:-default}; do   # the q8 GEMV launches of one air layer (needs test_gpu_gemv), e.g. BENCHAIR="default HOTMOE_Q8T=0 HOTMOE_Q8T=1+HOTMOE_Q8T_KB=64"
            v=${v/default/}; env ${v//+/ } timeout 60 ./build-dev/tests/test_gpu_gemv --bench-air >"$OUT/benchair-${v//=/}.log" 2>&1; echo "-- bench-air $v: rc=$?"; grep -v "^$" "$OUT/benchair-${v//=/}.log" | head -16; done ;;
      launch) [ -x ./build-dev/bench_launch ] || cmake --build build-dev --target bench_launch >>"$OUT/build.log" 2>&1   # a kernel boundary's cost in a graph
          for w in 0 5; do timeout 60 ./build-dev/bench_launch --work $w >"$OUT/launch-w$w.log" 2>&1; echo "-- bench_launch --work $w: rc=$?"; grep "^|" "$OUT/launch-w$w.log"; done ;;
      ktrace*)   # the kernels of one decode step, stamped inside the graph (a second build); ktrace-K=V+K2=V2: under those settings
          kvs=${c#ktrace}; kvs=${kvs#-}
          [ -x ./build-kt/bench_decode ] || { cmake -S . -B build-kt -DHOTMOE_CUDA=ON -DHOTMOE_KTRACE=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
              -DCMAKE_BUILD_TYPE=Release >>"$OUT/build.log" 2>&1 && cmake --build build-kt -j"$(nproc)" --target bench_decode >>"$OUT/build.log" 2>&1; }
          env ${kvs//+/ } HOTMOE_KTRACE=${KT_STEP:-300} timeout $(( $(left) - 3 )) ./build-kt/bench_decode -m "$f" --device cuda --runs 1 --gen $GEN >"$OUT/$c-$shape.log" 2>&1
          echo "-- $c $shape: rc=$?"; python3 tools/device/ktrace.py "$OUT/$c-$shape.log" $nl 2>&1 | head -${KT_LINES:-45} ;;
      timeline)   # each kernel of a decode step
          OUT=$OUT bash tools/device/timeline.sh "$f" $nl $shape-$c ;;
      ncu-*) NCU_LINES=80 OUT=$OUT bash tools/device/ncu_step.sh "$f" $shape-${c#ncu-} "${NCU_RE:-k_attn_gqa|k_router|k_residual_norm1}" ${NCU_SKIP:-300} ${NCU_COUNT:-3} ;;   # Nsight Compute on decode kernels (NCU_RE)
      exchange-replay) run exchange-replay --gpu-mem $gib --cold cpu --swap-interval 64 --routing "$T" --replay-routing "$T" ;;
    esac
  }
  for c in ${mcfg:-${CONFIGS:-resident stream stream-replay cpu cpu-replay auto auto-replay all-cpu-experts prefill prefill-budget prefill-staged}}; do
    case $c in
      envc-*@*) kvs=${c#envc-}; sub=${kvs#*@}; kvs=${kvs%@*}; env_set "$kvs"; envc_old=("${ENV_OLD[@]}")
                TAGSFX="-$kvs" one "$sub"; ENV_OLD=("${envc_old[@]}"); env_restore ;;
      *) one "$c" ;;
    esac
  done
done
echo "== all done in $(( $(date +%s) - t0 )) s"
