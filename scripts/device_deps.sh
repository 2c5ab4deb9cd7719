#!/usr/bin/env bash
# Run HERE (a Debian 12 machine with apt), before scripts/device_check.sh goes to the device
# machine, which reaches no package registry: downloads the Debian packages the CUDA build and
# the main job need beyond that machine's image into .device-deps/ (git-ignored; the device
# tool's `carry` takes it there: about 32 MB, 30 of them the data). device_check.sh unpacks them
# into a private prefix, never into /.
# Only header-only or self-contained packages whose runtime needs the image already has (glibc,
# libstdc++): JSON, CLI11, GoogleTest (static), fmt (libfmt9: glibc and libstdc++ only), zlib's
# headers (zlib1g-dev: device_check.sh uses the image's own libz.so.1, never this package's
# libz.so, an absolute link to Debian's /lib/x86_64-linux-gnu/libz.so.1.2.13 that dangles there)
# and the Fashion-MNIST data. No oneDNN: the device build is -DMIXPREC_WITH_ONEDNN=OFF (the CPU
# side on the project's own cpu/ref kernels), so nothing needs OpenCL either (Debian's
# opencl-headers is docs only; dnnl-config.cmake wants OpenCL).
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(zlib1g-dev nlohmann-json3-dev libfmt-dev libfmt9 libcli11-dev libgtest-dev dataset-fashion-mnist)
rm -rf .device-deps
mkdir -p .device-deps
cd .device-deps
apt-get download "${PACKAGES[@]}"
du -sh .
