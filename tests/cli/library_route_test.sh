#!/usr/bin/env bash
# `mixprec train --max-grad-norm --accumulation-steps` against the library route (issue 15):
# the same run through train::Model with TrainStepOptions gives bit-identical weights and the same
# skipped batches: with bf16 (clipping and accumulation, nothing skipped), and with f16 dynamic
# scaling from 2^24, where the first updates overflow in a micro-batch and are skipped whole.
set -euo pipefail
M="$1"; ROUTE="$2"
data=/usr/share/datasets/fashion-mnist
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The command line's run and the library route's are compared bit for bit: they share this test's
# own kernel cache, and the first run's measurement stands (as in tests/cli/common.sh). Without
# it, on a machine with no cache the route's run was the confirming second one, which may time
# other kernels (within the AMP contract, other bits): it failed so in a fresh root.
export MIXPREC_CACHE_DIR="$dir/kernel-cache" MIXPREC_KERNEL_CHOICE=measure-once
for cfg in "bf16 0.5 2" "f16 1.0 3"; do
  read -r dtype norm accum <<< "$cfg"
  "$M" train --model lenet --data "$data" --train-samples 640 --batch-size 32 --epochs 1 --seed 1 \
    --lr-schedule constant --amp-level O2 --dtype "$dtype" --max-grad-norm "$norm" --accumulation-steps "$accum" \
    --threads 2 --no-eval --trace "$dir/t.csv" --checkpoint "$dir/c.safetensors" --overwrite > "$dir/out" 2>&1 ||
    { cat "$dir/out"; exit 1; }
  skipped=$(awk -F, 'NR > 1 { s += $5 } END { print s + 0 }' "$dir/t.csv")
  if [ "$dtype" = f16 ] && [ "$skipped" -eq 0 ]; then
    echo "f16 from 2^24 skipped nothing: the overflow path is not exercised"; cat "$dir/t.csv"; exit 1
  fi
  OMP_NUM_THREADS=2 "$ROUTE" "$data" "$dir/c.safetensors" "$skipped" "$dtype" "$norm" "$accum" ||
    { echo "dtype $dtype, --max-grad-norm $norm, --accumulation-steps $accum"; exit 1; }
done
echo "the command line's flags match the library route"
