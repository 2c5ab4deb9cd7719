#!/usr/bin/env bash
# `mixprec generate` writes its sample as it makes it (issue 29): with --tokens 100000, bytes reach
# the file within seconds, and a SIGINT or SIGTERM stops it cleanly: exit 130 or 143, a message
# saying how many bytes were made, and every one of them in the file (prompt + sample + newline).
# Sampling from the same seed gives the same bytes whether it streams to the end or is stopped.
set -uo pipefail
source "$(dirname "$0")/common.sh"
pid=""
at_exit '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null'
for i in $(seq 40); do echo "The quick brown fox jumps over the lazy dog. Mixed precision keeps float32."; done \
  > "$dir/text.txt"
"$M" train --model gpt-tiny --data "$dir/text.txt" --no-eval --max-steps 1 --batch-size 4 --train-samples 8 \
  --threads 2 --print-every 1000 --checkpoint "$dir/gpt.safetensors" > /dev/null || fail "the gpt-tiny run failed"
gen=(generate --checkpoint "$dir/gpt.safetensors" --prompt Hi --seed 7 --threads 2)

for sig in INT TERM; do
  out="$dir/$sig.out"
  # (a background job of a script starts with SIGINT ignored, which mixprec respects: restore it)
  env --default-signal=INT,TERM "$M" "${gen[@]}" --tokens 100000 > "$out" 2> "$dir/$sig.err" &
  pid=$!
  for _ in $(seq 600); do  # up to 60 s for the first 200 bytes
    [ "$(stat -c %s "$out")" -gt 200 ] && break
    kill -0 "$pid" 2>/dev/null || fail "generate ended early: $(cat "$dir/$sig.err")"
    sleep 0.1
  done
  [ "$(stat -c %s "$out")" -gt 200 ] || fail "nothing written after 60 s: the sample is held back"
  kill -"$sig" "$pid"
  wait "$pid"
  rc=$?
  pid=""
  want=$([ "$sig" = INT ] && echo 130 || echo 143)
  [ "$rc" -eq "$want" ] || fail "SIG$sig: exit status $rc, expected $want: $(cat "$dir/$sig.err")"
  made=$(grep -oE "stopped by SIG$sig after [0-9]+ of 100000 bytes" "$dir/$sig.err" | grep -oE "after [0-9]+" |
         grep -oE "[0-9]+")
  [ -n "$made" ] || fail "SIG$sig: no 'stopped by SIG$sig after N of 100000 bytes' in: $(cat "$dir/$sig.err")"
  [ "$(stat -c %s "$out")" -eq $((2 + made + 1)) ] ||
    fail "SIG$sig: $made bytes made but the file holds $(stat -c %s "$out") (expected prompt + $made + newline)"
  # The same seed to the same length, uninterrupted: the same bytes.
  "$M" "${gen[@]}" --tokens "$made" > "$dir/$sig.whole" 2> /dev/null || fail "generate --tokens $made failed"
  cmp -s "$out" "$dir/$sig.whole" || fail "SIG$sig: the stopped sample differs from the same sample made whole"
done
echo "generate streams and stops cleanly"
