#!/usr/bin/env bash
# `mpirun mixprec train`, data parallel, on a tiny generated dataset. Usage: mpi_test.sh MIXPREC
# MPIRUN MODE. Modes:
#   train  2 ranks: one header, one report and one checkpoint (rank 0), global batch, --check-ranks 1;
#          a run stopped and resumed with 2 ranks ends byte-identical to one that never stopped; a
#          resume with 1 process or 4 ranks is refused, naming both counts.
#   four   4 ranks (oversubscribed), bf16 all-reduce, --check-ranks 1.
#   kill   kill -9 of rank 1 ends the job within 60 s with mpirun's message; the last checkpoint
#          loads and resumes.
#   throw  rank 1 reads a damaged copy of the dataset: the job ends within 60 s with rank 1's message.
set -uo pipefail
source "$(dirname "$0")/common.sh"
MPIRUN=("$2" --allow-run-as-root --oversubscribe)
mode="$3"
make_tiny_data "$dir/data" 512
common=(train --model lenet --amp-level O2 --dtype f16
        --loss-scale dynamic:1024,2,5 --print-every 1)

json() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }

case "$mode" in
train)
  "${MPIRUN[@]}" -np 2 "$M" "${common[@]}" --data "$dir/data" --batch-size 32 --epochs 2 --check-ranks 1 --report "$dir/r.json" \
    --checkpoint "$dir/c.safetensors" > "$dir/out" 2> "$dir/err" || fail "2 ranks: $(cat "$dir/err")"
  [ "$(grep -c ': training lenet' "$dir/out")" = 1 ] || fail "the header must come from rank 0 alone: $(cat "$dir/out")"
  ! grep -q $'\r' "$dir/out" || fail "a progress bar (carriage returns) in mpirun's redirected output"
  grep -q "^epoch 1/2 step 8/8 loss" "$dir/out" || fail "no plain progress line: $(cat "$dir/out")"
  grep -q "data parallel: 2 ranks x batch 32 = global batch 64, 256 samples per rank" "$dir/out" \
    || fail "no data-parallel line: $(cat "$dir/out")"
  threads=$(sed -n 's/.* \([0-9]*\) threads\{0,1\} per rank.*/\1/p' "$dir/out")
  cores=$(nproc)
  [ -n "$threads" ] && [ $((threads * 2)) -le $((cores > 2 ? cores : 2)) ] \
    || fail "2 ranks on $cores cores must share them, got '$threads' threads per rank"
  [ "$(json "$dir/r.json" "['ranks']")" = 2 ] || fail "report: ranks"
  [ "$(json "$dir/r.json" "['global_batch_size']")" = 64 ] || fail "report: global_batch_size"
  [ "$(json "$dir/r.json" "['steps']")" = 16 ] || fail "report: 2 epochs of 256/32 steps, got $(json "$dir/r.json" "['steps']")"
  [ "$(json "$dir/r.json" "['data_parallel']['grad_allreduce_dtype']")" = f32 ] || fail "report: dtype"
  acc=$(json "$dir/r.json" "['test_accuracy']")
  [ "$acc" != None ] || fail "no test accuracy"
  # Stopped at step 5 and resumed with 2 ranks: byte-identical to the straight run.
  "${MPIRUN[@]}" -np 2 "$M" "${common[@]}" --data "$dir/data" --batch-size 32 --epochs 2 --max-steps 5 --checkpoint "$dir/half.safetensors" \
    > /dev/null 2> "$dir/err" || fail "stop at 5: $(cat "$dir/err")"
  "${MPIRUN[@]}" -np 2 "$M" "${common[@]}" --data "$dir/data" --batch-size 32 --epochs 2 --resume "$dir/half.safetensors" \
    --checkpoint "$dir/resumed.safetensors" > "$dir/out" 2> "$dir/err" || fail "resume: $(cat "$dir/err")"
  cmp -s "$dir/c.safetensors" "$dir/resumed.safetensors" || fail "the resumed run differs from the straight one"
  # Another number of ranks is refused, naming both.
  expect_error "saved by a run of 2 data-parallel ranks, but this run has 1 process" "${common[@]}" --data "$dir/data" \
    --batch-size 32 --epochs 2 \
    --resume "$dir/half.safetensors" --checkpoint "$dir/other.safetensors"
  timeout 60 "${MPIRUN[@]}" -np 4 "$M" "${common[@]}" --data "$dir/data" --batch-size 32 --epochs 2 --resume "$dir/half.safetensors" \
    --checkpoint "$dir/other.safetensors" > "$dir/out" 2> "$dir/err" && fail "4 ranks resumed a 2-rank run"
  grep -q "saved by a run of 2 data-parallel ranks, but this run has 4 ranks" "$dir/err" \
    || fail "4 ranks: $(cat "$dir/err")"
  ;;
four)
  timeout 120 "${MPIRUN[@]}" -np 4 "$M" "${common[@]}" --data "$dir/data" --epochs 1 --batch-size 16 --grad-allreduce-dtype bf16 \
    --check-ranks 1 --report "$dir/r.json" > "$dir/out" 2> "$dir/err" || fail "4 ranks: $(cat "$dir/err")"
  [ "$(json "$dir/r.json" "['ranks']")" = 4 ] || fail "report: ranks"
  [ "$(json "$dir/r.json" "['global_batch_size']")" = 64 ] || fail "report: global batch"
  [ "$(json "$dir/r.json" "['steps']")" = 8 ] || fail "report: 128 samples per rank / 16 = 8 steps"
  [ "$(json "$dir/r.json" "['data_parallel']['grad_allreduce_dtype']")" = bf16 ] || fail "report: dtype"
  [ "$(json "$dir/r.json" "['data_parallel']['bytes_per_step']")" -gt 0 ] || fail "report: bytes"
  ;;
kill)
  make_tiny_data "$dir/big" 4096
  "${MPIRUN[@]}" -np 2 "$M" "${common[@]}" --data "$dir/big" --batch-size 8 --epochs 100 --no-eval \
    --save-every 4 --checkpoint "$dir/k.safetensors" > "$dir/out" 2> "$dir/err" &
  mpid=$!
  for _ in $(seq 600); do [ -e "$dir/k.safetensors" ] && break; sleep 0.1; done
  [ -e "$dir/k.safetensors" ] || fail "no checkpoint after 60 s: $(cat "$dir/err")"
  sleep 0.5
  victim=""
  for p in $(pgrep -P "$mpid"); do
    tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
  done
  [ -n "$victim" ] || fail "rank 1 not found among mpirun's children"
  kill -9 "$victim"
  start=$(date +%s)
  while kill -0 "$mpid" 2> /dev/null && [ $(($(date +%s) - start)) -lt 60 ]; do sleep 0.2; done
  if kill -0 "$mpid" 2> /dev/null; then kill -9 "$mpid"; fail "the job still runs 60 s after rank 1 died"; fi
  wait "$mpid" && fail "mpirun exited 0 after a rank was killed"
  grep -q "exited on signal 9" "$dir/err" "$dir/out" || fail "no message about the killed rank: $(cat "$dir/err")"
  "$M" inspect "$dir/k.safetensors" > "$dir/inspect" || fail "the last checkpoint does not load"
  step=$(python3 -c "import json,struct,sys; f=open(sys.argv[1],'rb'); n=struct.unpack('<Q',f.read(8))[0]; print(json.loads(f.read(n))['__metadata__']['global_step'])" "$dir/k.safetensors")
  timeout 120 "${MPIRUN[@]}" -np 2 "$M" "${common[@]}" --data "$dir/big" --batch-size 8 --epochs 100 --no-eval \
    --resume "$dir/k.safetensors" --checkpoint "$dir/k.safetensors" --max-steps $((step + 3)) \
    > "$dir/out" 2> "$dir/err" || fail "resume from the kept checkpoint: $(cat "$dir/err")"
  grep -q "resuming from .* (step $step)" "$dir/out" || fail "resume output: $(cat "$dir/out")"
  ;;
throw)
  # Each rank reads "data" in its own working directory: the same job (path and size agree), but
  # rank 1's copy has a damaged header, which only its loader sees.
  mkdir -p "$dir/r0" "$dir/r1"
  cp -r "$dir/data" "$dir/r0/data"
  cp -r "$dir/data" "$dir/r1/data"
  printf '\x00\x00\x08\x07' | dd of="$dir/r1/data/train-images-idx3-ubyte" bs=1 conv=notrunc 2> /dev/null
  start=$(date +%s)
  timeout 60 "${MPIRUN[@]}" -np 1 --wdir "$dir/r0" "$M" "${common[@]}" --data data --batch-size 32 --epochs 1 \
    : -np 1 --wdir "$dir/r1" "$M" "${common[@]}" --data data --batch-size 32 --epochs 1 > "$dir/out" 2> "$dir/err"
  rc=$?
  [ "$rc" != 0 ] || fail "the job succeeded with a damaged dataset on rank 1"
  [ "$rc" != 124 ] || fail "the job hung: $(cat "$dir/err")"
  grep -q "mixprec: error (rank 1 of 2): .*data/train-images-idx3-ubyte: field 'number of dims'" "$dir/err" \
    || fail "no message from rank 1 naming the file: $(cat "$dir/err")"
  echo "ended in $(($(date +%s) - start)) s"
  ;;
*) fail "unknown mode $mode" ;;
esac
echo "ok: $mode"
