#!/usr/bin/env bash
# SIGINT and SIGTERM stop training gracefully: the current step ends, the checkpoint, report and
# trace are written, the command prints what it saved and the --resume command that continues
# it, and exits 130 (SIGINT) or 143 (SIGTERM). The printed command resumes the run. A second
# signal aborts at once (nothing saved).
set -uo pipefail
source "$(dirname "$0")/common.sh"
pid=
at_exit '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null'
make_tiny_data "$dir/data" 64
# 400 steps: far more than the test waits for.
long=(train --data "$dir/data" --batch-size 8 --epochs 50 --no-eval --threads 2 --print-every 1)

# start NAME args...: runs mixprec in the background (the shell's SIGINT-ignore for background
# jobs does not apply: mixprec installs its own handlers) and waits for its third progress line.
start() {
  local name="$1"; shift
  "$M" "${long[@]}" "$@" > "$dir/$name.out" 2> "$dir/$name.err" &
  pid=$!
  for _ in $(seq 600); do
    [ "$(grep -c "^epoch .* step " "$dir/$name.out" 2>/dev/null)" -ge 3 ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "$name ended early: $(cat "$dir/$name.err")"
    sleep 0.1
  done
  fail "$name shows no progress"
}

for sig in INT TERM; do
  [ $sig = INT ] && want=130 || want=143
  start $sig --checkpoint "$dir/$sig.safetensors" --trace "$dir/$sig.csv" --report "$dir/$sig.json"
  kill -$sig "$pid"
  wait "$pid"; rc=$?; pid=
  [ $rc -eq $want ] || fail "SIG$sig: exit status $rc, expected $want: $(cat "$dir/$sig.err")"
  grep -q "mixprec: stopped by SIG$sig after step [0-9]" "$dir/$sig.err" || fail "SIG$sig message: $(cat "$dir/$sig.err")"
  step=$(grep -oE "after step [0-9]+" "$dir/$sig.err" | grep -oE "[0-9]+")
  [ "$step" -lt 400 ] || fail "SIG$sig did not stop the run"
  grep -q "saved checkpoint $dir/$sig.safetensors" "$dir/$sig.out" || fail "SIG$sig: no checkpoint line"
  grep -q "wrote report $dir/$sig.json" "$dir/$sig.out" || fail "SIG$sig: no report"
  grep -q "\"interrupted\": \"stopped by SIG$sig\"" "$dir/$sig.json" || fail "SIG$sig: the report does not say so"
  [ "$(tail -1 "$dir/$sig.csv" | cut -d, -f1)" = "$step" ] || fail "SIG$sig: the trace does not end at step $step"
  cmd=$(grep -A1 "continue with:" "$dir/$sig.out" | tail -1)
  [[ "$cmd" == *"--resume $dir/$sig.safetensors" ]] || fail "SIG$sig: no resume command: $(cat "$dir/$sig.out")"
  # The printed command continues the run (two more steps).
  eval "$cmd --max-steps $((step + 2))" > "$dir/$sig.resumed" 2>&1 || fail "SIG$sig: resume failed: $(cat "$dir/$sig.resumed")"
  grep -q "resuming from $dir/$sig.safetensors at .*(step $step)" "$dir/$sig.resumed" || fail "SIG$sig: did not resume"
  [ "$(tail -1 "$dir/$sig.csv" | cut -d, -f1)" = "$((step + 2))" ] || fail "SIG$sig: the resumed trace does not continue"
done

# A second stop signal while the first is being handled aborts at once: nothing is saved. The
# process is stopped while both are sent, so that both are pending when it continues (two SIGINTs
# would merge into one pending signal).
start twice --checkpoint "$dir/twice.safetensors"
kill -STOP "$pid"; kill -INT "$pid"; kill -TERM "$pid"; kill -CONT "$pid"
wait "$pid"; rc=$?; pid=
[ $rc -eq 130 ] || [ $rc -eq 143 ] || fail "second signal: exit status $rc"
[ ! -e "$dir/twice.safetensors" ] || fail "second signal: a checkpoint was still written"
! grep -q "continue with" "$dir/twice.out" || fail "second signal: the run was not aborted"
echo "SIGINT and SIGTERM stop gracefully; a second signal aborts"
