#!/usr/bin/env bash
# Observing a run does not change it: with and without each reporting option (--report,
# --trace, --show-precision, --grad-stats, --check-numerics) and all of them together, the
# checkpoints are byte-identical. convnet-bn at O2-bf16 has BatchNorm, whose running statistics
# the precision table's forward pass used to update.
set -uo pipefail
source "$(dirname "$0")/common.sh"
make_tiny_data "$dir/data" 64
common=(train --data "$dir/data" --model convnet-bn --amp-level O2 --dtype bf16 --batch-size 8 --max-steps 1
        --no-eval --threads 2)
"$M" "${common[@]}" --checkpoint "$dir/plain.safetensors" > /dev/null || fail "plain run"
i=0
for opts in "--report $dir/r.json" "--trace $dir/t.csv" "--show-precision" "--grad-stats 1" "--check-numerics" \
            "--report $dir/r2.json --trace $dir/t2.csv --show-precision --grad-stats 1 --check-numerics"; do
  i=$((i + 1))
  # shellcheck disable=SC2086  # $opts is a list of options
  "$M" "${common[@]}" $opts --checkpoint "$dir/$i.safetensors" > /dev/null || fail "run with $opts"
  cmp -s "$dir/plain.safetensors" "$dir/$i.safetensors" || fail "$opts changed the checkpoint"
done
grep -q '"precision_table": \[$' "$dir/r.json" && grep -q '"type": "BatchNorm2d"' "$dir/r.json" ||
  fail "the report has no precision table with BatchNorm"
echo "reporting options leave the run bit-identical"
