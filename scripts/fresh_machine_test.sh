#!/usr/bin/env bash
# Proves that the README's two commands work on a machine that was never touched by hand: a
# minimal Debian 12 root made by debootstrap (--variant=minbase), a clean clone of this
# repository's HEAD inside it, and both README commands run there exactly as written, as root, in
# a chroot with a clean environment. Fails if either command fails (or cannot be found).
#
# The bootstrapped root can be cached (it is the slow, network-bound part), without the cache ever
# hiding a missing package: the cache is a pristine tarball written once, straight after
# debootstrap, with the root's package list beside it. Every run unpacks a fresh copy and checks,
# before anything runs, that its installed packages are exactly that list, and that none of the
# project's dependencies is among them; any difference, or a cache older than CACHE_DAYS,
# rebuilds it from debootstrap.
#
# Usage (root): bash scripts/fresh_machine_test.sh
#   env: FRESH_ROOT_PARENT (default /var/tmp)  where the throw-away root is made
#        FRESH_CACHE (default /var/cache/mixprec-fresh, "" for none)  pristine cache
#        CACHE_DAYS (default 7), MIRROR (default http://deb.debian.org/debian), KEEP_ROOT=1
#        FRESH_ONLY=main|test  run only one of the two commands (default: both, in order)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

log() { echo "fresh_machine_test: $*"; }
die() { echo "fresh_machine_test: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap and chroot)"
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
  log "note: uncommitted changes are NOT tested; the chroot gets a clean clone of HEAD ($(git rev-parse --short HEAD))"

# The two commands, taken from README.md exactly as a reader copies them.
main_cmd=$(grep -m1 -E '^bash scripts/setup.sh && \./build/tools/mixprec train' README.md || true)
test_cmd=$(grep -m1 -E '^bash scripts/setup.sh && ctest ' README.md || true)
[ -n "$main_cmd" ] || die "README.md has no line 'bash scripts/setup.sh && ./build/tools/mixprec train ...'"
[ -n "$test_cmd" ] || die "README.md has no line 'bash scripts/setup.sh && ctest ...'"

# Host tools this script needs (not the project's dependencies: those must come from setup.sh).
need=()
command -v debootstrap > /dev/null || need+=(debootstrap)
command -v zstd > /dev/null || need+=(zstd)
if ((${#need[@]})); then
  log "installing host tools: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" > /dev/null
fi

MIRROR=${MIRROR:-http://deb.debian.org/debian}
CACHE=${FRESH_CACHE-/var/cache/mixprec-fresh}
CACHE_DAYS=${CACHE_DAYS:-7}
parent=${FRESH_ROOT_PARENT:-/var/tmp}
mkdir -p "$parent"
root=$(mktemp -d "$parent/mixprec-fresh.XXXXXX")

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2> /dev/null || true; done
  if [ "${KEEP_ROOT:-0}" = 1 ]; then log "kept the root at $root"; else rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT

# What a minbase bookworm root holds: the package list debootstrap itself decides (its Priority:
# required set plus apt), recorded at bootstrap time. A cached tarball must match it exactly.
pkg_list() { chroot "$1" dpkg-query -W -f='${Package} ${Status}\n' | sort; }

bootstrap() {
  log "debootstrap --variant=minbase bookworm ($MIRROR)"
  local t0=$SECONDS tries
  for tries in 1 2 3; do
    rm -rf --one-file-system "${root:?}"/* 2> /dev/null || true
    if debootstrap --variant=minbase bookworm "$root" "$MIRROR" > "$root.debootstrap.log" 2>&1; then break; fi
    [ "$tries" -lt 3 ] || { tail -20 "$root.debootstrap.log" >&2; die "debootstrap failed 3 times"; }
    log "debootstrap failed (try $tries), retrying"; sleep 10
  done
  rm -f "$root.debootstrap.log"
  log "bootstrapped in $((SECONDS - t0)) s"
  if [ -n "$CACHE" ]; then
    mkdir -p "$CACHE"
    pkg_list "$root" > "$CACHE/packages.new"
    tar -C "$root" --numeric-owner -cf - . | zstd -q -T0 -3 -o "$CACHE/root.tar.zst.new"
    mv "$CACHE/root.tar.zst.new" "$CACHE/root.tar.zst"
    mv "$CACHE/packages.new" "$CACHE/packages"
    log "cached the pristine root in $CACHE"
  fi
}

cache_usable() {
  [ -n "$CACHE" ] && [ -s "$CACHE/root.tar.zst" ] && [ -s "$CACHE/packages" ] || return 1
  local age=$(( ($(date +%s) - $(stat -c %Y "$CACHE/root.tar.zst")) / 86400 ))
  [ "$age" -lt "$CACHE_DAYS" ] || { log "cache is $age days old: rebuilding"; return 1; }
}

if cache_usable; then
  log "unpacking a fresh copy of the pristine root from $CACHE"
  zstd -q -dc "$CACHE/root.tar.zst" | tar -C "$root" --numeric-owner -xf -
  if ! diff -q <(pkg_list "$root") "$CACHE/packages" > /dev/null; then
    log "the cached root's packages differ from those recorded at bootstrap: rebuilding"
    bootstrap
  fi
else
  bootstrap
fi

chmod 755 "$root"  # it is /, 0755 on a real machine (mktemp makes 0700, and tar restores that)

# Proof that nothing beyond minbase is present before the README's commands run: no compiler,
# no cmake, no oneDNN, no dataset (each one was once hidden by a hand-installed package).
for p in g++ cmake make ninja-build libdnnl-dev opencl-headers ocl-icd-opencl-dev chromium dataset-fashion-mnist; do
  if chroot "$root" dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed"; then
    die "the fresh root already has '$p' installed: it is not a minimal root"
  fi
done

# The same apt sources as a fresh Debian 12 install (main, updates, security).
cat > "$root/etc/apt/sources.list" << EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
cp /etc/resolv.conf "$root/etc/resolv.conf"

# The machine's network, not its packages: a fresh machine of this workplace reaches Debian and
# PyPI through the same egress as this one, which may re-sign TLS with a local certificate
# authority. Give the root the host's local CAs (the ca-certificates package, when setup.sh
# installs it, adds them to /etc/ssl/certs like on the host), its pip.conf and, below, its
# proxy and CA-bundle environment variables. No package and no file of the project's is copied.
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$root/etc/pip.conf"
net_env=()
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY SSL_CERT_FILE SSL_CERT_DIR \
  REQUESTS_CA_BUNDLE CURL_CA_BUNDLE PIP_CERT PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST \
  PIP_DEFAULT_TIMEOUT; do
  [ -n "${!v:-}" ] && net_env+=("$v=${!v}")
done
for m in proc sys dev dev/pts dev/shm; do
  mkdir -p "$root/$m"
  case $m in
    proc) mount -t proc proc "$root/proc" ;;
    sys) mount -t sysfs sysfs "$root/sys" ;;
    dev) mount --bind /dev "$root/dev" ;;
    dev/pts) mount --bind /dev/pts "$root/dev/pts" ;;
    dev/shm) mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm" ;;  # as on a booted machine (MPI's shared memory)
  esac
  mounted+=("$root/$m")
done

log "cloning HEAD ($(git rev-parse --short HEAD)) into the root"
git clone -q --no-local "$repo" "$root/root/mixprec"

run_in_root() {  # name, command line
  local name=$1 cmd=$2 t0=$SECONDS rc=0
  log "[$name] $cmd"
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    TERM=dumb "${net_env[@]}" chroot "$root" /bin/bash -c "cd /root/mixprec && $cmd" || rc=$?
  log "[$name] exit status $rc after $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || die "the README's $name command failed in a fresh Debian 12 root (exit $rc)"
}

case ${FRESH_ONLY:-both} in
  main) run_in_root main "$main_cmd" ;;
  test) run_in_root test "$test_cmd" ;;
  both) run_in_root main "$main_cmd"; run_in_root test "$test_cmd" ;;
  *) die "FRESH_ONLY must be main, test or both" ;;
esac
log "both README commands passed in a fresh Debian 12 root"
