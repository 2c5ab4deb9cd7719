#!/usr/bin/env bash
# Run HERE (a Debian 12 machine with apt), before scripts/device_check.sh goes to the device
# machine, which reaches no package registry: downloads the Debian packages the CUDA build and
# the main job need beyond that machine's image (oneDNN, fmt, JSON, CLI11, GoogleTest, zlib, the
# Fashion-MNIST data) into .device-deps/ (git-ignored; the device tool's `carry` takes it there,
# about 40 MB). device_check.sh unpacks them into a private prefix, never into /.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(libdnnl-dev libdnnl2 opencl-headers ocl-icd-opencl-dev ocl-icd-libopencl1 zlib1g-dev
          nlohmann-json3-dev libfmt-dev libfmt9 libcli11-dev libgtest-dev googletest
          dataset-fashion-mnist)
mkdir -p .device-deps
cd .device-deps
apt-get download "${PACKAGES[@]}"
du -sh .
