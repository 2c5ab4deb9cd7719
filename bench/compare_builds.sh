#!/usr/bin/env bash
# Two (or more) mixprec builds against each other, and every AMP configuration against O0, on one
# machine: for each model, REPS rounds in which every (configuration, build) pair runs
# `mixprec bench` once, so machine drift hits every cell alike; prints the best median of each
# pair, its ratio to the first build, and its speed relative to O0 of the same build.
# Usage: BINS="old:/path/to/old/mixprec new:build/tools/mixprec" bench/compare_builds.sh
# Optional: MODELS, CFGS (O0 O1 O2-bf16 O2-f16), REPS (3), STEPS (8), EXTRA (more bench flags),
# OUT (where the JSON reports go). Build names must not contain '_'.
set -euo pipefail
BINS=${BINS:-"new:$(dirname "$0")/../build/tools/mixprec"}
OUT=${OUT:-$(mktemp -d /tmp/compare_builds.XXXXXX)}
mkdir -p "$OUT"
REPS=${REPS:-3}
CFGS=${CFGS:-"O0 O1 O2-bf16 O2-f16"}
case " $CFGS " in *" O0 "*) ;; *) echo "compare_builds: CFGS must include O0 (the reference)" >&2; exit 2;; esac
for model in ${MODELS:-simplenet lenet convnet-bn mlp resnet-small}; do
  for r in $(seq "$REPS"); do
    for cfg in $CFGS; do
      lv=${cfg%%-*}; dt=${cfg#*-}; [ "$dt" = "$cfg" ] && dt=bf16
      for vb in $BINS; do
        v=${vb%%:*}; bin=${vb#*:}
        "$bin" bench --model "$model" --amp-level "$lv" --dtype "$dt" --steps "${STEPS:-8}" --warmup 3 \
          ${EXTRA:-} --report "$OUT/${model}_${cfg}_${v}_$r.json" > /dev/null 2>&1 \
          || { echo "compare_builds: $v failed on $model $cfg" >&2; exit 1; }
      done
    done
  done
done
python3 - "$OUT" "$BINS" <<'PY'
import json, glob, sys, collections, os
names = [b.split(':')[0] for b in sys.argv[2].split()]
d = collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob(sys.argv[1] + '/*.json'):
    j = json.load(open(f))
    model, cfg, v, _ = os.path.basename(f)[:-5].rsplit('_', 3)
    d[(model, cfg)][v].append((j['step_ms_median'], j['peak_memory_bytes'] / 1e6))
print("model         config   " + "".join(f"{n + ' ms':>12}{'vs O0':>7}" for n in names)
      + "".join(f"{names[0] + '/' + n:>14}" for n in names[1:]) + f"{'peak MB':>9}")
for model in sorted({k[0] for k in d}):
    o0 = {n: min(x[0] for x in d[(model, 'O0')][n]) for n in names}
    for key in sorted(k for k in d if k[0] == model):
        ms = {n: min(x[0] for x in d[key][n]) for n in names}
        print(f"{model:14}{key[1]:9}" + "".join(f"{ms[n]:12.2f}{o0[n] / ms[n]:7.2f}" for n in names)
              + "".join(f"{ms[names[0]] / ms[n]:14.2f}" for n in names[1:])
              + f"{d[key][names[-1]][0][1]:9.1f}")
PY
echo "reports: $OUT"
