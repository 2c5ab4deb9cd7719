#!/usr/bin/env bash
# The NCCL tests on two ranks, one GPU each: `mpirun -np 2 nccl_test`. Usage: nccl_test.sh
# NCCL_TEST MPIEXEC. With fewer than 2 GPUs visible it says so and exits 77, which CTest counts
# as not run (never as passed).
set -euo pipefail
test_bin=$1
mpiexec=$2
gpus=$("$test_bin" --cuda-device-count)
if [ "$gpus" -lt 2 ]; then
  echo "no 2 CUDA devices ($gpus visible): the 2-rank NCCL tests not run"
  exit 77
fi
exec "$mpiexec" --allow-run-as-root -np 2 env OMP_NUM_THREADS=2 "$test_bin"
