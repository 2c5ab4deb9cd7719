#!/usr/bin/env bash
# One-step set-up on Debian 12, as root: installs the Debian packages mixprec needs (only those
# missing, so it is idempotent and fast the second time), makes build/python-venv (Debian's
# python3 with its packages, plus the reference `safetensors` from PyPI that the Python tests
# compare checkpoints against; never a dependency of the module), then configures and builds ./build.
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
  fortunes                              # gpt-tiny's text: TextDataset reads /usr/share/games/fortunes
  libopenmpi-dev openmpi-bin            # data parallel: mpirun -np N mixprec train
  clang libclang-rt-dev libomp-dev      # scripts/fuzz.sh: clang, libFuzzer + sanitizer runtimes, OpenMP
  clang-format                          # tests: repo.clang_format checks the house format
  jq                                    # tests: cli recipe_test compares train's and bench's JSON reports
  chromium                              # tests: the HTML run report rendered in a real browser
  python3-dev pybind11-dev              # the mixprec Python module (python/)
  python3-numpy python3-pytest python3-venv  # its tests, and the venv that adds safetensors to them
  ca-certificates                       # pip's TLS to PyPI (that venv)
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

# The Python tests' interpreter (tests/python/CMakeLists.txt): /usr/bin/python3 in a venv that
# sees Debian's numpy and pytest, with safetensors pinned from PyPI (Debian 12 does not package it,
# and its python refuses a system-wide pip install).
venv="$BUILD_DIR/python-venv"
if ! "$venv/bin/python3" -c "import safetensors, numpy, pytest" 2> /dev/null; then
  echo "setup: making $venv with safetensors"
  /usr/bin/python3 -m venv --clear --system-site-packages "$venv"
  # Only the Python tests need it: without PyPI the build and the main job still go on, and the
  # test that compares against safetensors fails (never skips) until this step succeeds.
  if ! "$venv/bin/python3" -m pip install -q --disable-pip-version-check --no-cache-dir \
    "safetensors==0.4.5"; then
    echo "setup: WARNING: could not install safetensors==0.4.5 from PyPI into $venv;" \
      "the build and the main job do not need it, but the Python tests will fail until" \
      "'bash scripts/setup.sh' is re-run with PyPI reachable" >&2
  fi
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
