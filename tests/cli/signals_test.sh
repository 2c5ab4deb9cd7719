#!/usr/bin/env bash
# SIGINT and SIGTERM stop training gracefully: the current step ends, the checkpoint, report and
# trace are written, the command prints what it saved and the --resume command that continues
# it, and exits 130 (SIGINT) or 143 (SIGTERM). The printed command resumes the run. A second
# signal aborts at once (nothing saved). A signal that arrives while the run finishes (here: while
# its report is being written) is not lost: exit 143 with the message. A signal that was ignored
# when mixprec started (nohup, `cmd &` in a script) stays ignored. A stop after the last step
# prints the `mixprec eval` command that runs the skipped final evaluation.
set -uo pipefail
source "$(dirname "$0")/common.sh"
pid=
at_exit '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null'
make_tiny_data "$dir/data" 64
# A run that cannot end by itself: every test stops it.
long=(train --data "$dir/data" --batch-size 8 --epochs 1000000 --no-eval --threads 2 --print-every 1)

# wait_progress NAME N: waits until $dir/NAME.out holds N progress lines (read by bash itself,
# no process per look); fails if mixprec ($pid) ends first or after 60 s.
wait_progress() {
  local name="$1" want="$2" n line
  for _ in $(seq 600); do
    n=0
    while IFS= read -r line; do [[ $line == epoch*step* ]] && n=$((n + 1)); done < "$dir/$name.out"
    [ "$n" -ge "$want" ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "$name ended early: $(cat "$dir/$name.err")"
    sleep 0.1
  done
  fail "$name shows no progress"
}

# start NAME args...: runs mixprec in the background and waits for its third progress line. A
# background job of a non-interactive shell starts with SIGINT ignored, which mixprec respects:
# env puts SIGINT and SIGTERM back to their default first, as in an interactive shell.
start() {
  local name="$1"; shift
  env --default-signal=INT,TERM "$M" "${long[@]}" "$@" > "$dir/$name.out" 2> "$dir/$name.err" &
  pid=$!
  wait_progress "$name" 3
}

for sig in INT TERM; do
  [ $sig = INT ] && want=130 || want=143
  start $sig --checkpoint "$dir/$sig.safetensors" --trace "$dir/$sig.csv" --report "$dir/$sig.json"
  kill -$sig "$pid"
  wait "$pid"; rc=$?; pid=
  [ $rc -eq $want ] || fail "SIG$sig: exit status $rc, expected $want: $(cat "$dir/$sig.err")"
  grep -q "mixprec: stopped by SIG$sig after step [0-9]" "$dir/$sig.err" || fail "SIG$sig message: $(cat "$dir/$sig.err")"
  step=$(grep -oE "after step [0-9]+" "$dir/$sig.err" | grep -oE "[0-9]+")
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

# A signal during the final phase is not lost. The report goes to a FIFO that nobody reads yet,
# shrunk to one page (perl, which every Debian has, sets F_SETPIPE_SZ = 1031), and holds the
# gradient statistics of every step, far more than a page: the run blocks in its final write.
# SIGTERM arrives there, then the FIFO is drained: exit 143, with the message.
mkfifo "$dir/report.fifo"
exec 5<> "$dir/report.fifo"  # a reader, so that the report's path checks as writable
perl -e 'open(my $f, "+<", $ARGV[0]) or die "$!"; fcntl($f, 1031, 4096) or die "F_SETPIPE_SZ: $!"' \
  "$dir/report.fifo" || fail "cannot shrink the FIFO's buffer"
env --default-signal=INT,TERM "$M" train --data "$dir/data" --batch-size 8 --epochs 100 --no-eval --threads 2 \
  --amp-level O0 --print-every 1000 --max-steps 20 --grad-stats 1 --checkpoint "$dir/final.safetensors" \
  --report "$dir/report.fifo" > "$dir/final.out" 2> "$dir/final.err" 5<&- &
pid=$!
# blocked_on_pipe: the main thread sleeps in a pipe write (the kernel names it pipe_write or
# anon_pipe_write, depending on its version).
blocked_on_pipe() { [[ "$(cat "/proc/$pid/wchan" 2>/dev/null)" == *pipe_write ]]; }
for _ in $(seq 600); do
  blocked_on_pipe && break
  kill -0 "$pid" 2>/dev/null || fail "the run ended before its report blocked: $(cat "$dir/final.err")"
  sleep 0.1
done
blocked_on_pipe || fail "the run never blocked writing its report: $(cat "/proc/$pid/wchan")"
kill -TERM "$pid"
cat "$dir/report.fifo" > "$dir/final.json" 5<&- &  # (fd 5 is a writer too: cat would never see the end)
drain=$!
wait "$pid"; rc=$?; pid=
exec 5<&-
wait "$drain"
[ $rc -eq 143 ] || fail "SIGTERM during the final write: exit status $rc, expected 143: $(cat "$dir/final.err")"
grep -q "mixprec: stopped by SIGTERM after step 20" "$dir/final.err" || fail "no stop message: $(cat "$dir/final.err")"
grep -q '"steps": 20,' "$dir/final.json" || fail "the report was not completed"
! grep -q "continue with" "$dir/final.out" || fail "a finished run printed a resume command"

# A signal ignored at start stays ignored: SIGINT changes nothing, SIGTERM still stops the run.
env --ignore-signal=INT "$M" "${long[@]}" --checkpoint "$dir/ignored.safetensors" \
  > "$dir/ignored.out" 2> "$dir/ignored.err" &
pid=$!
wait_progress ignored 3
kill -INT "$pid"
n=$(grep -c "^epoch .* step " "$dir/ignored.out")
wait_progress ignored $((n + 5))
kill -TERM "$pid"
wait "$pid"; rc=$?; pid=
[ $rc -eq 143 ] || fail "SIGINT ignored at start: exit status $rc after SIGTERM, expected 143: $(cat "$dir/ignored.err")"
! grep -q "stopped by SIGINT" "$dir/ignored.err" || fail "an ignored SIGINT stopped the run"

# A signal after the last step (here during the last epoch's evaluation of 20000 test samples) skips
# the final evaluation: the command says so and prints the `mixprec eval` command that runs it.
make_tiny_data "$dir/big" 20000
env --default-signal=INT,TERM "$M" train --data "$dir/big" --train-samples 32 --batch-size 16 --epochs 1 \
  --threads 2 --dtype bf16 --print-every 1 --checkpoint "$dir/last.safetensors" > "$dir/last.out" 2> "$dir/last.err" &
pid=$!
wait_progress last 2
kill -TERM "$pid"
wait "$pid"; rc=$?; pid=
[ $rc -eq 143 ] || fail "SIGTERM after the last step: exit status $rc, expected 143: $(cat "$dir/last.err")"
grep -q "the final evaluation was skipped (stopped by SIGTERM); evaluate the saved checkpoint with:" "$dir/last.out" &&
  grep -qF "  mixprec eval --model simplenet --checkpoint $dir/last.safetensors --data $dir/big" "$dir/last.out" ||
  fail "no eval command after a stop at the last step: $(cat "$dir/last.out")"
echo "SIGINT and SIGTERM stop gracefully, also while finishing; a second signal aborts; an ignored one stays ignored;" \
  "a stop after the last step prints the eval command"
