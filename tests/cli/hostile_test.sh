#!/usr/bin/env bash
# The hostile-user campaign kept as data (issue 29): every row of hostile_cases.tsv is a command, the
# exit status it must end with and a phrase its message must hold (stderr; stdout too for status
# 0). A row fails when the status differs, the phrase is missing, or the command dies by a signal,
# hangs (60 s) or prints "terminate called". Usage: hostile_test.sh MIXPREC [TABLE] (TABLE defaults
# to hostile_cases.tsv beside this script). The rows' shell sees $M (the binary), $D (fixtures
# made here: tiny MNIST data, a simplenet and a gpt-tiny checkpoint, a report, traces, a FIFO,
# a checkpoint holding a NaN, one of a finished run, files that are no checkpoint),
# $T (a 1-step simplenet run on $D/mnist) and $G (a 1-step gpt-tiny run without --data).
set -uo pipefail
source "$(dirname "$0")/common.sh"
table="${2:-$(dirname "$0")/hostile_cases.tsv}"
[ -r "$table" ] || fail "no table $table"
D="$dir/d"
mkdir -p "$D"
T="--data $D/mnist --no-eval --max-steps 1 --batch-size 16 --threads 2 --print-every 1000 --dtype bf16"
G="--model gpt-tiny --no-eval --max-steps 1 --batch-size 4 --train-samples 8 --threads 2 --print-every 1000 --dtype bf16"
export M D T G

# Fixtures.
make_tiny_data "$D/mnist" 64
make_tiny_data "$D/odd" 16 27 29
# shellcheck disable=SC2086  # $T and $G are argument lists
"$M" train $T --checkpoint "$D/ck.safetensors" --report "$D/r.json" --trace "$D/t.csv" > /dev/null ||
  fail "the simplenet fixture run failed"
for i in $(seq 40); do echo "The quick brown fox jumps over the lazy dog. Mixed precision keeps float32."; done \
  > "$D/text.txt"
# shellcheck disable=SC2086
"$M" train $G --data "$D/text.txt" --checkpoint "$D/gpt.safetensors" > /dev/null || fail "the gpt-tiny fixture run failed"
# A checkpoint whose loss scale (2^24, 8 characters) became 1e39: finite in double, inf in f32.
perl -0777 -pe 's/"loss_scale":"16777216"/"loss_scale":"1.00e+39"/' "$D/ck.safetensors" > "$D/ck39.safetensors"
grep -qa '"loss_scale":"1.00e+39"' "$D/ck39.safetensors" || fail "could not edit the loss scale of the fixture"
mkfifo "$D/fifo"
truncate -s 1100M "$D/sparse.txt"  # past the 1 GiB text limit, no disk used
printf 'text\0more text to make it long enough for a window or two of context\n' > "$D/nul.txt"
printf 'caf\xe9 au lait, and more text to make it long enough for a window or two\n' > "$D/latin1.txt"
printf 'step,epoch,loss\n1,1,' > "$D/cut_short_header.csv"
head -c -3 "$D/t.csv" > "$D/cut_full_header.csv"
: > "$D/empty.csv"
printf 'step,loss,step\n1,2,3\n' > "$D/dup.csv"
printf 'step,loss,offending_op\n1,2,"conv\n' > "$D/quote.csv"
printf 'step,loss\n1,abc\n' > "$D/badnum.csv"
echo '[1, 2]' > "$D/arr.json"
echo '{"amp_level": "O2"}' > "$D/nomodel.json"
head -c 100 "$D/r.json" > "$D/cut.json"
touch "$D/exists.safetensors"
# A checkpoint whose first tensor starts with a NaN (a resume refuses it unless asked).
python3 -c 'import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
b[8 + n:12 + n] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(b)' "$D/ck.safetensors" "$D/nan.safetensors" || fail "could not make the NaN fixture"
# with_metadata SRC KEY VALUE DST: the checkpoint SRC with metadata KEY set to VALUE, as DST.
with_metadata() {
  python3 -c 'import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"][sys.argv[2]] = sys.argv[3]
t = json.dumps(h, separators=(",", ":")).encode()
t += b" " * (-len(t) % 8)
open(sys.argv[4], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])' "$@" || fail "could not make $4"
}
# The checkpoint of a run whose last trace row could not be written (a full disk) stores that row
# (cli.trace_row), here step 1's row of $D/t.csv; one that claims a later mixprec.
with_metadata "$D/ck.safetensors" cli.trace_row "$(sed -n 2p "$D/t.csv")"$'\n' "$D/tracefull.safetensors"
with_metadata "$D/ck.safetensors" mixprec_version 99.0.0 "$D/v99.safetensors"
# A run that finished its epochs (1 step of 1 epoch): nothing is left to train.
# shellcheck disable=SC2086
"$M" train --data "$D/mnist" --no-eval --train-samples 16 --batch-size 16 --epochs 1 --threads 2 \
  --checkpoint "$D/done.safetensors" > /dev/null || fail "the finished-run fixture failed"
printf 'not a checkpoint at all, just some text\n' > "$D/text.safetensors"
: > "$D/empty.safetensors"
head -c 100 "$D/ck.safetensors" > "$D/cut.safetensors"

# The rows: name, status, phrase, command (tab-separated; '#' starts a comment line).
rows=0 failed=0
while IFS=$'\t' read -r name want phrase command; do
  [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  [ -n "$command" ] || fail "$table: row '$name' has no command"
  rows=$((rows + 1))
  phrase="${phrase//\$D/$D}"  # a phrase may name a fixture
  timeout -s KILL 60 bash -c "$command" > "$dir/out" 2> "$dir/err" < /dev/null
  got=$?
  why=""
  if [ "$got" -ne "$want" ]; then
    why="exit status $got, expected $want"
  elif [ "$want" -eq 0 ] && ! grep -qF -- "$phrase" "$dir/out" "$dir/err"; then
    why="no '$phrase' in its output"
  elif [ "$want" -ne 0 ] && ! grep -qF -- "$phrase" "$dir/err"; then
    why="no '$phrase' in its message"
  elif grep -q "terminate called\|internal error" "$dir/err"; then
    why="an uncaught exception or internal error"
  fi
  if [ -n "$why" ]; then
    failed=$((failed + 1))
    echo "FAIL $name: $why"
    echo "  command: $command"
    sed 's/^/  stderr: /' "$dir/err" | head -5
  fi
done < "$table"
[ "$rows" -ge 50 ] || fail "only $rows rows read from $table"
[ "$failed" -eq 0 ] || fail "$failed of $rows hostile cases"
echo "hostile cases ok ($rows rows)"
