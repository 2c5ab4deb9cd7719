#!/usr/bin/env bash
# Ranks that run different jobs stop at start-up, every one of them, with a message naming the
# first differing setting and both ranks' values (issue 29, hostile cases 2 and 5-9, 26). Each case
# is mpirun's MPMD form, `-np 1 mixprec train A : -np 1 mixprec train B`, where B differs from A in
# one option; every rank writes its own exit status, so the test sees each rank stop non-zero
# (not only mpirun's summary), within 60 s (never a hang). Usage: mpi_mismatch_test.sh MIXPREC
# MPIRUN CLASS, the class of what today's mixprec would do without the check:
#   hang    --batch-size 64 / 32, --train-samples 2000 / 1000 (both ranks waited forever), and
#           three ranks of which two differ (the message lists them);
#   crash   --grad-bucket-mb 25 / 0.01 (rank 1 died of SIGSEGV in the gradient reducer);
#   silent  --amp-level O2 / O0, --lr 0.01 / 0.02, --seed 1 / 2 (exit 0, wrong results), --model
#           and --grad-allreduce-dtype (MPI_ERR_TRUNCATE), MIXPREC_GRAPH_FUSE on one rank; and the
#           same job written two ways (--data dir and dir/) still trains.
set -uo pipefail
source "$(dirname "$0")/common.sh"
MPIRUN=("$2" --allow-run-as-root --oversubscribe)
class="$3"
make_tiny_data "$dir/data" 256
opts=(--no-eval --threads 1 --print-every 1)
base=(train --data "$dir/data" "${opts[@]}")  # a mismatched rank stops before it loads the data

# The script each rank runs: mixprec with the arguments, then its status into $dir/rc.RANK,
# written aside and renamed (mpirun may end a rank mid-write: a file present is then complete).
# shellcheck disable=SC2016  # expanded by the rank's own bash
record='"$0" "$@"; rc=$?; f="$RC_DIR/rc.$OMPI_COMM_WORLD_RANK"; echo $rc > "$f.part" && mv "$f.part" "$f"; exit $rc'

# run_job NEEDLE RANKS PARTS...: mpirun PARTS (ended after 60 s); fails on a hang, a crash, an MPI
# error, a rank that exited 0 or by a signal, or a message other than NEEDLE once, with the hint.
run_job() {
  local needle="$1" ranks="$2" rc r
  shift 2
  rm -f "$dir"/rc.*
  timeout 60 "${MPIRUN[@]}" "$@" > "$dir/out" 2> "$dir/err"
  rc=$?
  [ "$rc" != 124 ] || fail "hung (60 s) on '$needle': $(cat "$dir/err")"
  for r in $(seq 0 $((ranks - 1))); do
    if [ -e "$dir/rc.$r" ]; then
      [ "$(cat "$dir/rc.$r")" -ne 0 ] && [ "$(cat "$dir/rc.$r")" -lt 128 ] \
        || fail "rank $r exited with status $(cat "$dir/rc.$r") ('$needle'): $(cat "$dir/err")"
    elif [ "${OMPI_MCA_orte_abort_on_non_zero_status:-1}" = 0 ]; then
      fail "rank $r left no exit status ('$needle'): $(cat "$dir/err")"
    fi  # else mpirun may have ended it after another rank's non-zero exit
  done
  [ "$(grep -c -- "$needle" "$dir/err")" = 1 ] || fail "expected '$needle' once in stderr, got: $(cat "$dir/err")"
  grep -q "hint: start every rank with the same options" "$dir/err" || fail "no hint: $(cat "$dir/err")"
  ! grep -q "Segmentation\|MPI_ERR\|signal" "$dir/err" || fail "a crash or an MPI error: $(cat "$dir/err")"
  return "$rc"
}

# mismatch NEEDLE RANKS -- ARGS_OF_RANK0 -- ARGS_OF_RANK1 [-- ARGS_OF_RANK2]: the job ends
# non-zero within 20 s, with NEEDLE once in stderr. Leading NAME=VALUE words of a rank's arguments
# go to its environment. With EACH_RANK=1 the job runs again with Open MPI told not to end the
# other ranks when one exits non-zero: then every rank must stop on its own with a non-zero status.
mismatch() {
  local needle="$1" ranks="$2" parts=() envs=() args=() start elapsed elapsed_ms word
  shift 3
  add_part() {
    [ ${#parts[@]} = 0 ] || parts+=(:)
    parts+=(-np 1 env RC_DIR="$dir" "${envs[@]}" bash -c "$record" "$M" "${base[@]}" "${args[@]}")
    envs=() args=()
  }
  for word in "$@"; do
    if [ "$word" = -- ]; then add_part
    elif [ ${#args[@]} = 0 ] && [[ "$word" =~ ^[A-Z_]+= ]]; then envs+=("$word")
    else args+=("$word"); fi
  done
  add_part
  start=$(date +%s%N)
  run_job "$needle" "$ranks" "${parts[@]}" && fail "mpirun exited 0 though the ranks differ ('$needle')"
  # Integer nanoseconds in bash arithmetic: a fresh Debian machine has no bc.
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  elapsed=$(printf '%d.%03d' $((elapsed_ms / 1000)) $((elapsed_ms % 1000)))
  ((elapsed_ms < 20000)) || fail "took ${elapsed} s to stop ('$needle')"
  if [ "${EACH_RANK:-0}" = 1 ]; then
    OMPI_MCA_orte_abort_on_non_zero_status=0 run_job "$needle" "$ranks" "${parts[@]}"
  fi
  printf 'ok (%.1f s): %s\n' "$elapsed" "$needle"
}

case "$class" in
hang)
  EACH_RANK=1 mismatch "rank 1's --batch-size is 32, rank 0's is 64: every rank must run the same job" 2 \
    -- --batch-size 64 -- --batch-size 32
  mismatch "rank 1's --train-samples is 1000, rank 0's is 2000: every rank must run the same job" 2 \
    -- --train-samples 2000 -- --train-samples 1000
  EACH_RANK=1 mismatch "rank 1's --batch-size is 16, rank 0's is 64: every rank must run the same job (also different: --epochs); ranks 1, 2 differ from rank 0" 3 \
    -- -- --batch-size 16 --epochs 3 -- --batch-size 8
  ;;
crash)
  EACH_RANK=1 mismatch "rank 1's --grad-bucket-mb is 0.01, rank 0's is 25: every rank must run the same job" 2 \
    -- --grad-bucket-mb 25 -- --grad-bucket-mb 0.01
  ;;
silent)
  EACH_RANK=1 mismatch "rank 1's --amp-level is O0, rank 0's is O2" 2 -- --amp-level O2 -- --amp-level O0
  mismatch "rank 1's --lr is 0.02, rank 0's is 0.01" 2 -- --lr 0.01 -- --lr 0.02
  mismatch "rank 1's --seed is 2, rank 0's is 1" 2 -- --seed 1 -- --seed 2
  mismatch "rank 1's --model is lenet, rank 0's is simplenet" 2 -- -- --model lenet
  mismatch "rank 1's --grad-allreduce-dtype is bf16, rank 0's is f32" 2 -- -- --grad-allreduce-dtype bf16
  mismatch "rank 1's MIXPREC_GRAPH_FUSE is 0, rank 0's is unset" 2 -- -- MIXPREC_GRAPH_FUSE=0
  # The same job, the data folder written with and without its trailing /: it trains.
  rm -f "$dir"/rc.*
  same=(train "${opts[@]}" --model lenet --max-steps 2 --data)
  timeout 60 "${MPIRUN[@]}" -np 1 "$M" "${same[@]}" "$dir/data" : -np 1 "$M" "${same[@]}" "$dir/data/" \
    > "$dir/out" 2> "$dir/err" || fail "the same job refused: $(cat "$dir/err")"
  grep -q "step 2/" "$dir/out" || fail "no step 2: $(cat "$dir/out")"
  echo "ok: the same job with --data dir and dir/ trains"
  ;;
*) fail "unknown class $class" ;;
esac
echo "ok: $class"
