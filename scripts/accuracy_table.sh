#!/usr/bin/env bash
# Reproduces docs/accuracy.md: trains one model at every AMP level with the same seed and prints a
# markdown table: test accuracy (image models) or validation bits per byte (gpt-tiny), the
# difference from O0, skipped steps, final loss scale, throughput and peak memory.
# Usage: bash scripts/accuracy_table.sh [MODEL] [EPOCHS] [-- EXTRA TRAIN FLAGS...]
#   defaults: convnet-bn 3; e.g. `bash scripts/accuracy_table.sh gpt-tiny 1 -- --train-samples 16000`
# Environment: THREADS (per run, default 2), JOBS (runs at once, default 1: with JOBS=2 THREADS=1
# two runs share a 2-core machine), CONFIGS (extra "name|flags" lines, e.g. the pitfall below).
# Each run writes runs/accuracy/<model>-<config>.json (the full `mixprec train --report`) and .log.
# gpt-tiny adds two f16 configurations for the seed's softmax pitfall: O1 with its default lists
# (attention's softmax in fp32) and the same with attention_softmax forced into f16.
set -euo pipefail
cd "$(dirname "$0")/.."
M=${MIXPREC:-./build/tools/mixprec}
model=${1:-convnet-bn}
epochs=${2:-3}
shift $(($# >= 2 ? 2 : $#))
[ "${1:-}" = "--" ] && shift
extra=("$@")
threads=${THREADS:-2}
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
if [ "$model" = gpt-tiny ]; then
  configs+=("O1-f16-dynamic|--amp-level O1 --dtype f16 --loss-scale dynamic"
            "softmax-f16-dynamic|--white-list Dense,scaled_dot_product_attention,attention_softmax --dtype f16 --loss-scale dynamic")
fi
while IFS= read -r c; do [ -n "$c" ] && configs+=("$c"); done <<< "${CONFIGS:-}"

run_one() {  # name|flags
  local name=${1%%|*} flags=${1#*|}
  echo "== $model $name: $M train --model $model --epochs $epochs --seed 1 --threads $threads ${extra[*]} $flags" >&2
  # shellcheck disable=SC2086
  $M train --model "$model" --epochs "$epochs" --seed 1 --threads "$threads" --print-every 100 "${extra[@]}" $flags \
    --report "$out/$model-$name.json" > "$out/$model-$name.log" 2>&1 || echo "== $model $name failed: $out/$model-$name.log" >&2
}
running=0
for c in "${configs[@]}"; do
  run_one "$c" &
  running=$((running + 1))
  if [ "$running" -ge "${JOBS:-1}" ]; then wait -n || true; running=$((running - 1)); fi
done
wait

python3 - "$out" "$model" "${configs[@]}" <<'PY'
import json, math, os, sys
out, model, names = sys.argv[1], sys.argv[2], [c.split("|")[0] for c in sys.argv[3:]]

def evaluation(r):  # (value, label): accuracy for images, bits per byte for a language model
    last = r["epoch_metrics"][-1] if r.get("epoch_metrics") else {}
    if "test_bits_per_byte" in last: return last["test_bits_per_byte"], "bpb"
    if r.get("test_accuracy") is not None: return r["test_accuracy"], "acc"
    return float("nan"), "?"

rows, base = [], None
for name in names:
    p = os.path.join(out, f"{model}-{name}.json")
    if not os.path.exists(p):
        rows.append((name, None)); continue
    r = json.load(open(p))
    if name == "O0-f32": base = evaluation(r)[0]
    rows.append((name, r))
lm = model == "gpt-tiny"
head = "validation bits per byte | vs O0" if lm else "test accuracy | vs O0 (points)"
print(f"| config | {head} | skipped steps | final loss scale | overflow events | samples/s | peak memory (MB) |")
print("|---|---|---|---|---|---|---|---|")
for name, r in rows:
    if r is None:
        print(f"| {name} | failed (see {out}/{model}-{name}.log) |||||||"); continue
    v, _ = evaluation(r)
    d = (f"{100 * (v / base - 1):+.2f}%" if lm else f"{100 * (v - base):+.2f}") if base else "—"
    print(f"| {name} | {v:.4f} | {d} | {r['skipped_steps']} | {r['loss_scale_final']:g} | "
          f"{r.get('overflow_event_count', 0)} | {r['samples_per_second']:.0f} | {r['peak_memory_bytes'] / 1e6:.1f} |")
PY
