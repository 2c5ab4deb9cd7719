#!/usr/bin/env bash
# `mixprec train --resume` continues bit-identically: 30 straight steps and 13 steps + save +
# resume to 30 must write byte-identical checkpoints (weights, optimizer and scaler state,
# position). Uses f16 with a dynamic scale so the scaler state matters. Needs Fashion-MNIST.
set -euo pipefail
M="$1"
data=/usr/share/datasets/fashion-mnist
if [ ! -e "$data/train-labels-idx1-ubyte.gz" ] && [ ! -e "$data/train-labels-idx1-ubyte" ]; then
  echo "Fashion-MNIST not installed: skipping"; exit 0
fi
dir=$(mktemp -d)
# Runs compared bit for bit share this cache, and the first run's measurement stands (as in
# common.sh: a confirming second run could take other kernels).
export MIXPREC_CACHE_DIR="$dir/kernel-cache" MIXPREC_KERNEL_CHOICE=measure-once
trap 'rm -rf "$dir"' EXIT
common=(train --model lenet --train-samples 640 --batch-size 32 --epochs 2 --no-eval --amp-level O2
        --dtype f16 --loss-scale dynamic:1024,2,5 --threads 2)
"$M" "${common[@]}" --max-steps 30 --checkpoint "$dir/straight.safetensors" > /dev/null
"$M" "${common[@]}" --max-steps 13 --checkpoint "$dir/half.safetensors" > /dev/null
"$M" "${common[@]}" --max-steps 30 --resume "$dir/half.safetensors" --checkpoint "$dir/resumed.safetensors" > /dev/null
cmp "$dir/straight.safetensors" "$dir/resumed.safetensors"
# A resume with different settings is refused with a message naming the setting.
if "$M" "${common[@]}" --max-steps 30 --seed 9 --resume "$dir/half.safetensors" 2> "$dir/err" > /dev/null; then
  echo "resume with another seed was accepted"; exit 1
fi
grep -q "seed" "$dir/err"
echo "resume is bit-identical"
