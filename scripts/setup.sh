#!/usr/bin/env bash
# One-step set-up on Debian 12, as root: installs the Debian packages mixprec needs (only those
# missing, so it is idempotent and fast the second time), then configures and builds ./build.
# Usage: bash scripts/setup.sh            (env BUILD_DIR, BUILD_TYPE, JOBS override defaults;
#        SETUP_ONLY_PACKAGES=1 installs the packages and stops; extra arguments go to cmake)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  g++ cmake ninja-build pkg-config      # toolchain
  libdnnl-dev                           # oneDNN 2.6: fast f32/bf16 CPU kernels
  opencl-headers ocl-icd-opencl-dev     # Debian's dnnl-config.cmake requires OpenCL to configure
  zlib1g-dev                            # reading .gz IDX datasets
  nlohmann-json3-dev libfmt-dev         # reports, checkpoint headers, formatting
  libcli11-dev                          # the command line
  libgtest-dev googletest libbenchmark-dev  # tests and benchmarks
  dataset-fashion-mnist                 # the default training data
  libopenmpi-dev openmpi-bin            # data parallel: mpirun -np N mixprec train
  clang libclang-rt-dev libomp-dev      # scripts/fuzz.sh: clang, libFuzzer + sanitizer runtimes, OpenMP
  chromium                              # tests: the HTML run report rendered in a real browser
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "${SETUP_ONLY_PACKAGES:-0}" = 1 ]; then exit 0; fi

BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}
JOBS=${JOBS:-2}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
