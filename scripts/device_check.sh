#!/usr/bin/env bash
# The CUDA backend's proof on a machine with an NVIDIA GPU (the `device` tool's H200: 16 cores,
# no package registry, its own image), in one run inside one budget (default 480 s):
#   preflight   (<= 15 s) prints and checks nvcc, the driver and GPU, cuDNN (header and library:
#               next to the toolkit, under CUDNN_ROOT, or python3's nvidia/cudnn wheel, which
#               ships only libcudnn.so.9), cuBLASLt, NCCL (reported; not built: no MPI), CMake,
#               ninja, the C++ compiler with OpenMP, glibc, zlib, the carried packages and data,
#               python3's PyTorch; names every missing piece and stops
#   configure   Release with -O2 for the C++ (CMake's -O3 compiled 13% slower here, for host
#               code whose speed the GPU stages barely see; the same bits: no -ffast-math),
#               -DMIXPREC_CUDA=ON, sm_90 only, -DMIXPREC_WITH_ONEDNN=OFF (the CPU side on the
#               project's own cpu/ref kernels: nothing from Debian that the image lacks), no MPI,
#               no bench programs, no Python module
#   build       only what the later stages run: the library, the CLI and tests/cuda, -j (cores);
#               prints its wall and CPU seconds (on a shared machine the wall is not its cost)
#   cuda_tests  tests/cuda against the reference kernels (exit 77 = no GPU = failure)
#   bench       ONE `mixprec bench --device cuda` process: every zoo model at O0, O2-f16, O2-bf16
#               (the floor from the GPU's measured GEMM rate and copy bandwidth)
#   train       the main job (simplenet, 2 epochs of Fashion-MNIST) on the GPU
#   torch       the PyTorch peer on the GPU (bench/torch_gpu_peer.py): the same models in fp32,
#               bf16 autocast, f16 autocast + GradScaler; skipped when python3 has no torch
# Each stage gets what is left of the budget (keeping a floor for the stages after it);
# summary.json is rewritten (atomically) when each stage starts and ends, so a killed run leaves
# a valid summary naming the stage it was in. The first failing stage stops the run and is named
# on the last line and in summary.json. Under $OUT: summary.json, log.txt, cuda_tests.json,
# bench.json, train.json, torch.json (6 files: the tool brings back 8 at most); the full
# configure, build and test outputs stay in <build dir>-logs/ (their failing lines are in log.txt).
#
# From the device tool: run(command="bash scripts/device_check.sh", carry=[".device-deps"],
# timeout_s=540), after `bash scripts/device_deps.sh` here.
#
# Usage: bash scripts/device_check.sh [--dry-run] [--budget S] [--build-dir DIR] [--jobs N]
#                                     [--stop-after STAGE]
#   --dry-run      for a machine without a GPU (here, CI, scripts/device_mimic_test.sh): a missing
#                  driver or GPU is reported, not fatal; configure and build run; the first GPU
#                  stage (cuda_tests) runs up to its first GPU call, which must stop with the
#                  binary's "no CUDA device" line; the later GPU stages are skipped. Exit 0 then.
#   --budget S     the whole run's seconds (env DEVICE_CHECK_BUDGET; default 480)
#   --stop-after   end (exit 0) after this stage: preflight, configure, build, ...
#   env: OUT (default ./device-out), CUDNN_ROOT, NVCC, DEVICE_CHECK_DEPS (default /tmp/mixprec-deps)
# Exit status: 0 passed (or a dry run that stopped where it should), 1 a stage failed, 2 usage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD

DRY=${DEVICE_CHECK_DRY_RUN:-0}
BUDGET=${DEVICE_CHECK_BUDGET:-480}
BUILD=build-device
JOBS=$(nproc 2> /dev/null || echo 4)
STOP_AFTER=""
while (($#)); do
  case $1 in
    --dry-run) DRY=1 ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift ;;
    --build-dir) BUILD=${2:?--build-dir needs a folder}; shift ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift ;;
    --stop-after) STOP_AFTER=${2:?--stop-after needs a stage}; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "device_check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $BUDGET =~ ^[0-9]+$ ]] || { echo "device_check: --budget: expected whole seconds, got '$BUDGET'" >&2; exit 2; }
ALL_STAGES=(preflight configure build cuda_tests bench train torch)
if [ -n "$STOP_AFTER" ] && [[ " ${ALL_STAGES[*]} " != *" $STOP_AFTER "* ]]; then
  echo "device_check: --stop-after: expected one of ${ALL_STAGES[*]}, got '$STOP_AFTER'" >&2
  exit 2
fi

OUT=${OUT:-$ROOT/device-out}
# Long outputs (configure, build, tests) go beside the build, not into $OUT: the device tool
# brings back at most 8 files of it (summary.json, log.txt and the JSON reports).
case $BUILD in
  /*) LOGS=$BUILD-logs ;;
  *) LOGS=$ROOT/$BUILD-logs ;;
esac
mkdir -p "$OUT" "$LOGS"
exec > >(tee "$OUT/log.txt") 2>&1
exec 3>&1  # the log, for the lines of `limited` while a stage's own output goes to a file
t0=$SECONDS
DEPS=${DEVICE_CHECK_DEPS:-/tmp/mixprec-deps}
SHIM=$DEPS/shim  # unversioned links (libz.so, libcudnn.so, ...) to the libraries found
STAGES=()        # finished stages, as JSON objects
current=""
stage_t0=$SECONDS
child=""

# ---------------------------------------------------------------- bookkeeping
json_str() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1" 2> /dev/null || printf '"%s"' "${1//\"/\'}"; }
write_summary() {  # $1: result ("running", "passed", "dry run: ...", "failed at X"); $2: running stage or ""
  local tmp="$OUT/.summary.json.tmp" IFS=,
  {
    printf '{"result": %s, "dry_run": %s, "budget_s": %d, "seconds": %d, "stages": [' \
      "$(json_str "$1")" "$([ "$DRY" = 1 ] && echo true || echo false)" "$BUDGET" $((SECONDS - t0))
    printf '%s' "${STAGES[*]}"
    if [ -n "${2:-}" ]; then
      ((${#STAGES[@]})) && printf ','
      printf '{"stage": "%s", "status": "running", "seconds": %d}' "$2" $((SECONDS - stage_t0))
    fi
    printf ']}\n'
  } > "$tmp" && mv -f "$tmp" "$OUT/summary.json"
}
record() {  # status, note
  STAGES+=("{\"stage\": \"$current\", \"status\": \"$1\", \"seconds\": $((SECONDS - stage_t0)), \"note\": $(json_str "${2:-}")}")
}
left() { echo $((BUDGET - (SECONDS - t0))); }
# Sets CHILD_CPU to the CPU seconds (user + system) of every child process this shell has waited
# for, descendants included (bash's `times`, second line). Run in this shell, never in $(...) or a
# pipe: a subshell starts with no children's times.
child_cpu() {
  times > "$DEPS/times.txt"
  CHILD_CPU=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] } printf "%d", n }' "$DEPS/times.txt")
}
start() {
  current=$1
  stage_t0=$SECONDS
  echo "device_check: [$1] starting at $((SECONDS - t0)) s ($(left) s of the budget left)"
  write_summary running "$1"
}
passed() {
  record passed "${1:-}"
  echo "device_check: [$current] passed in $((SECONDS - stage_t0)) s${1:+: $1}"
  write_summary running ""
  if [ "$STOP_AFTER" = "$current" ]; then
    write_summary "stopped after $current (--stop-after)" ""
    echo "device_check: stopped after [$current] as asked, $((SECONDS - t0)) s"
    exit 0
  fi
}
skipped() {  # stage, why
  current=$1
  stage_t0=$SECONDS
  record skipped "$2"
  echo "device_check: [$1] skipped: $2"
}
fail() {
  record failed "$*"
  write_summary "failed at $current" ""
  echo "device_check: FAILED at stage '$current' after $((SECONDS - t0)) s: $*"
  exit 1
}
on_signal() {
  [ -n "$child" ] && kill -TERM -- "-$child" 2> /dev/null
  record interrupted "killed by a signal"
  write_summary "interrupted in $current" ""
  echo "device_check: INTERRUPTED in stage '$current' after $((SECONDS - t0)) s"
  exit 1
}
trap on_signal TERM INT HUP

# Runs a command with a time limit of min(cap, what is left - reserve) seconds, in the background
# (timeout makes its own process group, killed whole at the limit or on a signal to this script,
# which a background child lets the trap handle at once). Returns its exit status (124: over the
# limit).
limited() {  # cap reserve command...
  local cap=$1 reserve=$2
  shift 2
  ((BUDGET > 480)) && cap=$((cap * BUDGET / 480))  # caps are for the default budget: a larger one (a slower machine) scales them
  local limit=$(($(left) - reserve))
  ((limit > cap)) && limit=$cap
  if ((limit < 1)); then
    echo "device_check: no time left in the budget for $current (reserving ${reserve} s for the stages after it)" >&3
    return 124
  fi
  timeout -k 5 "$limit" "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=""
  ((rc == 124)) && echo "device_check: $current: over its limit of $limit s" >&3
  return $rc
}

# ---------------------------------------------------------------- preflight
start preflight
missing=()
have() { printf 'device_check:   %-13s %s\n' "$1" "$2"; }
lack() {
  printf 'device_check:   %-13s MISSING: %s\n' "$1" "$2"
  missing+=("$1")
}
note() { printf 'device_check:   %-13s %s\n' "$1" "$2"; }

# The carried Debian packages, unpacked into a private prefix (never into /).
if compgen -G ".device-deps/*.deb" > /dev/null; then
  rm -rf "$DEPS"
  mkdir -p "$DEPS"
  for f in .device-deps/*.deb; do dpkg-deb -x "$f" "$DEPS" || lack packages "cannot unpack $f"; done
  have packages "$(ls .device-deps/*.deb | wc -l) .deb unpacked into $DEPS"
else
  note packages "none carried (.device-deps/): the machine must have them (scripts/device_deps.sh)"
fi
mkdir -p "$SHIM"
ARCH_LIB=$DEPS/usr/lib/x86_64-linux-gnu
export CMAKE_PREFIX_PATH="$DEPS/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export LD_LIBRARY_PATH="$ARCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# nvcc
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ -x "$NVCC" ]; then
  have nvcc "$NVCC: $("$NVCC" --version | grep -o 'release [0-9.]*' | head -1)"
  CUDA_HOME=$(cd "$(dirname "$(readlink -f "$NVCC")")/.." && pwd)
else
  lack nvcc "no nvcc on PATH or at /usr/local/cuda/bin/nvcc (set NVCC)"
  CUDA_HOME=/usr/local/cuda
fi
CUDA_LIBS=()
for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib"; do [ -d "$d" ] && CUDA_LIBS+=("$d"); done

# the driver and the GPU
if command -v nvidia-smi > /dev/null && gpu=$(timeout 5 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1); then
  have gpu "$gpu"
  elif [ "$DRY" = 1 ]; then
  note gpu "none (dry run: expected; the run stops at the first GPU call)"
else
  lack gpu "nvidia-smi: no driver or GPU visible (${gpu:-no nvidia-smi})"
fi

# python3 and its site-packages (the image's venv: the nvidia-* wheels, PyTorch)
PY=$(command -v python3 || true)
SITE=()
if [ -n "$PY" ]; then
  mapfile -t SITE < <("$PY" -c 'import site, sys; print("\n".join(dict.fromkeys(site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p.endswith("-packages")])))' 2> /dev/null)
  have python3 "$PY ($("$PY" --version 2>&1))"
else
  lack python3 "no python3 (the summary, the bench report and the PyTorch peer need it)"
fi

# Finds lib<name>.so or, failing that, lib<name>.so.<N> (a wheel's layout) in the folders given
# and sets FOUND to it. A versioned one only (no lib<name>.so for the linker) gets an unversioned
# link in $SHIM (configure passes -DCMAKE_LIBRARY_PATH=$SHIM) and its folder goes on
# LD_LIBRARY_PATH (the programs find it by its soname there).
find_lib() {  # name folders...
  local name=$1 d f
  shift
  FOUND=""
  for d in "$@"; do
    if [ -e "$d/lib$name.so" ]; then
      FOUND=$d/lib$name.so
      return 0
    fi
  done
  for d in "$@"; do
    for f in "$d"/lib"$name".so.[0-9]*; do
      if [ -e "$f" ]; then
        FOUND=$f
        ln -sfn "$(readlink -f "$f")" "$SHIM/lib$name.so"
        export LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH"
        return 0
      fi
    done
  done
  return 1
}

# cuDNN: next to the toolkit, under CUDNN_ROOT, or python3's nvidia/cudnn (the wheel).
CUDNN_DIRS=()
[ -n "${CUDNN_ROOT:-}" ] && CUDNN_DIRS+=("$CUDNN_ROOT")
for s in "${SITE[@]}"; do [ -d "$s/nvidia/cudnn" ] && CUDNN_DIRS+=("$s/nvidia/cudnn"); done
# (CMake finds it the same way, src/CMakeLists.txt: no link is made for it here.)
cudnn_lib=""
cudnn_h=""
for d in "$CUDA_HOME" "${CUDNN_DIRS[@]}"; do
  for inc in "$d/include" "$d/targets/x86_64-linux/include"; do
    [ -z "$cudnn_h" ] && [ -f "$inc/cudnn_version.h" ] && [ -f "$inc/cudnn.h" ] && cudnn_h=$inc
  done
  for l in "$d/lib64" "$d/lib" "$d/targets/x86_64-linux/lib"; do
    for f in "$l/libcudnn.so" "$l/libcudnn.so.9"; do [ -z "$cudnn_lib" ] && [ -e "$f" ] && cudnn_lib=$f; done
  done
done
if [ -n "$cudnn_h" ] && [ -n "$cudnn_lib" ]; then
  v=$(awk '/#define CUDNN_MAJOR/{a=$3} /#define CUDNN_MINOR/{b=$3} /#define CUDNN_PATCHLEVEL/{c=$3} END{print a"."b"."c}' "$cudnn_h/cudnn_version.h")
  have cudnn "$v: $cudnn_lib, headers in $cudnn_h"
  CUDNN_ROOT_FOUND=$(dirname "$cudnn_h")
  LD_LIBRARY_PATH="$(dirname "$cudnn_lib"):$LD_LIBRARY_PATH"  # its sub-libraries too
else
  lack cudnn "header ${cudnn_h:-not found}, library ${cudnn_lib:-not found} (looked in $CUDA_HOME, CUDNN_ROOT=${CUDNN_ROOT:-}, ${CUDNN_DIRS[*]:-no python nvidia/cudnn})"
fi

# cuBLASLt and the runtime: the toolkit's, else a wheel's (nvidia/cublas, nvidia/cuda_runtime)
for lib in cublasLt cudart; do
  wheel_dirs=()
  for s in "${SITE[@]}"; do wheel_dirs+=("$s/nvidia/cublas/lib" "$s/nvidia/cuda_runtime/lib"); done
  if find_lib "$lib" "${CUDA_LIBS[@]}" "${wheel_dirs[@]}"; then have "$lib" "$FOUND"; else lack "$lib" "no lib$lib.so* in ${CUDA_LIBS[*]:-the toolkit} or python3's nvidia/*"; fi
done
# NCCL: reported only (the device build has no MPI, so no NCCL)
nccl_dirs=("${CUDA_LIBS[@]}")
for s in "${SITE[@]}"; do nccl_dirs+=("$s/nvidia/nccl/lib"); done
if find_lib nccl "${nccl_dirs[@]}"; then note nccl "$FOUND (not used: the device build has no MPI)"; else note nccl "not found (not needed: the device build has no MPI)"; fi

# CMake, ninja, the compiler with OpenMP, glibc
if v=$(cmake --version 2> /dev/null | head -1); then
  have cmake "$(command -v cmake): $v"
  printf '%s\n3.25\n' "${v##* }" | sort -V -C && lack cmake "$v is older than 3.25"
else
  lack cmake "no cmake on PATH"
fi
if v=$(ninja --version 2> /dev/null); then have ninja "$(command -v ninja): $v"; else lack ninja "no ninja on PATH"; fi
CXX=${CXX:-$(command -v g++ || command -v c++ || true)}
if [ -n "$CXX" ] && echo 'int main() {
#pragma omp parallel
  {}
}' | timeout 10 "$CXX" -std=c++20 -fopenmp -x c++ - -o "$DEPS/omp_probe" 2> "$DEPS/omp_probe.log"; then
  have compiler "$CXX: $("$CXX" --version | head -1), C++20 and OpenMP compile"
else
  lack compiler "${CXX:-no g++}: cannot compile C++20 with -fopenmp ($(head -c 300 "$DEPS/omp_probe.log" 2> /dev/null))"
fi
have glibc "$(ldd --version 2> /dev/null | head -1)"
# ccache: used when on PATH (scripts/device_mimic_test.sh gives its root one, so that repeated
# runs here rebuild only what changed); the device image has none, so there every file compiles.
CCACHE=""
if [ "${DEVICE_CHECK_CCACHE:-1}" != 0 ] && CCACHE=$(command -v ccache); then
  note ccache "$CCACHE: compiles cached in ${CCACHE_DIR:-its default folder}"
else
  CCACHE=""
  note ccache "none: every file compiles (as on the device image)"
fi

# zlib: the image's libz.so.1 (never a carried libz.so: Debian's is an absolute link to its own
# /lib/x86_64-linux-gnu/libz.so.1.2.13) and a zlib.h (the image's or the carried one).
rm -f "$ARCH_LIB"/libz.so "$ARCH_LIB"/libz.a
zlib_so=$(ldconfig -p 2> /dev/null | awk '/libz\.so\.1 .*x86-64/{print $NF; exit}')
for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /usr/lib64 /lib64; do
  [ -z "$zlib_so" ] && [ -e "$d/libz.so.1" ] && zlib_so=$d/libz.so.1
done
zlib_h=""
for d in /usr/include "$DEPS/usr/include"; do [ -z "$zlib_h" ] && [ -f "$d/zlib.h" ] && zlib_h=$d; done
if [ -n "$zlib_so" ] && [ -n "$zlib_h" ]; then
  ln -sfn "$(readlink -f "$zlib_so")" "$SHIM/libz.so"
  have zlib "$zlib_so (linked through $SHIM/libz.so), zlib.h in $zlib_h"
else
  lack zlib "libz.so.1 ${zlib_so:-not found}, zlib.h ${zlib_h:-not found}"
fi

# header-only and carried packages the configure needs
for pkg in "nlohmann_json:nlohmann/json.hpp" "fmt:fmt/format.h" "CLI11:CLI/CLI.hpp" "GTest:gtest/gtest.h"; do
  h=${pkg#*:}
  found=""
  for d in /usr/include /usr/local/include "$DEPS/usr/include"; do [ -z "$found" ] && [ -f "$d/$h" ] && found=$d/$h; done
  if [ -n "$found" ]; then have "${pkg%%:*}" "$found"; else lack "${pkg%%:*}" "no $h (carry it: scripts/device_deps.sh)"; fi
done

# the data of the main job
DATA=""
for d in /usr/share/datasets/fashion-mnist "$DEPS/usr/share/datasets/fashion-mnist"; do
  [ -z "$DATA" ] && [ -f "$d/train-images-idx3-ubyte.gz" ] && [ -f "$d/t10k-labels-idx1-ubyte.gz" ] && DATA=$d
done
if [ -n "$DATA" ]; then have data "Fashion-MNIST in $DATA"; else lack data "no Fashion-MNIST (carry .device-deps from scripts/device_deps.sh)"; fi

# PyTorch for the peer stage (not required: without it that stage is skipped)
TORCH=""
if [ -n "$PY" ] && v=$(timeout 8 "$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2> /dev/null); then
  TORCH=$v
  have torch "$v"
else
  note torch "not importable by python3 (the torch stage will be skipped)"
fi

if ((${#missing[@]})); then
  fail "missing: ${missing[*]}"
fi
passed

# ---------------------------------------------------------------- configure
start configure
# Floors kept for the stages after it: build 60, tests 15, bench 30, train 15, torch 15.
limited 90 135 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DMIXPREC_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMIXPREC_WITH_ONEDNN=OFF -DMIXPREC_WITH_MPI=OFF \
  -DCMAKE_CXX_COMPILER_LAUNCHER="$CCACHE" -DCMAKE_CUDA_COMPILER_LAUNCHER="$CCACHE" -DMIXPREC_BUILD_BENCH=OFF -DMIXPREC_PYTHON=OFF \
  -DCMAKE_LIBRARY_PATH="$SHIM" -DZLIB_LIBRARY="$SHIM/libz.so" -DZLIB_INCLUDE_DIR="$zlib_h" \
  ${CUDNN_ROOT_FOUND:+-DCUDNN_ROOT="$CUDNN_ROOT_FOUND"} > "$LOGS/configure.txt" 2>&1 \
  || { tail -30 "$LOGS/configure.txt"; fail "cmake configure (the lines above; all of it in $LOGS/configure.txt)"; }
grep -E "cuDNN:|CUDA compiler identification" "$LOGS/configure.txt" | sed 's/^/device_check:   /'
passed

# ---------------------------------------------------------------- build
start build
[ -n "$CCACHE" ] && "$CCACHE" -z > /dev/null
child_cpu
cpu0=$CHILD_CPU
limited 360 75 cmake --build "$BUILD" -j "$JOBS" --target mixprec mixprec_cli cuda_test > "$LOGS/build.txt" 2>&1 \
  || { grep -E -m 20 "error|FAILED" "$LOGS/build.txt"; tail -5 "$LOGS/build.txt"; fail "build (the lines above; all of it in $LOGS/build.txt)"; }
# The slowest build steps (ninja's log: start and end in ms), for planning the next run's budget.
awk -F'\t' '!/^#/ {printf "%7.1f s  %s\n", ($2 - $1) / 1000, $4}' "$BUILD/.ninja_log" 2> /dev/null | sort -rn | head -5 \
  | sed 's/^/device_check:   slowest: /'
M="$BUILD/tools/mixprec"
child_cpu
build_cpu=$((CHILD_CPU - cpu0))
echo "device_check:   build: $((SECONDS - stage_t0)) s wall, $build_cpu s CPU (user + system, all jobs) on $JOBS jobs, $(nproc) cores"
[ -n "$CCACHE" ] && "$CCACHE" -s | grep -m 2 -E "^ *(Hits|Misses):" | sed 's/^ */device_check:   ccache /'
passed "$(grep -c '^\[' "$LOGS/build.txt") build steps, $build_cpu s CPU on $JOBS jobs"

# ---------------------------------------------------------------- cuda_tests (the first GPU call)
start cuda_tests
rc=0
limited 90 60 "$BUILD/tests/cuda_test" --gtest_output="json:$OUT/cuda_tests.json" > "$LOGS/cuda_tests.txt" 2>&1 || rc=$?
grep -E "FAILED|no CUDA device" "$LOGS/cuda_tests.txt" | head -20
tail -3 "$LOGS/cuda_tests.txt"
if [ "$DRY" = 1 ]; then
  if [ $rc -eq 77 ]; then
    line=$(grep -m1 -i "no CUDA device" "$LOGS/cuda_tests.txt")
    record "stopped at the first GPU call" "$line"
    for s in bench train torch; do skipped "$s" "dry run"; done
    write_summary "dry run: passed preflight, configure and build; stopped at the first GPU call" ""
    echo "device_check: dry run: stopped cleanly at the first GPU call (cuda_tests: $line) after $((SECONDS - t0)) s"
    exit 0
  fi
  [ $rc -eq 0 ] || fail "dry run: the CUDA tests exited $rc, not 77 (no GPU) or 0 ($LOGS/cuda_tests.txt)"
  passed "a GPU was visible"
  for s in bench train torch; do skipped "$s" "dry run"; done
  write_summary "dry run: passed" ""
  echo "device_check: dry run passed in $((SECONDS - t0)) s"
  exit 0
fi
[ $rc -eq 77 ] && fail "the CUDA tests did not run: no CUDA device visible to the process"
[ $rc -eq 0 ] || fail "CUDA tests failed (exit $rc; see cuda_tests.json)"
passed "$(grep -o '\[  PASSED  \] [0-9]* tests' "$LOGS/cuda_tests.txt")"

# ---------------------------------------------------------------- bench (one process)
start bench
limited 150 30 "$M" bench --device cuda --model all --configs O0:bf16,O2:f16,O2:bf16 --steps 20 --warmup 5 \
  --report "$OUT/bench.json" || fail "mixprec bench --device cuda"
passed

# ---------------------------------------------------------------- train
start train
limited 90 15 "$M" train --device cuda --model simplenet --epochs 2 --data "$DATA" \
  --report "$OUT/train.json" || fail "mixprec train --device cuda"
passed

# ---------------------------------------------------------------- torch (the PyTorch peer)
if [ -z "$TORCH" ]; then
  skipped torch "python3 has no torch"
else
  start torch
  limited 120 0 "$PY" bench/torch_gpu_peer.py --budget $(($(left) - 10)) --json "$OUT/torch.json" \
    || fail "bench/torch_gpu_peer.py"
  passed
fi

write_summary passed ""
echo "device_check: all stages passed in $((SECONDS - t0)) s"
