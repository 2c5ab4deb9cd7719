#!/usr/bin/env bash
# The NCCL tests on two ranks, one GPU each: `mpirun -np 2 nccl_test`, then (given MIXPREC)
# `mpirun -np 2 mixprec train --device cuda` on a tiny dataset with --check-ranks 1 (every step's
# weights, scale and counters identical on both ranks). Usage: nccl_test.sh NCCL_TEST MPIEXEC
# [MIXPREC]. With fewer than 2 GPUs visible it says so and exits 77, which CTest counts as not
# run (never as passed).
set -uo pipefail
test_bin=$1
mpiexec=$2
cli=${3:-}
gpus=$("$test_bin" --cuda-device-count) || { echo "FAIL: $test_bin --cuda-device-count"; exit 1; }
if [ "$gpus" -lt 2 ]; then
  echo "no 2 CUDA devices ($gpus visible): the 2-rank NCCL tests not run"
  exit 77
fi
"$mpiexec" --allow-run-as-root -np 2 env OMP_NUM_THREADS=2 "$test_bin" || { echo "FAIL: nccl_test on 2 ranks"; exit 1; }
[ -n "$cli" ] || exit 0

set -- "$cli"
source "$(dirname "$0")/common.sh"
make_tiny_data "$dir/data" 512
"$mpiexec" --allow-run-as-root -np 2 "$M" train --device cuda --model lenet --amp-level O2 --dtype f16 \
  --loss-scale dynamic:1024,2,5 --data "$dir/data" --batch-size 32 --epochs 1 --check-ranks 1 \
  --report "$dir/r.json" > "$dir/out" 2> "$dir/err" || fail "mpirun -np 2 mixprec train --device cuda: $(cat "$dir/err")"
json() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }
[ "$(json "$dir/r.json" "['ranks']")" = 2 ] || fail "report: ranks"
[ "$(json "$dir/r.json" "['steps']")" = 8 ] || fail "report: 256/32 steps per rank, got $(json "$dir/r.json" "['steps']")"
[ "$(json "$dir/r.json" "['test_accuracy']")" != None ] || fail "no test accuracy"
echo "mpirun -np 2 mixprec train --device cuda: 8 steps, ranks identical at every step"
