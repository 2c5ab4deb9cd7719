#!/usr/bin/env bash
# Fuzzes the file parsers: builds tests/fuzz with clang, libFuzzer and ASan/UBSan in build-fuzz
# (-DMIXPREC_FUZZ=ON), runs each target SECONDS on a scratch copy of its seed corpus (nothing found
# is written into the repository) and fails on any crash, sanitizer report, uncaught exception or
# timeout, leaving reproducers in build-fuzz/findings/<target>/. Without clang or its libFuzzer
# runtime it says so and replays the corpora with the normal build instead (no fuzzing).
# Usage: bash scripts/fuzz.sh [SECONDS=60]     (env FUZZ_BUILD_DIR, BUILD_DIR, JOBS override)
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${1:-60}
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
TARGETS=(safetensors idx)

have_libfuzzer() {
  command -v clang++ >/dev/null 2>&1 || { echo "clang++ is not installed"; return 1; }
  local probe
  probe=$(mktemp -d)
  printf '%s\n' '#include <cstdint>' '#include <cstddef>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$probe/p.cpp"
  if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" >/dev/null 2>&1; then
    rm -rf "$probe"
    echo "clang++ cannot link -fsanitize=fuzzer (install libclang-rt-dev)"
    return 1
  fi
  rm -rf "$probe"
}

if ! why=$(have_libfuzzer); then
  echo "fuzz: $why; falling back to replaying the corpora with the normal build ($BUILD_DIR)"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DMIXPREC_BUILD_BENCH=OFF
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]/%/_fuzz_replay}"
  for t in "${TARGETS[@]}"; do
    "$BUILD_DIR/tests/fuzz/${t}_fuzz_replay" "tests/fuzz/corpus/$t"
  done
  echo "fuzz: replay only (no fuzzing done)"
  exit 0
fi

# -O1 -g without NDEBUG keeps assert()s (nlohmann::json's among them) on while staying fast.
CC=clang CXX=clang++ cmake -S . -B "$FUZZ_BUILD_DIR" -G Ninja -DMIXPREC_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DMIXPREC_WITH_ONEDNN=OFF -DMIXPREC_BUILD_TOOLS=OFF -DMIXPREC_BUILD_BENCH=OFF
cmake --build "$FUZZ_BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]/%/_fuzz}"

failed=()
for t in "${TARGETS[@]}"; do
  work="$FUZZ_BUILD_DIR/fuzz-work/$t"
  findings="$FUZZ_BUILD_DIR/findings/$t"
  rm -rf "$work" "$findings"
  mkdir -p "$work/corpus" "$findings"
  cp "tests/fuzz/corpus/$t/"* "$work/corpus/"
  echo "fuzz: $t for ${SECONDS_PER_TARGET}s (log: $work/log.txt)"
  dict=()
  if [ -f "tests/fuzz/$t.dict" ]; then dict=(-dict="tests/fuzz/$t.dict"); fi
  rc=0
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$FUZZ_BUILD_DIR/tests/fuzz/${t}_fuzz" "$work/corpus" \
    -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$findings/" -print_final_stats=1 "${dict[@]}" >"$work/log.txt" 2>&1 || rc=$?
  grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/log.txt" || true
  if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$findings")" ]; then
    echo "fuzz: $t: FINDING (exit $rc); reproducers in $findings:" >&2
    ls -l "$findings" >&2 || true
    tail -n 60 "$work/log.txt" >&2
    failed+=("$t")
  fi
done

if ((${#failed[@]})); then
  echo "fuzz: findings in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: no findings in ${TARGETS[*]} (${SECONDS_PER_TARGET}s each)"
