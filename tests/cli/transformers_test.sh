#!/usr/bin/env bash
# `mixprec train` with the transformers (issue 15): gpt-tiny on a text file with its defaults
# (AdamW lr 3e-4, weight decay 0.1, clipping at 1), the next-byte loss falling and the validation
# loss reported in bits per byte; --accumulation-steps with f16 dynamic scaling (an overflow in a
# micro-batch skips the whole update: the scale changes only at update boundaries); and both new
# flags recorded in the checkpoint, so that a --resume with another value is refused; `mixprec
# generate` from the trained checkpoint.
set -euo pipefail
M="$1"
dir=$(mktemp -d)
# Runs compared bit for bit share this cache, and the first run's measurement stands (as in
# common.sh: a confirming second run could take other kernels).
export MIXPREC_CACHE_DIR="$dir/kernel-cache" MIXPREC_KERNEL_CHOICE=measure-once
trap 'rm -rf "$dir"' EXIT
for i in $(seq 300); do
  echo "The quick brown fox jumps over the lazy dog. Mixed precision keeps float32 where it must."
done > "$dir/text.txt"
"$M" train --model gpt-tiny --data "$dir/text.txt" --batch-size 4 --train-samples 120 --epochs 1 --threads 2 \
  --print-every 1000 --trace "$dir/t.csv" --checkpoint "$dir/gpt.safetensors" --report "$dir/r.json" > "$dir/out"
grep -qi "adamw lr 0.0003" "$dir/out" || { echo "gpt-tiny's default optimizer"; cat "$dir/out"; exit 1; }
grep -q "weight decay 0.1, gradient clipping at global norm 1, 1 batch per update" "$dir/out" ||
  { echo "gpt-tiny's default decay and clipping"; cat "$dir/out"; exit 1; }
grep -Eq "validation loss [0-9.]+ \([0-9.]+ bits per byte\)" "$dir/out" || { echo "no bits per byte"; cat "$dir/out"; exit 1; }
# Steps 1-5 against steps 26-30 (loss, column 3): the model learns the repeated sentence.
awk -F, 'NR>=2 && NR<=6 {a+=$3} NR>=27 && NR<=31 {b+=$3} END {
  if (!(b/5 < a/5 - 1.0)) { printf "loss did not fall: %.3f -> %.3f\n", a/5, b/5; exit 1 } }' "$dir/t.csv"
# The report carries the final evaluation of a language model: its loss, and in bits per byte.
grep -Eq '"test_loss": [0-9.]+' "$dir/r.json" && grep -Eq '"test_bits_per_byte": [0-9.]+' "$dir/r.json" ||
  { echo "no final evaluation in the report"; grep test_ "$dir/r.json"; exit 1; }
bpb=$(grep -Eo "\([0-9.]+ bits per byte" "$dir/out" | tail -1 | tr -d '(' | cut -d' ' -f1)
awk -v b="$bpb" 'BEGIN { if (!(b > 0 && b < 7)) { print "bits per byte " b " not below 7"; exit 1 } }'
# A resume with another --max-grad-norm is refused, naming it.
if "$M" train --model gpt-tiny --data "$dir/text.txt" --batch-size 4 --train-samples 120 --epochs 1 --threads 2 \
     --max-grad-norm 0.5 --resume "$dir/gpt.safetensors" > /dev/null 2> "$dir/err"; then
  echo "resume with another --max-grad-norm was accepted"; exit 1
fi
grep -q -- "--max-grad-norm 1" "$dir/err" || { echo "the refusal does not name --max-grad-norm"; cat "$dir/err"; exit 1; }

# A custom white list (MindSpore's custom_mixed_precision) replaces --amp-level: the seed's pitfall
# forced on purpose, the attention softmax in f16; the precision table shows attention in f16 and
# LayerNorm in fp32. It refuses --amp-level beside it and a second list.
"$M" train --model gpt-tiny --data "$dir/text.txt" --batch-size 4 --train-samples 8 --epochs 1 --threads 2 --no-eval \
  --white-list Dense,scaled_dot_product_attention,attention_softmax --dtype f16 --loss-scale dynamic \
  --show-precision > "$dir/wout" || { cat "$dir/wout"; exit 1; }
grep -q "^custom white list Dense,scaled_dot_product_attention,attention_softmax, dtype f16" "$dir/wout" ||
  { echo "no custom white list in the header"; cat "$dir/wout"; exit 1; }
grep -Eq "^blocks.0.self_attn +MultiheadAttention .* f16 " "$dir/wout" || { echo "attention not f16"; cat "$dir/wout"; exit 1; }
grep -Eq "^blocks.0.norm1 +LayerNorm +layer_norm +f32 " "$dir/wout" || { echo "LayerNorm not f32"; cat "$dir/wout"; exit 1; }
for bad in "--amp-level O1:--white-list replaces --amp-level" "--black-list softmax:pass one of them"; do
  if "$M" train --model gpt-tiny --data "$dir/text.txt" --white-list Dense ${bad%%:*} > /dev/null 2> "$dir/err"; then
    echo "--white-list with ${bad%%:*} was accepted"; exit 1
  fi
  grep -q -- "${bad#*:}" "$dir/err" || { echo "no '${bad#*:}' in: $(cat "$dir/err")"; exit 1; }
done

# generate: the prompt then --tokens bytes (past the 128-byte context), the same for the same seed.
gen=(generate --checkpoint "$dir/gpt.safetensors" --prompt "The quick" --tokens 300 --seed 3 --threads 2)
"$M" "${gen[@]}" > "$dir/g1" 2> "$dir/gerr"
"$M" "${gen[@]}" > "$dir/g2" 2> /dev/null
cmp "$dir/g1" "$dir/g2" || { echo "generate is not a function of the seed"; exit 1; }
[ "$(head -c 9 "$dir/g1")" = "The quick" ] || { echo "generate does not start with the prompt"; exit 1; }
[ "$(wc -c < "$dir/g1")" -eq 310 ] || { echo "expected 9 + 300 bytes and a newline"; wc -c "$dir/g1"; exit 1; }
grep -q "generated 300 bytes in" "$dir/gerr" || { echo "no timing line"; cat "$dir/gerr"; exit 1; }

# Accumulation over 2 micro-batches with f16 and a scale so large that every one overflows:
# each update is skipped whole, and the scale halves once per update (rows 1-2: 2^60, 3-4: 2^59).
data=/usr/share/datasets/fashion-mnist
if [ ! -e "$data/train-labels-idx1-ubyte.gz" ] && [ ! -e "$data/train-labels-idx1-ubyte" ]; then
  echo "Fashion-MNIST not installed: the accumulation part is skipped"; exit 0
fi
"$M" train --model lenet --train-samples 64 --batch-size 16 --epochs 1 --no-eval --threads 2 --amp-level O2 \
  --dtype f16 --loss-scale dynamic:1152921504606846976,2,1000 --accumulation-steps 2 \
  --trace "$dir/a.csv" --report "$dir/a.json" > "$dir/aout" 2>&1
cut -d, -f4,5 "$dir/a.csv" > "$dir/scales"
printf 'scale,skipped\n1.15292e+18,0\n1.15292e+18,1\n5.76461e+17,0\n5.76461e+17,1\n' > "$dir/want"
diff "$dir/want" "$dir/scales" || { echo "scale/skip per micro-batch"; cat "$dir/a.csv"; exit 1; }
echo "transformers from the command line ok"
