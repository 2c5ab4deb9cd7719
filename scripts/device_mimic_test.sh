#!/usr/bin/env bash
# The closest honest mimic of the device machine's image that this machine can make, and
# scripts/device_check.sh --dry-run run in it: it must pass the pre-flight, configure and build,
# then stop cleanly at the first GPU call (the CUDA tests' "no CUDA device" line).
#
# The root: a pristine minimal Debian 12 (debootstrap --variant=minbase; the tarball that
# scripts/fresh_machine_test.sh caches in /var/cache/mixprec-fresh, made here if missing), plus
# only what the image is described to have: a C++ compiler (Debian's g++ 12 and libc6-dev; the
# image has its own, likely g++ 13), python3 with a venv holding CMake and ninja from PyPI (as the
# image's), the CUDA toolkit of this machine (/usr/local/cuda-13.0, hard-linked in) WITHOUT its
# cuDNN and NCCL, and cuDNN only in the layout of the nvidia-cudnn-cu13 wheel inside that venv
# (site-packages/nvidia/cudnn/{include,lib}, libcudnn*.so.9 and no libcudnn.so). No Debian dev
# package of the project's dependencies (no zlib1g-dev, fmt, JSON, CLI11, GoogleTest, oneDNN,
# OpenCL) and no dataset: those come only from .device-deps (scripts/device_deps.sh, run here
# first if missing), as on the device machine. No GPU and no driver.
#
# What it does not prove: that Ubuntu 24.04's userland (glibc 2.39, its g++ and libstdc++) builds
# it (Debian 12's glibc 2.36 and g++ 12 here; Ubuntu images cannot be fetched from this machine),
# that the image's toolkit is laid out like this one (nvcc 13.0 from NVIDIA's wheels, as KINDS.md
# describes), or anything that needs the GPU.
#
# One addition the image lacks, for time only: Debian's ccache in the root, its cache kept here in
# MIMIC_CCACHE_DIR between runs, so that a run after a small change rebuilds only what changed
# (a hit needs the same compiler, flags and every included file's contents: it hides no missing
# header). MIMIC_CCACHE=0 leaves it out: every file compiles, as on the device machine.
#
# Usage (root): bash scripts/device_mimic_test.sh [BUDGET_S (default 3600: 2 cores build slowly)]
#   env: MIMIC_PARENT (default /var/tmp), FRESH_CACHE (default /var/cache/mixprec-fresh),
#        CUDA_SRC (default /usr/local/cuda-13.0), KEEP_ROOT=1, JOBS (default nproc),
#        MIMIC_CCACHE (default 1), MIMIC_CCACHE_DIR (default /var/cache/mixprec-mimic-ccache)
# The repository goes in as a clean clone of HEAD (commit first) plus .device-deps.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
BUDGET=${1:-3600}
log() { echo "device_mimic_test: $*"; }
die() { echo "device_mimic_test: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root (chroot)"
CACHE=${FRESH_CACHE:-/var/cache/mixprec-fresh}
CUDA_SRC=${CUDA_SRC:-/usr/local/cuda-13.0}
[ -x "$CUDA_SRC/bin/nvcc" ] || die "no CUDA toolkit at $CUDA_SRC"
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
  log "note: uncommitted changes are NOT tested; the root gets a clean clone of HEAD ($(git rev-parse --short HEAD))"
t0=$SECONDS

if [ ! -s "$CACHE/root.tar.zst" ]; then
  log "no cached minimal Debian 12 root in $CACHE: bootstrapping one"
  command -v debootstrap > /dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap zstd > /dev/null; }
  tmp_boot=$(mktemp -d /var/tmp/mixprec-boot.XXXXXX)
  debootstrap --variant=minbase bookworm "$tmp_boot" http://deb.debian.org/debian > /dev/null
  mkdir -p "$CACHE"
  chroot "$tmp_boot" dpkg-query -W -f='${Package} ${Status}\n' | sort > "$CACHE/packages"
  tar -C "$tmp_boot" --numeric-owner -cf - . | zstd -q -T0 -3 -o "$CACHE/root.tar.zst"
  rm -rf --one-file-system "$tmp_boot"
fi
[ -d .device-deps ] && compgen -G ".device-deps/*.deb" > /dev/null || bash scripts/device_deps.sh

parent=${MIMIC_PARENT:-/var/tmp}
root=$(mktemp -d "$parent/mixprec-mimic.XXXXXX")
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2> /dev/null || true; done
  # A bind mount from the same file system (the ccache folder) is not stopped by
  # --one-file-system: keep the root rather than delete through a mount still there.
  for m in "${mounted[@]}"; do
    mountpoint -q "$m" 2> /dev/null && { log "$m is still mounted: kept the root at $root"; return; }
  done
  if [ "${KEEP_ROOT:-0}" = 1 ]; then log "kept the root at $root"; else rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT
log "unpacking the pristine minimal Debian 12 root into $root"
zstd -q -dc "$CACHE/root.tar.zst" | tar -C "$root" --numeric-owner -xf -
chmod 755 "$root"
for p in g++ cmake ninja-build zlib1g-dev libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev libdnnl-dev \
  opencl-headers ocl-icd-opencl-dev dataset-fashion-mnist; do
  if chroot "$root" dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed"; then
    die "the pristine root already has '$p'"
  fi
done

# The machine's network (as scripts/fresh_machine_test.sh gives it): DNS, the local CAs, pip.conf.
cat > "$root/etc/apt/sources.list" << EOF
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
cp /etc/resolv.conf "$root/etc/resolv.conf"
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$root/etc/pip.conf"
net_env=()
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY PIP_INDEX_URL PIP_EXTRA_INDEX_URL \
  PIP_TRUSTED_HOST PIP_DEFAULT_TIMEOUT; do
  [ -n "${!v:-}" ] && net_env+=("$v=${!v}")
done
for m in proc sys dev dev/pts dev/shm; do
  mkdir -p "$root/$m"
  case $m in
    proc) mount -t proc proc "$root/proc" ;;
    sys) mount -t sysfs sysfs "$root/sys" ;;
    dev) mount --bind /dev "$root/dev" ;;
    dev/pts) mount --bind /dev/pts "$root/dev/pts" ;;
    dev/shm) mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm" ;;
  esac
  mounted+=("$root/$m")
done
in_root() { env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  "${net_env[@]}" chroot "$root" /bin/bash -c "$1"; }

# What the image has: a compiler, python3 with a venv (CMake and ninja from PyPI), CAs for pip.
log "the image's tools: g++ and python3 (apt), CMake and ninja (pip, in the venv)"
CCACHE=${MIMIC_CCACHE:-1}
in_root "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  g++ python3 python3-venv ca-certificates $([ "$CCACHE" = 1 ] && echo ccache) > /dev/null" || die "apt-get in the root"
in_root "python3 -m venv /opt/venv && /opt/venv/bin/pip install -q 'cmake>=3.25' ninja" || die "pip in the root"
for p in zlib1g-dev libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev; do
  if chroot "$root" dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed"; then
    die "installing the image's tools brought in '$p'"
  fi
done

# The toolkit without cuDNN and NCCL (hard links: no copy, nothing written through them), and
# cuDNN as the wheel lays it out in the venv.
log "the CUDA toolkit (without cuDNN and NCCL) and cuDNN in the wheel's layout"
cp -al "$CUDA_SRC" "$root/usr/local/cuda-13.0"
ln -s cuda-13.0 "$root/usr/local/cuda"
rm -rf "$root"/usr/local/cuda-13.0/lib/libcudnn* "$root"/usr/local/cuda-13.0/lib/libnccl* \
  "$root"/usr/local/cuda-13.0/include/cudnn* "$root"/usr/local/cuda-13.0/include/nccl*
site=$(in_root "/opt/venv/bin/python3 -c 'import site; print(site.getsitepackages()[0])'")
wheel=$root$site/nvidia/cudnn
mkdir -p "$wheel/include" "$wheel/lib"
ln "$CUDA_SRC"/include/cudnn*.h "$wheel/include/"
for f in "$CUDA_SRC"/lib/libcudnn*.so.9; do ln "$(readlink -f "$f")" "$wheel/lib/$(basename "$f")"; done
touch "$wheel/__init__.py"
[ -z "$(find "$root/usr/local/cuda-13.0" -name '*cudnn*' -not -path '*dist-info*')" ] || die "cuDNN left in the toolkit"
log "cuDNN only at $site/nvidia/cudnn: $(ls "$wheel/lib" | tr '\n' ' ')"

log "cloning HEAD ($(git rev-parse --short HEAD)) and .device-deps into the root"
git clone -q --no-local "$repo" "$root/root/mixprec"
cp -a .device-deps "$root/root/mixprec/"
ccache_env=(DEVICE_CHECK_CCACHE=0)
if [ "$CCACHE" = 1 ]; then
  cache_dir=${MIMIC_CCACHE_DIR:-/var/cache/mixprec-mimic-ccache}
  mkdir -p "$cache_dir" "$root/ccache"
  mount --bind "$cache_dir" "$root/ccache"
  mounted+=("$root/ccache")
  ccache_env=(CCACHE_DIR=/ccache)
  log "ccache in the root, its cache in $cache_dir ($(du -sh "$cache_dir" | cut -f1)); MIMIC_CCACHE=0 builds without it"
else
  log "no ccache: every file compiles, as on the device machine"
fi
log "prepared in $((SECONDS - t0)) s; running device_check.sh --dry-run --budget $BUDGET"
t1=$SECONDS
rc=0
env -i PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  OUT=/root/out "${ccache_env[@]}" chroot "$root" /bin/bash -c \
  "cd /root/mixprec && bash scripts/device_check.sh --dry-run --budget $BUDGET --jobs ${JOBS:-$(nproc)}" || rc=$?
log "device_check.sh exited $rc after $((SECONDS - t1)) s"
mkdir -p "$repo/device-out/mimic"
cp "$root/root/out/summary.json" "$root/root/out/log.txt" "$repo/device-out/mimic/" 2> /dev/null || true
cat "$root/root/out/summary.json" 2> /dev/null || die "no summary.json"
[ "$rc" -eq 0 ] || die "device_check.sh --dry-run failed in the mimic (exit $rc; device-out/mimic/log.txt)"
grep -q '"result": "dry run: passed preflight, configure and build; stopped at the first GPU call"' \
  "$root/root/out/summary.json" || die "the dry run did not stop at the first GPU call"
log "passed: pre-flight, configure and build in the mimic, then a clean stop at the first GPU call ($((SECONDS - t0)) s in all)"
