#!/usr/bin/env bash
# Reproduces docs/accuracy.md: trains on Fashion-MNIST at every AMP level with the same seed and
# prints a markdown table of test accuracy, skipped steps, final loss scale and throughput.
# Usage: bash scripts/accuracy_table.sh [MODEL] [EPOCHS]   (defaults: convnet-bn 3)
# Each run writes runs/accuracy/<model>-<config>.json (the full `mixprec train --report`).
set -euo pipefail
cd "$(dirname "$0")/.."
M=${MIXPREC:-./build/tools/mixprec}
model=${1:-convnet-bn}
epochs=${2:-3}
out=runs/accuracy
mkdir -p "$out"
configs=(
  "O0-f32|--amp-level O0"
  "O1-bf16|--amp-level O1 --dtype bf16"
  "O2-bf16|--amp-level O2 --dtype bf16"
  "O2-f16-dynamic|--amp-level O2 --dtype f16 --loss-scale dynamic"
  "auto-bf16|--amp-level auto --dtype bf16"
  "O3-bf16|--amp-level O3 --dtype bf16"
)
for c in "${configs[@]}"; do
  name=${c%%|*}
  flags=${c#*|}
  echo "== $model $name: $M train --model $model --epochs $epochs --seed 1 --threads 2 $flags" >&2
  # shellcheck disable=SC2086
  $M train --model "$model" --epochs "$epochs" --seed 1 --threads 2 --print-every 1000 $flags \
    --report "$out/$model-$name.json" > "$out/$model-$name.log" 2>&1
done
python3 - "$out" "$model" <<'PY'
import json, sys, glob, os
out, model = sys.argv[1], sys.argv[2]
rows = []
base = None
for name in ["O0-f32", "O1-bf16", "O2-bf16", "O2-f16-dynamic", "auto-bf16", "O3-bf16"]:
    p = os.path.join(out, f"{model}-{name}.json")
    if not os.path.exists(p): continue
    r = json.load(open(p))
    if name == "O0-f32": base = r["test_accuracy"]
    rows.append((name, r))
print(f"| config | test accuracy | vs O0 (points) | skipped steps | final loss scale | samples/s | peak memory (MB) |")
print("|---|---|---|---|---|---|---|")
for name, r in rows:
    d = 100 * (r["test_accuracy"] - base) if base is not None else float("nan")
    print(f"| {name} | {r['test_accuracy']:.4f} | {d:+.2f} | {r['skipped_steps']} | {r['loss_scale_final']:g} | "
          f"{r['samples_per_second']:.0f} | {r['peak_memory_bytes']/1e6:.1f} |")
PY
