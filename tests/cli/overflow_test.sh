#!/usr/bin/env bash
# Overflow provenance from the command line: a loss scale of 1e9 overflows f16 gradients; the
# report must hold overflow events naming a cell and a phase, and every step is skipped.
set -euo pipefail
M="$1"
data=/usr/share/datasets/fashion-mnist
if [ ! -e "$data/train-labels-idx1-ubyte.gz" ] && [ ! -e "$data/train-labels-idx1-ubyte" ]; then
  echo "Fashion-MNIST not installed: skipping"; exit 0
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$M" train --model simplenet --amp-level O2 --dtype f16 --loss-scale fixed-drop:1e9 --max-steps 20 \
  --no-eval --report "$dir/r.json" --trace "$dir/t.csv" > "$dir/out" 2> "$dir/err"
grep -q '"overflow_event_count": 20' "$dir/r.json" || { echo "expected 20 overflow events"; cat "$dir/r.json"; exit 1; }
grep -q '"phase": "backward"' "$dir/r.json" || { echo "no phase in the events"; exit 1; }
grep -q '"cell": "fc"' "$dir/r.json" || { echo "the events do not name the cell fc"; exit 1; }
grep -q '"skipped_steps": 20' "$dir/r.json" || { echo "expected 20 skipped steps"; exit 1; }
grep -q "overflow at step 1" "$dir/err" || { echo "no overflow message on stderr"; exit 1; }
# The trace names the offending op on every skipped step.
[ "$(grep -c ',cast,backward,fc$' "$dir/t.csv")" -eq 20 ] || { echo "trace lacks the offending op"; head -3 "$dir/t.csv"; exit 1; }
echo "overflow provenance ok"
