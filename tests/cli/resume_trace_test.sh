#!/usr/bin/env bash
# A resumed run continues its --trace (it used to erase the earlier rows): resuming at step 3 a
# trace that already holds steps 1-6 (written after that checkpoint) keeps 1-3, drops 4-6 and
# appends 4-7, so the trace equals that of a run that never stopped, byte for byte. The summary
# and the report count this process's steps over this process's time.
set -uo pipefail
source "$(dirname "$0")/common.sh"
make_tiny_data "$dir/data" 64
common=(train --data "$dir/data" --batch-size 16 --epochs 3 --no-eval --threads 2 --loss-scale dynamic:1024,2,3)
"$M" "${common[@]}" --max-steps 7 --trace "$dir/straight.csv" > /dev/null || fail "straight run"
"$M" "${common[@]}" --max-steps 3 --trace "$dir/t.csv" --checkpoint "$dir/a.safetensors" > /dev/null || fail "run to 3"
cp "$dir/a.safetensors" "$dir/at3.safetensors"
"$M" "${common[@]}" --max-steps 6 --trace "$dir/t.csv" --resume "$dir/a.safetensors" \
  --checkpoint "$dir/a.safetensors" > /dev/null || fail "resume to 6"
[ "$(cut -d, -f1 "$dir/t.csv" | tr '\n' ' ')" = "step 1 2 3 4 5 6 " ] || fail "trace to 6: $(cat "$dir/t.csv")"
"$M" "${common[@]}" --max-steps 7 --trace "$dir/t.csv" --resume "$dir/at3.safetensors" \
  --checkpoint "$dir/b.safetensors" --report "$dir/r.json" > "$dir/out" || fail "resume from 3 to 7"
cmp "$dir/straight.csv" "$dir/t.csv" || { diff "$dir/straight.csv" "$dir/t.csv"; fail "the continued trace differs"; }

# This process ran steps 4-7: 4 steps, and its rate is over its own time.
grep -qE "^4 steps this run \(0 skipped\) in [0-9.]+ s, [0-9]+ samples/s.*; 7 steps in total \(resumed at step 3\)" \
  "$dir/out" || fail "summary: $(grep steps "$dir/out")"
num() { grep -oE "\"$1\": [-0-9.e+]+" "$dir/r.json" | head -1 | awk '{print $2}'; }
[ "$(num steps)" = 7 ] && [ "$(num steps_this_run)" = 4 ] && [ "$(num resumed_at_step)" = 3 ] ||
  fail "report counts: steps $(num steps), this run $(num steps_this_run), resumed at $(num resumed_at_step)"
awk -v r="$(num samples_per_second)" -v t="$(num train_seconds)" \
  'BEGIN { e = 4 * 16 / t; exit !(r > 0.999 * e && r < 1.001 * e) }' ||
  fail "samples_per_second $(num samples_per_second) is not 4 steps x 16 samples / $(num train_seconds) s"

# A file that is not a trace is not appended to.
echo "not a trace" > "$dir/other.csv"
"$M" "${common[@]}" --max-steps 7 --trace "$dir/other.csv" --resume "$dir/at3.safetensors" 2> "$dir/err" > /dev/null &&
  fail "continued a file that is not a trace"
grep -q "does not start with mixprec's trace header" "$dir/err" || fail "message: $(cat "$dir/err")"
echo "a resumed run continues its trace and counts its own steps"
