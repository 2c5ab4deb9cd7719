#!/usr/bin/env bash
# No silent loss of output. A full disk fails the run with the path and the reason, never
# "wrote report" with an empty file: --trace and --report on /dev/full (always full), a trace
# that hits the file-size limit mid-run (stops training, exit 1), a report that cannot be
# written leaves the previous report intact (a tmpfs filled up when one can be mounted, the
# file-size limit always). Unwritable output paths fail before the first step. A new run refuses
# to replace an existing checkpoint without --resume or --overwrite.
set -uo pipefail
source "$(dirname "$0")/common.sh"
tfs="$dir/tmpfs"
at_exit 'mountpoint -q "$tfs" 2>/dev/null && umount "$tfs"'
make_tiny_data "$dir/data" 64
base=(train --data "$dir/data" --no-eval --threads 2 --print-every 1000)
run=("${base[@]}" --batch-size 16)
# expect_failure "needle" args...: non-zero exit, the needle in stderr, no "wrote report".
expect_failure() {
  expect_error "$@"
  ! grep -q "wrote report" "$dir/out" || fail "said 'wrote report' for: ${*:2}"
}
# before_training: the run failed before its first step (no summary line).
before_training() { ! grep -q "steps (" "$dir/out" || fail "failed only after training: $(cat "$dir/out")"; }

# 1. Always-full files.
expect_failure "--trace /dev/full: write failed: No space left on device" "${run[@]}" --max-steps 2 --trace /dev/full
before_training
expect_failure "--report /dev/full: write failed: No space left on device" "${run[@]}" --max-steps 2 --report /dev/full

# 2. The trace hits the file-size limit (1 KiB) after a few rows: training stops there, exit 1.
(trap '' XFSZ; ulimit -f 1; exec "$M" "${base[@]}" --batch-size 4 --max-steps 200 --epochs 20 --trace "$dir/t.csv") \
  > "$dir/out" 2> "$dir/err" && fail "a trace past the file-size limit was accepted"
grep -q -- "--trace $dir/t.csv: write failed: File too large (training stopped at step" "$dir/err" ||
  fail "trace failure not reported: $(cat "$dir/err")"
steps=$(grep -oE '^[0-9]+ steps' "$dir/out" | grep -oE '^[0-9]+')
[ -n "$steps" ] && [ "$steps" -lt 200 ] || fail "training did not stop at the failed write: $(cat "$dir/out")"

# 3. A report that cannot be written leaves the previous one intact and no temporary file.
echo '{"previous": true}' > "$dir/r.json"
(trap '' XFSZ; ulimit -f 1; exec "$M" "${run[@]}" --max-steps 1 --report "$dir/r.json") \
  > "$dir/out" 2> "$dir/err" && fail "a report past the file-size limit was accepted"
grep -q -- "--report $dir/r.json: write failed: File too large" "$dir/err" || fail "report failure: $(cat "$dir/err")"
grep -q "wrote report" "$dir/out" && fail "said 'wrote report' although the write failed"
[ "$(cat "$dir/r.json")" = '{"previous": true}' ] || fail "the previous report was damaged"
[ -z "$(find "$dir" -maxdepth 1 -name '.r.json.*')" ] || fail "temporary files left: $(ls -a "$dir")"
# The same on a full disk, where a tmpfs can be mounted (root, or a user namespace).
mkdir -p "$tfs"
if mount -t tmpfs -o size=64k tmpfs "$tfs" 2>/dev/null; then
  echo '{"previous": true}' > "$tfs/r.json"
  head -c 200000 /dev/zero > "$tfs/fill" 2>/dev/null
  expect_failure "--report $tfs/r.json: write failed: No space left on device" "${run[@]}" --max-steps 1 --report "$tfs/r.json"
  [ "$(cat "$tfs/r.json")" = '{"previous": true}' ] || fail "the previous report was damaged on the full disk"
  [ -z "$(find "$tfs" -name '.r.json.*')" ] || fail "temporary files left on the full disk: $(ls -a "$tfs")"
  echo "full tmpfs checked"
else
  echo "note: cannot mount a tmpfs here (not root); the full-disk report case ran with the file-size limit only"
fi

# 4. Unwritable output paths fail at once, naming the path and the reason.
expect_failure "--report /proc/r.json: cannot create a file in '/proc'" "${run[@]}" --max-steps 2 --report /proc/r.json
before_training
expect_failure "--checkpoint /dev/null/c.safetensors: cannot create the directory '/dev/null': Not a directory" \
  "${run[@]}" --max-steps 2 --checkpoint /dev/null/c.safetensors
before_training
expect_failure "--trace $dir: is a directory" "${run[@]}" --max-steps 2 --trace "$dir"
before_training

# 5. An existing checkpoint is not replaced by a new run without --overwrite.
"$M" "${run[@]}" --max-steps 1 --checkpoint "$dir/c.safetensors" > /dev/null || fail "first run failed"
cp "$dir/c.safetensors" "$dir/c0.safetensors"
expect_failure "--checkpoint $dir/c.safetensors: the file exists and this run would replace it" \
  "${run[@]}" --max-steps 1 --seed 2 --checkpoint "$dir/c.safetensors"
grep -q -- "--overwrite" "$dir/err" || fail "the refusal does not mention --overwrite"
cmp -s "$dir/c.safetensors" "$dir/c0.safetensors" || fail "the refused run changed the checkpoint"
"$M" "${run[@]}" --max-steps 2 --resume "$dir/c.safetensors" --checkpoint "$dir/c.safetensors" > /dev/null ||
  fail "resuming into the same checkpoint was refused"
"$M" "${run[@]}" --max-steps 1 --seed 2 --checkpoint "$dir/c.safetensors" --overwrite > /dev/null ||
  fail "--overwrite was refused"
cmp -s "$dir/c.safetensors" "$dir/c0.safetensors" && fail "--overwrite did not replace the checkpoint"
echo "output failures are reported, and checked before training"
