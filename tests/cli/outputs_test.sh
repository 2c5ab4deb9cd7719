#!/usr/bin/env bash
# No silent loss of output. A full disk fails the run with the path and the reason, never
# "wrote report" with an empty file: --trace and --report on /dev/full (always full), a trace
# that hits the file-size limit mid-run (stops training, exit 1), a report that cannot be
# written leaves the previous report intact (a tmpfs filled up when one can be mounted, the
# file-size limit always). A checkpoint that cannot be saved does not cost the report: every
# final write is attempted and every failure named. Unwritable output paths fail before the first
# step, and a refused run creates no directory. A destination that is not a regular file (a
# device node, a directory) is never replaced; a symbolic link stays a link. A new run refuses to
# replace an existing checkpoint without --resume or --overwrite.
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
# limited KIB args...: mixprec args with the files it writes limited to KIB KiB (SIGXFSZ ignored,
# so a write fails with EFBIG). Its stdout and stderr go through pipes, which the limit does not
# cover, into $dir/out and $dir/err: long messages are never cut. Returns mixprec's status.
limited() {
  local kib="$1"; shift
  { (trap '' XFSZ; ulimit -f "$kib"; exec "$M" "$@" 2>&1 1>&3 3>&-) | cat > "$dir/err"; } 3>&1 | cat > "$dir/out"
}
no_temporaries() {  # no_temporaries DIR NAME
  [ -z "$(find "$1" -maxdepth 1 -name ".$2.*")" ] || fail "temporary files left: $(ls -a "$1")"
}

# 1. Always-full files.
expect_failure "--trace /dev/full: write failed: No space left on device" "${run[@]}" --max-steps 2 --trace /dev/full
before_training
expect_failure "--report /dev/full: write failed: No space left on device" "${run[@]}" --max-steps 2 --report /dev/full

# 2. The trace hits the file-size limit (1 KiB) after a few rows: training stops there, exit 1.
limited 1 "${base[@]}" --batch-size 4 --max-steps 200 --epochs 20 --trace "$dir/t.csv" &&
  fail "a trace past the file-size limit was accepted"
grep -q -- "--trace $dir/t.csv: write failed: File too large (training stopped at step" "$dir/err" ||
  fail "trace failure not reported: $(cat "$dir/err")"
steps=$(grep -oE '^[0-9]+ steps' "$dir/out" | grep -oE '^[0-9]+')
[ -n "$steps" ] && [ "$steps" -lt 200 ] || fail "training did not stop at the failed write: $(cat "$dir/out")"

# 3. A report that cannot be written leaves the previous one intact and no temporary file.
echo '{"previous": true}' > "$dir/r.json"
limited 1 "${run[@]}" --max-steps 1 --report "$dir/r.json" && fail "a report past the file-size limit was accepted"
grep -q -- "--report $dir/r.json: cannot write (temporary .*): File too large" "$dir/err" ||
  fail "report failure: $(cat "$dir/err")"
grep -q "wrote report" "$dir/out" && fail "said 'wrote report' although the write failed"
[ "$(cat "$dir/r.json")" = '{"previous": true}' ] || fail "the previous report was damaged"
no_temporaries "$dir" r.json
# The same on a full disk, where a tmpfs can be mounted (root, or a user namespace).
mkdir -p "$tfs"
if mount -t tmpfs -o size=64k tmpfs "$tfs" 2>/dev/null; then
  echo '{"previous": true}' > "$tfs/r.json"
  head -c 200000 /dev/zero > "$tfs/fill" 2>/dev/null
  expect_failure "--report $tfs/r.json: cannot write (temporary .*): No space left on device" \
    "${run[@]}" --max-steps 1 --report "$tfs/r.json"
  [ "$(cat "$tfs/r.json")" = '{"previous": true}' ] || fail "the previous report was damaged on the full disk"
  no_temporaries "$tfs" r.json
  echo "full tmpfs checked"
else
  echo "note: cannot mount a tmpfs here (not root); the full-disk report case ran with the file-size limit only"
fi

# 4. A checkpoint that cannot be saved (1.7 MB past a 256 KiB limit) does not cost the report or
# the trace: each final write is attempted, each failure named, and the run exits 1.
limited 256 "${run[@]}" --max-steps 2 --checkpoint "$dir/big.safetensors" --report "$dir/after.json" \
  --trace "$dir/after.csv"; rc=$?
[ $rc -eq 1 ] || fail "a failed checkpoint save exited $rc: $(cat "$dir/err")"
grep -q -- "^mixprec: error: --checkpoint $dir/big.safetensors: cannot write (temporary .*): File too large" "$dir/err" ||
  fail "checkpoint failure not named: $(cat "$dir/err")"
grep -q "wrote report $dir/after.json" "$dir/out" || fail "no report after the failed save: $(cat "$dir/out")"
grep -q '"steps": 2,' "$dir/after.json" || fail "the report is not this run's: $(cat "$dir/after.json")"
[ "$(tail -1 "$dir/after.csv" | cut -d, -f1)" = 2 ] || fail "the trace is incomplete"
[ ! -e "$dir/big.safetensors" ] || fail "a checkpoint was left although its save failed"
no_temporaries "$dir" big.safetensors
# Both fail (1 KiB): both are named.
limited 1 "${run[@]}" --max-steps 2 --checkpoint "$dir/big.safetensors" --report "$dir/after2.json"; rc=$?
[ $rc -eq 1 ] || fail "two failed writes exited $rc"
grep -q -- "^mixprec: error: --checkpoint $dir/big.safetensors: .*File too large" "$dir/err" &&
  grep -q -- "^mixprec: error: --report $dir/after2.json: .*File too large" "$dir/err" ||
  fail "not every failed write is named: $(cat "$dir/err")"

# 5. Unwritable output paths fail at once, naming the path and the reason.
expect_failure "--report /proc/r.json: cannot create a temporary file in /proc" "${run[@]}" --max-steps 2 \
  --report /proc/r.json
before_training
expect_failure "--checkpoint /dev/null/c.safetensors: cannot create the directory '/dev/null': '/dev/null' is not a directory" \
  "${run[@]}" --max-steps 2 --checkpoint /dev/null/c.safetensors
before_training
expect_failure "--trace $dir: is a directory, not a regular file" "${run[@]}" --max-steps 2 --trace "$dir"
before_training

# 6. A run refused by a later check (a changed setting on --resume, missing data) creates none of
# the directories its outputs would go to; a run that trains creates them.
"$M" "${run[@]}" --max-steps 1 --checkpoint "$dir/r1.safetensors" > /dev/null || fail "first run failed"
expect_failure "this run has --lr 0.5" "${run[@]}" --max-steps 2 --lr 0.5 --resume "$dir/r1.safetensors" \
  --report "$dir/new1/r.json" --checkpoint "$dir/new2/sub/c.safetensors" --trace "$dir/new3/t.csv"
expect_failure "expected a directory with the MNIST" train --data "$dir/no_data_here" --max-steps 1 --report "$dir/new4/r.json"
for d in new1 new2 new3 new4; do [ ! -e "$dir/$d" ] || fail "a refused run created $dir/$d"; done
"$M" "${run[@]}" --max-steps 1 --report "$dir/made/sub/r.json" > /dev/null || fail "run into a new directory failed"
[ -s "$dir/made/sub/r.json" ] || fail "the report's directory was not created"

# 7. What is not a regular file is never replaced: a device node (a copy of /dev/null, made here
# so that the old behaviour could only ever replace this copy), a FIFO; a symbolic link stays a
# link and its target gets the report.
mkfifo "$dir/fifo"
expect_failure "--checkpoint $dir/fifo: is a FIFO (named pipe), not a regular file" \
  "${run[@]}" --max-steps 1 --checkpoint "$dir/fifo" --overwrite
before_training
[ -p "$dir/fifo" ] || fail "the FIFO was replaced"
if mknod "$dir/null" c 1 3 2>/dev/null; then
  expect_failure "--checkpoint $dir/null: is a character device, not a regular file" \
    "${run[@]}" --max-steps 1 --checkpoint "$dir/null" --overwrite
  before_training
  [ -c "$dir/null" ] || fail "the device node was replaced"
  echo "device node checked"
else
  echo "note: cannot create a device node here (not root); the FIFO case stands for it"
fi
echo '{"old": true}' > "$dir/real.json"
ln -s real.json "$dir/link.json"
"$M" "${run[@]}" --max-steps 1 --report "$dir/link.json" > /dev/null || fail "a report through a link failed"
[ -L "$dir/link.json" ] || fail "the link was replaced by a file"
grep -q '"steps": 1,' "$dir/real.json" || fail "the link's target did not get the report"
no_temporaries "$dir" real.json

# 8. An existing checkpoint is not replaced by a new run without --overwrite.
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
