#!/usr/bin/env bash
# --mode graph trains exactly as --mode pynative: convnet-bn (BatchNorm, max pooling) at O2-f16 with
# a dynamic scale that overflows on the first steps and grows every 2 clean ones; the checkpoints
# are byte-identical, the per-step traces (loss, scale, skips, cast telemetry) equal, and the
# report shows that the graph run replayed its plan. An unknown mode is refused.
set -uo pipefail
source "$(dirname "$0")/common.sh"
make_tiny_data "$dir/data" 64
common=(train --data "$dir/data" --model convnet-bn --amp-level O2 --dtype f16 --loss-scale dynamic:1048576,2,2
        --batch-size 8 --max-steps 8 --no-eval --threads 2)
for mode in pynative graph; do
  "$M" "${common[@]}" --mode "$mode" --checkpoint "$dir/$mode.safetensors" --trace "$dir/$mode.csv" \
    --report "$dir/$mode.json" > /dev/null || fail "--mode $mode run"
done
cmp -s "$dir/pynative.safetensors" "$dir/graph.safetensors" || fail "the graph run's checkpoint differs"
cmp -s "$dir/pynative.csv" "$dir/graph.csv" || fail "the traces differ: $(diff "$dir/pynative.csv" "$dir/graph.csv")"
grep -q ',1,1,' "$dir/graph.csv" || fail "no step overflowed and was skipped: $(cat "$dir/graph.csv")"
grep -q '"mode": "graph"' "$dir/graph.json" || fail "the report does not name the mode"
grep -q '"replays": 6' "$dir/graph.json" || fail "expected 6 replayed steps: $(grep -A8 graph_mode "$dir/graph.json")"
expect_error "unknown execution mode 'eager'" train --data "$dir/data" --mode eager
echo "graph mode trains bit-identically to pynative"
