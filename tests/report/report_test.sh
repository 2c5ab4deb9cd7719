#!/usr/bin/env bash
# `mixprec report`: renders a real run (tiny lenet O2/f16 training, needs Fashion-MNIST) and the
# hand-written fixture (every optional section), downsamples a long trace, stays offline and
# HTML-injection safe, and rejects bad inputs with a message naming the file and the field.
# Usage: report_test.sh MIXPREC FIXTURE_DIR [real|fixture|long|errors|all]
set -uo pipefail
M="$1"
FX="$2"
MODE="${3:-all}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
has() { grep -qF -- "$2" "$1" || fail "no '$2' in $1"; }
lacks() { ! grep -qiF -- "$2" "$1" || fail "'$2' found in $1: $(grep -oiF -- "$2" "$1" | head -1)"; }
points() { grep -o "data-series=\"$2\" data-points=\"[0-9]*\"" "$1" | head -1 | grep -o '[0-9]*"$' | tr -d '"'; }

offline_and_safe() {  # no network references, no scripts, nothing loaded from outside
  for s in "http://" "https://" "<script" ' src="' ' href="' "url(" "@import" "<link" "<img" "<iframe"; do lacks "$1" "$s"; done
  has "$1" "Content-Security-Policy"
}

real_run() {
  local data=/usr/share/datasets/fashion-mnist
  if [ ! -e "$data/train-labels-idx1-ubyte.gz" ] && [ ! -e "$data/train-labels-idx1-ubyte" ]; then
    echo "Fashion-MNIST not installed: skipping the real run"; return 0
  fi
  "$M" train --model lenet --train-samples 1024 --batch-size 16 --epochs 2 --amp-level O2 --dtype f16 \
    --loss-scale dynamic --threads 2 --report "$dir/r.json" --trace "$dir/t.csv" > "$dir/train.log" ||
    fail "train failed: $(tail -5 "$dir/train.log")"
  "$M" report "$dir/r.json" --trace "$dir/t.csv" -o "$dir/out/r.html" > /dev/null || fail "report of a real run failed"
  local h="$dir/out/r.html"
  has "$h" "<svg"
  has "$h" "mixprec run report: lenet"
  has "$h" "Training loss per step"
  has "$h" "Loss scale per step"
  [ "$(points "$h" "loss (raw)")" -ge 100 ] || fail "loss curve has $(points "$h" "loss (raw)") points, expected 128"
  [ "$(points "$h" "loss scale")" -ge 100 ] || fail "loss scale curve too short"
  offline_and_safe "$h"
  [ "$(stat -c %s "$h")" -lt 200000 ] || fail "report of 128 steps is $(stat -c %s "$h") bytes"
  # Without a trace: per-epoch losses from the JSON.
  "$M" report "$dir/r.json" -o "$dir/noterm.html" > /dev/null || fail "report without --trace failed"
  has "$dir/noterm.html" "Loss per epoch"
  has "$dir/noterm.html" "per-step loss unavailable"
  lacks "$dir/noterm.html" "Training loss per step"
  echo "real run ok"
}

fixture() {
  "$M" report "$FX/fixture_run.json" --trace "$FX/fixture_trace.csv" -o "$dir/fx.html" > /dev/null || fail "fixture report failed"
  local h="$dir/fx.html"
  for s in "convnet-bn" "Precision per cell" "features.1" "BatchNorm2d" "classifier.fc_out" "Overflow events (4)" \
           "First overflow: step 3, backward pass" "Gradient statistics (2 parameters)" \
           "Recommended loss scale: <b>16384 (2^14)</b>" "Precision promotions (1)" "Test accuracy per epoch" \
           "Loss per epoch" "Casts per step" "conv2d, input 0" "trace columns not shown: future_col" \
           "step 17: loss is NaN" "2 non-finite loss value(s) left out" 'data-strip="skipped"'; do
    has "$h" "$s"
  done
  # Escaped, never live: the fixture carries a <script> warning and an <img> cell name.
  has "$h" "&lt;script&gt;alert(&#39;injected&#39;)&lt;/script&gt;"
  has "$h" "&lt;img src=x onerror=alert(1)&gt;"
  offline_and_safe "$h"
  # The latest grad stats win: step 40's 1.75, not step 10's 3.5.
  has "$h" ">1.75<"
  lacks "$h" ">3.5<"
  # A minimal JSON (only the required keys) renders without charts or tables.
  echo '{"model": "tiny", "amp_level": "O0", "test_accuracy": null}' > "$dir/min.json"
  "$M" report "$dir/min.json" -o "$dir/min.html" > /dev/null || fail "minimal JSON rejected"
  has "$dir/min.html" "mixprec run report: tiny"
  lacks "$dir/min.html" "<svg"
  echo "fixture ok"
}

long_trace() {  # 20000 steps: min/max buckets keep the file small
  awk 'BEGIN { print "step,epoch,loss,scale,skipped,overflow,lr";
               for (i = 1; i <= 20000; i++) printf "%d,%d,%.5f,%d,%d,%d,%g\n", i, 1 + int(i / 5000),
                 2 * exp(-i / 4000) + 0.1 * sin(i), 65536, (i % 997 == 0), (i % 997 == 0), 0.1 * (1 - i / 20000) }' \
    > "$dir/long.csv"
  "$M" report "$FX/fixture_run.json" --trace "$dir/long.csv" -o "$dir/long.html" > /dev/null || fail "long trace failed"
  local n
  n=$(points "$dir/long.html" "loss (raw)")
  { [ "$n" -le 2000 ] && [ "$n" -ge 1000 ]; } || fail "20000 steps drawn with $n points, expected 1000..2000"
  has "$dir/long.html" "downsampled to min/max of 1000 buckets"
  has "$dir/long.html" "Learning rate per step"
  [ "$(stat -c %s "$dir/long.html")" -lt 300000 ] || fail "long report is $(stat -c %s "$dir/long.html") bytes"
  "$M" report "$FX/fixture_run.json" --trace "$dir/long.csv" --max-points 100 -o "$dir/short.html" > /dev/null
  [ "$(points "$dir/short.html" "loss (raw)")" -le 100 ] || fail "--max-points 100 ignored"
  echo "long trace ok"
}

expect_error() {  # expect_error "needle" args...: exit status 1 and the needle in the message
  local needle="$1"; shift
  out=$("$M" "$@" 2>&1)
  local rc=$?
  [ $rc -eq 1 ] || fail "exit status $rc (expected 1) for: $* -> $out"
  grep -qF -- "$needle" <<< "$out" || fail "no '$needle' in the error for: $* -> $out"
  ! grep -q "internal error" <<< "$out" || fail "internal error for: $* -> $out"
}

errors() {
  local run="$FX/fixture_run.json" tr="$FX/fixture_trace.csv"
  expect_error "run report '$dir/nope.json': cannot read" report "$dir/nope.json" -o "$dir/x.html"
  head -c 300 "$run" > "$dir/cut.json"
  expect_error "run report '$dir/cut.json': not valid JSON: parse error at line" report "$dir/cut.json" -o "$dir/x.html"
  echo '[1, 2]' > "$dir/arr.json"
  expect_error "the top level: expected a JSON object" report "$dir/arr.json" -o "$dir/x.html"
  echo '{"amp_level": "O2"}' > "$dir/nomodel.json"
  expect_error "field 'model' is missing" report "$dir/nomodel.json" -o "$dir/x.html"
  echo '{"model": "m", "amp_level": "O2", "steps": "many"}' > "$dir/type.json"
  expect_error "field 'steps': expected a number, got string" report "$dir/type.json" -o "$dir/x.html"
  sed 's/"test_accuracy": 0.8123, "test_loss": 0.52/"test_accuracy": "high", "test_loss": 0.52/' "$run" > "$dir/nested.json"
  expect_error "field 'epoch_metrics[1].test_accuracy': expected a number" report "$dir/nested.json" -o "$dir/x.html"
  sed 's/"ops": \["linear", "cast"\]/"ops": ["linear", 3]/' "$run" > "$dir/ops.json"
  expect_error "field 'precision_table[2].ops[1]': expected a string" report "$dir/ops.json" -o "$dir/x.html"
  expect_error "trace '$dir/nope.csv': cannot read" report "$run" --trace "$dir/nope.csv" -o "$dir/x.html"
  { cat "$tr"; echo "41,2,abc,4096,0,0,0.01,12,0.83,,x41"; } > "$dir/badnum.csv"
  expect_error "trace '$dir/badnum.csv', line 42, column 'loss': expected a number, got 'abc'" \
    report "$run" --trace "$dir/badnum.csv" -o "$dir/x.html"
  { head -20 "$tr"; echo "20,1,0.5"; } > "$dir/short.csv"
  expect_error "trace '$dir/short.csv', line 21: expected 11 fields" report "$run" --trace "$dir/short.csv" -o "$dir/x.html"
  : > "$dir/empty.csv"
  expect_error "trace '$dir/empty.csv': empty file" report "$run" --trace "$dir/empty.csv" -o "$dir/x.html"
  printf 'step,loss,step\n1,2,3\n' > "$dir/dup.csv"
  expect_error "column 'step' appears twice" report "$run" --trace "$dir/dup.csv" -o "$dir/x.html"
  printf 'step,loss,offending_op\n1,2,"conv\n' > "$dir/quote.csv"
  expect_error "line 2: unterminated quote" report "$run" --trace "$dir/quote.csv" -o "$dir/x.html"
  [ ! -e "$dir/x.html" ] || fail "a failed report left $dir/x.html behind"
  "$M" report "$run" > /dev/null 2>&1 && fail "report without -o accepted"
  echo "errors ok"
}

case "$MODE" in
  real) real_run ;;
  fixture) fixture ;;
  long) long_trace ;;
  errors) errors ;;
  all) real_run; fixture; long_trace; errors ;;
  *) fail "unknown mode $MODE" ;;
esac
