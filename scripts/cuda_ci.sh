#!/usr/bin/env bash
# CI's CUDA step (.ci/run calls it): when nvcc is installed, configure a separate build with the
# CUDA backend for one architecture (sm_90), build only the library and the CUDA test binaries
# (tests/cuda, and tests/nccl when MPI and NCCL are found: MIXPREC_NCCL), and run them through
# CTest (without a GPU they report "not run"; CTest then passes). The
# point is that the CUDA code compiles and links in every run; it is built at -O0
# (CMAKE_BUILD_TYPE=None) to keep the step short on 2 cores. Without nvcc: says so, exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
BUILD_DIR=${BUILD_DIR:-build-cuda-ci}
if [ ! -x "$NVCC" ]; then
  echo "cuda_ci: no $NVCC: the CUDA build is skipped"
  exit 0
fi
t0=$SECONDS
log=$(mktemp /tmp/cuda_ci.configure.XXXXXX.log)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=None -DMIXPREC_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$NVCC" -DMIXPREC_BUILD_BENCH=OFF \
  -DMIXPREC_BUILD_TOOLS=OFF -DMIXPREC_PYTHON=OFF > "$log" 2>&1 \
  || { cat "$log"; exit 1; }
targets=(mixprec cuda_test)
if grep -q '^MIXPREC_NCCL:BOOL=ON' "$BUILD_DIR/CMakeCache.txt"; then
  targets+=(nccl_test)
else
  echo "cuda_ci: MIXPREC_NCCL is off (no MPI or no nccl.h): the NCCL code is not built"
fi
cmake --build "$BUILD_DIR" -j 2 --target "${targets[@]}"
ctest --test-dir "$BUILD_DIR" -L cuda --output-on-failure
echo "cuda_ci: configure, build and test in $((SECONDS - t0)) s"
