#!/usr/bin/env bash
# Data parallel on this machine (docs/performance.md, "Data parallel"): convnet-bn at O2-bf16 with
# a global batch of 256, one process of 2 threads against `mpirun -np 2` ranks of 1 thread.
#   throughput [STEPS]: STEPS steps without evaluation (default 60), the variants of the 2-rank run
#     (no overlap, 0.25 MB buckets with and without overlap, bf16 all-reduce, unbound ranks)
#     alternated with the 1-process run, twice; samples/s and the communication figures.
#   accuracy: 3 epochs each of 1 process, 2 ranks, 2 ranks with the bf16 all-reduce; test
#     accuracy after every epoch and the wall time.
# As root, mpirun needs --allow-run-as-root; --oversubscribe lets it start 2 ranks whatever it
# counts as slots. Outputs in runs/data_parallel/.
set -euo pipefail
cd "$(dirname "$0")/.."
M=${MIXPREC:-./build/tools/mixprec}
MPI=(mpirun --allow-run-as-root --oversubscribe -np 2)
mode=${1:-throughput}
out=runs/data_parallel/$mode
mkdir -p "$out"
export OMP_WAIT_POLICY=passive
one() { "$M" train "$@" --batch-size 256 --threads 2; }
two() { "${MPI[@]}" "$M" train "$@" --batch-size 128; }
two_unbound() { "${MPI[@]}" --bind-to none "$M" train "$@" --batch-size 128; }

if [ "$mode" = throughput ]; then
  common=(--model convnet-bn --amp-level O2 --dtype bf16 --max-steps "${2:-60}" --no-eval --print-every 100000)
  for round in 1 2; do
    one "${common[@]}" --report "$out/one_$round.json" > /dev/null
    two "${common[@]}" --report "$out/two_$round.json" > /dev/null
    two "${common[@]}" --no-grad-overlap --report "$out/two_nooverlap_$round.json" > /dev/null
    two "${common[@]}" --grad-bucket-mb 0.25 --report "$out/two_small_$round.json" > /dev/null
    two "${common[@]}" --grad-bucket-mb 0.25 --no-grad-overlap --report "$out/two_small_nooverlap_$round.json" > /dev/null
    two "${common[@]}" --grad-allreduce-dtype bf16 --report "$out/two_bf16_$round.json" > /dev/null
    two_unbound "${common[@]}" --report "$out/two_unbound_$round.json" > /dev/null
  done
  python3 - "$out" <<'PY'
import glob, json, os, sys
print("| run | samples/s | wait s | sync s | waiting share | bytes reduced when backward ended |")
print("|---|---|---|---|---|---|")
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j, name = json.load(open(f)), os.path.basename(f)[:-5]
    d = j.get("data_parallel")
    extra = (f"{d['wait_seconds']:.2f} | {d['sync_seconds']:.2f} | {d['wait_share_of_training']:.3f} | "
             f"{d['bytes_done_before_backward_ended']:.2f}") if d else "| | |"
    print(f"| {name} | {j['samples_per_second']:.0f} | {extra} |")
PY
elif [ "$mode" = accuracy ]; then
  common=(--model convnet-bn --amp-level O2 --dtype bf16 --epochs 3 --print-every 100000)
  for run in one two two_bf16; do
    args=("${common[@]}" --report "$out/$run.json")
    start=$(date +%s)
    case $run in
      one) one "${args[@]}" > /dev/null ;;
      two) two "${args[@]}" > /dev/null ;;
      two_bf16) two "${args[@]}" --grad-allreduce-dtype bf16 > /dev/null ;;
    esac
    echo $(($(date +%s) - start)) > "$out/$run.seconds"
  done
  python3 - "$out" <<'PY'
import json, sys
print("| run | ranks x batch | test accuracy after epochs 1, 2, 3 | final train loss | wall s |")
print("|---|---|---|---|---|")
for run in ["one", "two", "two_bf16"]:
    j = json.load(open(f"{sys.argv[1]}/{run}.json"))
    acc = ", ".join(f"{e['test_accuracy']:.4f}" for e in j["epoch_metrics"])
    wall = open(f"{sys.argv[1]}/{run}.seconds").read().strip()
    print(f"| {run} | {j['ranks']} x {j['batch_size']} | {acc} | {j['train_loss']:.4f} | {wall} |")
PY
else
  echo "usage: $0 throughput [STEPS] | accuracy" >&2
  exit 2
fi
