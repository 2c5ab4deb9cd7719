#!/usr/bin/env bash
# Every option of every command refuses an empty value ("" is never "not given"), and `train`
# refuses nonsensical numbers (--print-every 0 used to die with SIGFPE, --max-steps 0 and
# --train-samples -5 were accepted, --save-every without --checkpoint was ignored), each with a
# message naming the flag, and exit status 2 like any bad command line (value errors found after
# parsing used to exit 1). None of this needs a dataset: the values are checked first.
set -uo pipefail
source "$(dirname "$0")/common.sh"

# Empty values: every option that takes one, as --help lists them, for every command.
checked=0
for cmd in train eval inspect bench report; do
  opts=$("$M" "$cmd" --help | grep -oE '^ +(-[a-z],)?--[a-z0-9-]+ (TEXT|INT|UINT|FLOAT)' | grep -oE -- '--[a-z0-9-]+')
  [ -n "$opts" ] || [ "$cmd" = inspect ] || fail "no options found in '$cmd --help'"
  for o in $opts; do
    # (options with a list of choices say so first: "--model:  not in {simplenet,...}")
    expect_error "$o: \(expected a value, got an empty string\| not in {\)" "$cmd" "$o" ""
    checked=$((checked + 1))
  done
done
[ "$checked" -ge 35 ] || fail "only $checked options checked; --help parsing broke?"
expect_error "expected a value, got an empty string" inspect ""
expect_error "expected a value, got an empty string" report "" -o x.html
# An empty value is a usage error: exit status 2.
"$M" train --lr "" > /dev/null 2>&1; [ $? -eq 2 ] || fail "--lr '' does not exit with status 2"

# Nonsensical numbers.
expect_error "--print-every: expected at least 1, got 0" train --print-every 0
expect_error "--max-steps: expected at least 1 (or -1: no limit), got 0" train --max-steps 0
expect_error "--max-steps: expected at least 1" train --max-steps -2
expect_error "--train-samples: expected at least 1 (or -1: all), got 0" train --train-samples 0
expect_error "--train-samples: expected at least 1 (or -1: all), got -5" train --train-samples -5
expect_error "--warmup-steps: expected at least 0, got -1" train --warmup-steps -1
expect_error "--epochs: expected an integer from 1 to 1000000, got -1" train --epochs -1
expect_error "--epochs: expected an integer from 1 to 1000000, got 0" train --epochs 0
expect_error "--batch-size: expected at least 1, got 0" train --batch-size 0
expect_error "--lr: expected a finite number > 0, got 0" train --lr 0
expect_error "--lr: expected a finite number > 0, got nan" train --lr nan
expect_error "--lr: expected a finite number > 0, got inf" train --lr inf
expect_error "--momentum: expected a number in \[0, 1), got 1.5" train --momentum 1.5
expect_error "--weight-decay: expected a finite number >= 0, got -1" train --weight-decay -1
expect_error "--save-every: expected at least 0" train --save-every -1 --checkpoint x.safetensors
expect_error "--save-every 5: needs --checkpoint FILE" train --save-every 5
expect_error "--grad-stats: expected at least 0" train --grad-stats -1
expect_error "--max-skip-rate: expected a number in \[0, 1\], got 1.5" train --max-skip-rate 1.5
expect_error "--threads: expected an integer from 0 to 65536" train --threads -1
expect_error "--seed: expected an integer from 0 to 18446744073709551615 (2^64-1), got -5" train --seed -5
expect_error "--resume /nonexistent.safetensors: no such file" train --resume /nonexistent.safetensors
# Unparsable numbers.
expect_error "--max-steps" train --max-steps 1.5
expect_error "--lr" train --lr abc
expect_error "--batch-size: expected at least 1, got 0" eval --checkpoint x.safetensors --batch-size 0
expect_error "--batch-size: expected at least 0" bench --batch-size -1
expect_error "--amp-level: unknown amp_level 'O7'" train --amp-level O7

# Exit status 2 for every bad command line, whether CLI11 or the command's own check finds it;
# 1 for what goes wrong once the command runs (a missing dataset or checkpoint).
status_of() { "$M" "$@" > /dev/null 2>&1 < /dev/null; echo $?; }
touch "$dir/exists.safetensors"
for args in "train --max-steps 0" "train --lr abc" "train --amp-level O7" "train --dtype fp8" \
            "train --loss-scale sometimes" "train --keep-batchnorm-fp32 maybe" "train --save-every 5" \
            "train --resume $dir/none.safetensors" "train --checkpoint $dir/exists.safetensors" \
            "eval --checkpoint x --batch-size 0" "eval --checkpoint x --amp-level O9" "bench --batch-size -1" \
            "bench --amp-level O9" "report r.json -o r.html --max-points 3"; do
  # shellcheck disable=SC2086  # word splitting of the argument list is intended
  [ "$(status_of $args)" = 2 ] || fail "exit status $(status_of $args), expected 2 (bad command line): $args"
done
[ "$(status_of train --data "$dir/nothing" --max-steps 1)" = 1 ] || fail "a missing dataset does not exit 1"
[ "$(status_of eval --checkpoint "$dir/none.safetensors")" = 1 ] || fail "a missing checkpoint does not exit 1"
echo "empty and nonsensical values are refused ($checked options checked for empty values)"
