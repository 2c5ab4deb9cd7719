#!/usr/bin/env bash
# Dataset mistakes get messages that name the cause: 27x29 images name the file read (raw or .gz)
# and the 28x28 the models take (not a Dense shape error deep in the first step); a training set smaller than
# one batch says exactly that (not something about the learning-rate schedule).
set -uo pipefail
source "$(dirname "$0")/common.sh"
make_tiny_data "$dir/odd" 16 27 29
expect_error "--data: $dir/odd/train-images-idx3-ubyte holds 27x29 images (\[1, 27, 29\] per sample); the zoo's models (--model lenet) take 28x28 images" \
  train --data "$dir/odd" --model lenet --batch-size 8 --max-steps 1
# The file named is the one the dataset read: here the .gz.
gzip "$dir/odd/train-images-idx3-ubyte"
expect_error "--data: $dir/odd/train-images-idx3-ubyte.gz holds 27x29 images" \
  train --data "$dir/odd" --model lenet --batch-size 8 --max-steps 1
make_tiny_data "$dir/small" 10
expect_error "the training set has 10 samples, fewer than one batch of 32 (the last partial batch is dropped)" \
  train --data "$dir/small" --batch-size 32 --max-steps 1
make_tiny_data "$dir/big" 64
expect_error "the training set has 20 samples (--train-samples 20), fewer than one batch of 32" \
  train --data "$dir/big" --train-samples 20 --batch-size 32 --max-steps 1
grep -q "hint: use a smaller --batch-size" "$dir/err" || fail "no hint: $(cat "$dir/err")"
echo "dataset shape and size errors name the cause"
