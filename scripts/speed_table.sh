#!/usr/bin/env bash
# Training throughput of every zoo model at O0 and O2-bf16, measured back to back in one run
# (samples per second from `mixprec train --report`, real Fashion-MNIST, data loading included).
# Usage: bash scripts/speed_table.sh [STEPS]   (default 300 steps per run, batch 256)
set -euo pipefail
cd "$(dirname "$0")/.."
M=${MIXPREC:-./build/tools/mixprec}
steps=${1:-300}
out=runs/speed
mkdir -p "$out"
echo "| model | O0 samples/s | O2-bf16 samples/s | O2 / O0 |"
echo "|---|---|---|---|"
for model in simplenet lenet convnet-bn mlp resnet-small; do
  batch=256; [ "$model" = resnet-small ] && batch=64
  for level in O0 O2; do
    $M train --model "$model" --amp-level "$level" --dtype bf16 --batch-size "$batch" --max-steps "$steps" \
      --epochs 10 --no-eval --print-every 100000 --report "$out/$model-$level.json" > /dev/null
  done
  python3 - "$out/$model-O0.json" "$out/$model-O2.json" "$model" <<'PY'
import json, sys
a, b = (json.load(open(p))["samples_per_second"] for p in sys.argv[1:3])
print(f"| {sys.argv[3]} | {a:.0f} | {b:.0f} | {b / a:.2f}x |")
PY
done
