#!/usr/bin/env bash
# `mixprec bench --model X` times the step `mixprec train --model X` runs (issue 30, part 4): for
# every zoo model the "recipe" of train's --report (the built optimizer's name and settings, the
# step's clipping and accumulation, the AMP level, the loss-scale manager, one sample's shape and
# dtype and a label's) equals the recipe of bench's --report, at the defaults and at a level
# given to both. It fails if bench builds its own optimizer, step or batch again. And the
# warm-up waits for a dynamic loss scale to stop skipping steps before the timing starts.
set -uo pipefail
source "$(dirname "$0")/common.sh"
make_tiny_data "$dir/images" 16
for i in $(seq 40); do echo "The quick brown fox jumps over the lazy dog. Mixed precision keeps float32."; done \
  > "$dir/text.txt"

# bench: every model, one timed step of a small batch (the recipe does not depend on the batch size).
"$M" bench --model all --batch-size 2 --steps 1 --warmup 0 --threads 2 --report "$dir/bench.json" > "$dir/bench.out" ||
  fail "bench --model all: $(cat "$dir/bench.out")"
models=$(jq -r '.[].model' "$dir/bench.json")
[ "$(echo "$models" | wc -l)" -ge 7 ] || fail "bench --model all timed only: $models"

# train_recipe MODEL FILE ARGS...: the recipe of a one-step `mixprec train --model MODEL` run.
train_recipe() {
  local model="$1" out="$2" data="$dir/images"
  shift 2
  [ "$model" = gpt-tiny ] && data="$dir/text.txt"
  "$M" train --model "$model" --data "$data" --batch-size 2 --train-samples 4 --epochs 1 --max-steps 1 --no-eval \
    --threads 2 --dtype bf16 --report "$dir/train.json" "$@" > "$dir/train.out" 2>&1 ||
    fail "train --model $model $*: $(cat "$dir/train.out")"
  jq -S .recipe "$dir/train.json" > "$out"
}

for model in $models; do
  train_recipe "$model" "$dir/t.json"
  jq -S --arg m "$model" '.[] | select(.model == $m) | .recipe' "$dir/bench.json" > "$dir/b.json"
  [ "$(jq -r .optimizer "$dir/t.json")" != null ] || fail "$model: no recipe in train's report: $(cat "$dir/t.json")"
  diff "$dir/t.json" "$dir/b.json" > "$dir/diff" || fail "$model: bench's step differs from train's: $(cat "$dir/diff")"
  grep -q "the step of \`mixprec train --model $model\`: $(jq -r .optimizer "$dir/t.json") lr " "$dir/bench.out" ||
    fail "$model: bench does not print the step it times: $(cat "$dir/bench.out")"
done

# What gpt-tiny trains with (zoo registry): AdamW with a warm-up and clipping, on byte tokens.
jq -e '.optimizer == "AdamW" and .max_grad_norm == 1 and .weight_decay == 0.1 and .warmup_share == 0.05
       and .input.shape == [128] and .input.dtype == "u8" and .label.dtype == "i32"' "$dir/t.json" > /dev/null ||
  fail "gpt-tiny's recipe: $(cat "$dir/t.json")"
jq -e --arg m lenet '.[] | select(.model == $m) | .recipe | .optimizer == "Momentum" and .momentum == 0.9
       and .max_grad_norm == 0 and .input.shape == [1, 28, 28] and .input.dtype == "f32"' "$dir/bench.json" \
  > /dev/null || fail "lenet's recipe: $(jq '.[1].recipe' "$dir/bench.json")"

# A level and a loss scale given to both: still the same step.
"$M" bench --model gpt-tiny --amp-level O1 --loss-scale dynamic --batch-size 2 --steps 1 --warmup 0 --threads 2 \
  --report "$dir/bench1.json" > "$dir/bench.out" || fail "bench --amp-level O1: $(cat "$dir/bench.out")"
train_recipe gpt-tiny "$dir/t1.json" --amp-level O1 --loss-scale dynamic
jq -S .recipe "$dir/bench1.json" > "$dir/b1.json"
diff "$dir/t1.json" "$dir/b1.json" > "$dir/diff" || fail "gpt-tiny O1: bench's step differs: $(cat "$dir/diff")"
jq -e '.amp_level == "O1" and (.loss_scale | startswith("dynamic"))' "$dir/t1.json" > /dev/null ||
  fail "gpt-tiny O1's recipe: $(cat "$dir/t1.json")"
# The timed steps are the steps training runs, not the overflow steps of a dynamic loss scale that
# starts too high: the warm-up goes on until the scale stops skipping (2^40 in f16 overflows for
# about 23 steps), and says so; a scale that never settles within 64 more steps is reported.
"$M" bench --model mlp --amp-level O2 --dtype f16 --loss-scale dynamic:1099511627776,2,2000 --batch-size 2 \
  --steps 2 --warmup 0 --threads 2 --report "$dir/settle.json" > "$dir/bench.out" ||
  fail "bench with a high loss scale: $(cat "$dir/bench.out")"
jq -e '.skipped_steps >= 10 and .skipped_steps_timed == 0 and .warmup_steps == .skipped_steps + 1' \
  "$dir/settle.json" > /dev/null || fail "the warm-up did not wait for the loss scale: $(cat "$dir/settle.json")"
grep -q "of them skipped on overflow while the dynamic loss scale came down (to 2^" "$dir/bench.out" ||
  fail "bench does not say the warm-up waited: $(cat "$dir/bench.out")"
"$M" bench --model mlp --amp-level O2 --dtype f16 --loss-scale dynamic:1e30,2,2000 --batch-size 2 \
  --steps 2 --warmup 0 --threads 2 --report "$dir/settle.json" > "$dir/bench.out" ||
  fail "bench with a loss scale that never settles: $(cat "$dir/bench.out")"
jq -e '.warmup_steps == 66 and .skipped_steps >= 66 and .skipped_steps_timed == 2' "$dir/settle.json" > /dev/null ||
  fail "a scale that never settles: $(cat "$dir/settle.json")"
grep -q "still skipping when the warm-up gave up" "$dir/bench.out" && grep -q "2 of the 2 timed steps were skipped" "$dir/bench.out" ||
  fail "bench does not say its timed steps were skipped: $(cat "$dir/bench.out")"
# --profile gives each kernel its own floor (FLOPs at the measured GEMM rate or bytes at the
# measured bandwidth, the longer) and the share of it the kernel reached.
"$M" bench --model lenet --batch-size 8 --steps 2 --warmup 1 --threads 2 --profile > "$dir/bench.out" ||
  fail "bench --profile: $(cat "$dir/bench.out")"
grep -q "a kernel's floor: the longer of its FLOPs at [0-9]* GFLOP/s and its tensors' bytes at [0-9.]* GB/s" \
  "$dir/bench.out" || fail "bench --profile does not say what a kernel's floor is: $(cat "$dir/bench.out")"
grep -Eq "^ +[0-9.]+ +[0-9.]+% +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9]+ GFLOP/s  conv2d forward " "$dir/bench.out" ||
  fail "bench --profile has no floor for the convolution: $(cat "$dir/bench.out")"
echo "bench and train build the same step for: $(echo $models)"
