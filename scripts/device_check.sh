#!/usr/bin/env bash
# The CUDA backend's proof on a machine with an NVIDIA GPU (the `device` tool's H200: 16 cores,
# no package registry), in one run of at most 8 minutes:
#   1. deps:  unpack .device-deps/*.deb (made here by scripts/device_deps.sh) into /tmp/mixprec-deps
#   2. build: Release, -DMIXPREC_CUDA=ON, one architecture (sm_90), -j16: library, CLI, CUDA tests
#   3. tests: tests/cuda against the reference kernels (must run: exit 77 = no GPU = failure)
#   4. bench: `mixprec bench --device cuda` on every zoo model at O0, O2-f16, O2-bf16
#   5. train: the main job (simplenet, 2 epochs of Fashion-MNIST) on the GPU
# Everything lands as JSON under $OUT (summary.json says which stages passed and how long each
# took); the first failing stage stops the run and is named on the last line and in summary.json.
# From the device tool: run(command="bash scripts/device_check.sh", carry=[".device-deps"],
# timeout_s=540). Exit status: 0 all stages passed, 1 a stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
t0=$SECONDS
BUILD=build-device
DEPS=/tmp/mixprec-deps
STAGES=()
current=""

write_summary() {  # $1: ok | the failing stage
  {
    printf '{"result": "%s", "seconds": %d, "stages": [' "$1" $((SECONDS - t0))
    local IFS=,
    printf '%s' "${STAGES[*]}"
    printf ']}\n'
  } > "$OUT/summary.json"
}
start() { current=$1; stage_t0=$SECONDS; echo "device_check: [$1] starting at $((SECONDS - t0)) s"; }
passed() {
  STAGES+=("{\"stage\": \"$current\", \"status\": \"passed\", \"seconds\": $((SECONDS - stage_t0))}")
  echo "device_check: [$current] passed in $((SECONDS - stage_t0)) s"
}
fail() {
  STAGES+=("{\"stage\": \"$current\", \"status\": \"failed\", \"seconds\": $((SECONDS - stage_t0))}")
  write_summary "failed at $current"
  echo "device_check: FAILED at stage '$current' after $((SECONDS - t0)) s: $*"
  exit 1
}

# ---------------------------------------------------------------- 1. deps
start deps
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1 \
  || fail "nvidia-smi: no GPU or driver visible"
cat "$OUT/gpu.txt"
if compgen -G ".device-deps/*.deb" > /dev/null; then
  mkdir -p "$DEPS"
  for f in .device-deps/*.deb; do dpkg-deb -x "$f" "$DEPS" || fail "cannot unpack $f"; done
fi
export CMAKE_PREFIX_PATH="$DEPS/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CPATH="$DEPS/usr/include${CPATH:+:$CPATH}"
DATA=/usr/share/datasets/fashion-mnist
[ -d "$DATA" ] || DATA="$DEPS/usr/share/datasets/fashion-mnist"
[ -d "$DATA" ] || fail "no Fashion-MNIST at /usr/share/datasets/fashion-mnist (run scripts/device_deps.sh here, carry .device-deps)"
passed

# ---------------------------------------------------------------- 2. build
start build
timeout 300 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIXPREC_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMIXPREC_BUILD_BENCH=OFF -DMIXPREC_PYTHON=OFF \
  -DMIXPREC_WITH_MPI=OFF > "$OUT/configure.txt" 2>&1 || { tail -30 "$OUT/configure.txt"; fail "cmake configure"; }
rm -f "$OUT/configure.txt"
timeout 300 cmake --build "$BUILD" -j 16 --target mixprec mixprec_cli cuda_test || fail "build"
M="$BUILD/tools/mixprec"
passed

# ---------------------------------------------------------------- 3. tests
start cuda_tests
timeout 120 "$BUILD/tests/cuda_test" --gtest_output="json:$OUT/cuda_tests.json"
rc=$?
[ $rc -eq 77 ] && fail "the CUDA tests did not run: no CUDA device visible to the process"
[ $rc -eq 0 ] || fail "CUDA tests failed (exit $rc; see cuda_tests.json)"
passed

# ---------------------------------------------------------------- 4. bench
start bench
mkdir -p /tmp/mixprec-bench
reports=()
# Every zoo model, the transformers included (CUDA attention: src/ops/cuda/attention.cu), each at
# its default batch (vit-tiny 128, gpt-tiny 32 windows of 128 tokens) except resnet-small (256).
for model in simplenet lenet convnet-bn mlp resnet-small vit-tiny gpt-tiny; do
  for config in O0:bf16 O2:f16 O2:bf16; do
    level=${config%%:*}
    dtype=${config##*:}
    r=/tmp/mixprec-bench/$model-$level-$dtype.json
    extra=()
    [ "$model" = resnet-small ] && extra=(--batch-size 256)
    timeout 60 "$M" bench --device cuda --model "$model" --amp-level "$level" --dtype "$dtype" \
      --steps 20 --warmup 5 "${extra[@]}" --report "$r" || fail "bench $model $level $dtype"
    reports+=("$r")
  done
done
python3 -c 'import json, sys; json.dump([json.load(open(p)) for p in sys.argv[2:]], open(sys.argv[1], "w"), indent=1)' \
  "$OUT/bench.json" "${reports[@]}" || fail "combining the bench reports"
passed

# ---------------------------------------------------------------- 5. train
start train
timeout 120 "$M" train --device cuda --model simplenet --epochs 2 --data "$DATA" \
  --report "$OUT/train.json" || fail "mixprec train --device cuda"
passed

write_summary ok
echo "device_check: all stages passed in $((SECONDS - t0)) s"
