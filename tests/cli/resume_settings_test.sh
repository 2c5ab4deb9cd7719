#!/usr/bin/env bash
# --resume refuses every change to a setting that changes the trajectory, comparing numbers
# exactly (lr 1e-7 vs 4e-7 used to pass as "0.000000"; seeds above 2^63 used to saturate), and names the option with the stored and
# the new value. Settings that only observe or stop (--on-overflow warn vs stop, --threads) are
# accepted; a different thread count prints a note. --dtype auto on a resume takes the checkpoint's
# type (and says so), so the machine's measurement never changes a resumed run's dtype.
set -uo pipefail
source "$(dirname "$0")/common.sh"
make_tiny_data "$dir/data" 64
common=(train --data "$dir/data" --batch-size 16 --epochs 3 --no-eval --threads 2 --lr 1e-7)
# bf16 named: --dtype auto (the default) would record the type measured faster on this machine.
"$M" "${common[@]}" --max-steps 2 --dtype bf16 --checkpoint "$dir/c.safetensors" > /dev/null || fail "first run failed"
# refused "needle" args...: resuming with args (after the common ones but --lr) is refused.
refused() {
  local needle="$1"; shift
  "$M" train --data "$dir/data" --no-eval --threads 2 --resume "$dir/c.safetensors" --max-steps 4 "$@" \
    > "$dir/out" 2> "$dir/err" && fail "resume accepted with: $*"
  grep -qF -- "$needle" "$dir/err" || fail "no '$needle' in the refusal of: $* -> $(cat "$dir/err")"
}
base=(--batch-size 16 --epochs 3)
refused "the run was saved with --lr 1e-07, this run has --lr 4e-07" "${base[@]}" --lr 4e-7
refused "the run was saved with --lr 1e-07, this run has --lr 1.0000000000000001e-07" "${base[@]}" --lr 1.0000000000000001e-7
refused "--momentum 0.9, this run has --momentum 0.5" "${base[@]}" --lr 1e-7 --momentum 0.5
refused "--weight-decay 0, this run has --weight-decay 0.0001" "${base[@]}" --lr 1e-7 --weight-decay 1e-4
refused "--warmup-steps 0, this run has --warmup-steps 3" "${base[@]}" --lr 1e-7 --warmup-steps 3
refused "--optimizer momentum, this run has --optimizer adam" "${base[@]}" --lr 1e-7 --optimizer adam
refused "--lr-schedule cosine, this run has --lr-schedule constant" "${base[@]}" --lr 1e-7 --lr-schedule constant
refused "--amp-level O2, this run has --amp-level O1" "${base[@]}" --lr 1e-7 --amp-level O1
refused "--dtype bf16, this run has --dtype f16" "${base[@]}" --lr 1e-7 --dtype f16
refused "--loss-scale default, this run has --loss-scale dynamic:1024,2,2000" "${base[@]}" --lr 1e-7 \
  --loss-scale dynamic:1024,2,2000
refused "--keep-batchnorm-fp32 default, this run has --keep-batchnorm-fp32 false" "${base[@]}" --lr 1e-7 \
  --keep-batchnorm-fp32 false
refused "the run was saved with --white-list , this run has --white-list Dense" "${base[@]}" --lr 1e-7 --white-list Dense
refused "--on-overflow warn, this run has --on-overflow promote" "${base[@]}" --lr 1e-7 --on-overflow promote
refused "--batch-size 16, this run has --batch-size 8" --epochs 3 --lr 1e-7 --batch-size 8
refused "--epochs 3, this run has --epochs 4" --batch-size 16 --lr 1e-7 --epochs 4
refused "--seed 1, this run has --seed 7" "${base[@]}" --lr 1e-7 --seed 7
# Seeds above 2^63 compare exactly too (they used to saturate to the same signed integer).
"$M" "${common[@]}" --max-steps 2 --seed 9223372036854775809 --checkpoint "$dir/big_seed.safetensors" > /dev/null ||
  fail "run with a seed above 2^63 failed"
"$M" train --data "$dir/data" --no-eval --threads 2 --resume "$dir/big_seed.safetensors" --max-steps 4 "${base[@]}" \
  --lr 1e-7 --seed 18446744073709551615 > "$dir/out" 2> "$dir/err" && fail "resume accepted another seed above 2^63"
grep -qF -- "--seed 9223372036854775809, this run has --seed 18446744073709551615" "$dir/err" ||
  fail "big seeds: $(cat "$dir/err")"
refused "--model simplenet, this run has --model lenet" "${base[@]}" --lr 1e-7 --model lenet
refused "--train-samples -1, this run has --train-samples 32" "${base[@]}" --lr 1e-7 --train-samples 32
# What does not change the trajectory is accepted: --on-overflow stop, another thread count.
"$M" "${common[@]}" --max-steps 3 --on-overflow stop --resume "$dir/c.safetensors" --checkpoint "$dir/c.safetensors" \
  > /dev/null || fail "resume with --on-overflow stop was refused"
"$M" train --data "$dir/data" --batch-size 16 --epochs 3 --no-eval --threads 1 --lr 1e-7 --max-steps 4 \
  --resume "$dir/c.safetensors" > "$dir/out" || fail "resume with another thread count was refused"
grep -q "note: the run was saved with --threads 2, this run has --threads 1" "$dir/out" || fail "no thread note"
# --dtype auto on a resume keeps the checkpoint's type, whatever this machine would measure: a
# resume never changes the dtype (a named other type is refused above).
"$M" "${common[@]}" --max-steps 2 --dtype f16 --checkpoint "$dir/f16.safetensors" > /dev/null || fail "f16 run failed"
"$M" "${common[@]}" --max-steps 4 --dtype auto --resume "$dir/f16.safetensors" > "$dir/out" ||
  fail "resume of an f16 run with --dtype auto was refused"
grep -qF "dtype auto: f16, as the run being resumed" "$dir/out" || fail "auto on resume: $(cat "$dir/out")"
"$M" "${common[@]}" --max-steps 4 --dtype bf16 --resume "$dir/f16.safetensors" > "$dir/out" 2> "$dir/err" &&
  fail "resume of an f16 run accepted --dtype bf16"
grep -qF -- "--dtype f16, this run has --dtype bf16" "$dir/err" || fail "f16 -> bf16: $(cat "$dir/err")"
echo "resume refuses changed settings"
