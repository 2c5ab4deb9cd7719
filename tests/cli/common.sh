# Sourced by the CLI tests (after `set -uo pipefail`, with the mixprec binary as $1): M, a
# temporary directory `dir` removed at exit (at_exit adds an action before that), fail,
# expect_error, and make_tiny_data DIR N [ROWS COLS], which writes an MNIST-format dataset of N
# train and N test samples (raw IDX files, ROWSxCOLS images, default 28x28) into DIR. The pixels
# are text bytes and the labels cycle 0-9: deterministic, varied, and instant to load, so the
# tests need neither Fashion-MNIST nor time to decompress it.
M="$1"
dir=$(mktemp -d)
exit_actions=()
at_exit() { exit_actions+=("$1"); }
trap 'for action in "${exit_actions[@]}"; do eval "$action"; done; rm -rf "$dir"' EXIT
# Measured kernel choices go to this test's own cache: runs compared bit for bit within a test
# share one, and no other test's measurements reach it. measure-once: the first run's measurement
# stands (by default a second run confirms it and may take other kernels, which would make a
# first run and a later one differ within the AMP contract; that has its own tests:
# tests/ops/kernel_choice_test.cpp, Resume.BitIdenticalWithMeasuredKernels...).
export MIXPREC_CACHE_DIR="$dir/kernel-cache"
export MIXPREC_KERNEL_CHOICE=measure-once
fail() { echo "FAIL: $*"; exit 1; }

# expect_error NEEDLE ARGS...: mixprec ARGS fails (non-zero, not by a signal) with NEEDLE (a grep
# basic regular expression) in its stderr; its output stays in $dir/out and $dir/err.
expect_error() {
  local needle="$1" rc
  shift
  "$M" "$@" > "$dir/out" 2> "$dir/err" < /dev/null
  rc=$?
  [ "$rc" -ne 0 ] || fail "accepted: $*"
  [ "$rc" -lt 128 ] || fail "died with status $rc: $* -> $(cat "$dir/err")"
  grep -q -- "$needle" "$dir/err" || fail "no '$needle' in the error for: $* -> $(cat "$dir/err")"
}

# idx_header DIM...: the IDX magic (unsigned bytes, as many dims as given) and the dims.
idx_header() {
  local v
  printf '\x00\x00\x08'"\\x$(printf %02x $#)"
  for v in "$@"; do
    printf "\\x$(printf %02x $((v >> 24 & 255)))\\x$(printf %02x $((v >> 16 & 255)))"
    printf "\\x$(printf %02x $((v >> 8 & 255)))\\x$(printf %02x $((v & 255)))"
  done
}

make_tiny_data() {
  local dir="$1" n="$2" rows="${3:-28}" cols="${4:-28}" split
  mkdir -p "$dir"
  for split in train t10k; do
    { idx_header "$n" "$rows" "$cols"
      yes "The quick brown fox jumps over the lazy dog 1234567890" | tr -d '\n' | head -c $((n * rows * cols))
    } > "$dir/$split-images-idx3-ubyte"
    { idx_header "$n"; yes 0123456789 | tr -d '\n' | head -c "$n" | tr '0-9' '\000-\011'; } \
      > "$dir/$split-labels-idx1-ubyte"
  done
}
