#!/usr/bin/env bash
# The CLI rejects bad values with a non-zero exit and a message that names the flag and the
# valid choices; --help tells the truth about the defaults.
set -uo pipefail
M="$1"
fail() { echo "FAIL: $*"; exit 1; }
expect_error() {  # expect_error "needle" args...
  local needle="$1"; shift
  out=$("$M" "$@" 2>&1) && fail "accepted: $*"
  grep -q -- "$needle" <<< "$out" || fail "no '$needle' in the error for: $* -> $out"
}
expect_error "O0, O1, O2, O3, auto" train --amp-level O7 --max-steps 1
expect_error "f16, bf16" train --dtype fp8 --max-steps 1
expect_error "fixed:S" train --loss-scale sometimes --max-steps 1
expect_error "simplenet" train --model vgg16
expect_error "momentum" train --optimizer rmsprop
expect_error "keep-batchnorm-fp32" train --keep-batchnorm-fp32 maybe --max-steps 1
expect_error "dataset-fashion-mnist" train --data /nonexistent --max-steps 1
expect_error "--resume /nonexistent: no such file" train --resume /nonexistent --max-steps 1
expect_error "--checkpoint" eval --model lenet
expect_error "cannot read\|No such" inspect /nonexistent.safetensors
expect_error "expected cpu, cuda or cuda:N" train --device gpu --max-steps 1
# --device cuda without the CUDA backend or a GPU (every CI machine): one clear error, non-zero
# exit, for each command that takes it (with both, the command runs on the GPU).
expect_error "cuda:0 is not available" train --device cuda --max-steps 1
expect_error "cuda:0 is not available" eval --model lenet --checkpoint x --device cuda
expect_error "cuda:1 is not available" bench --steps 1 --device cuda:1
# MIXPREC_DISABLE_KERNELS takes named kernels out of dispatch (MIXPREC_VERBOSE shows the reason);
# a name no kernel has is an error that lists the build's kernels.
out=$(MIXPREC_DISABLE_KERNELS=skinny_dot,direct_c1 MIXPREC_VERBOSE=1 "$M" bench --model simplenet \
      --amp-level O2 --dtype f16 --steps 1 --warmup 0 2>&1) || fail "bench with kernels disabled failed: $out"
grep -q "skinny_dot: disabled by MIXPREC_DISABLE_KERNELS" <<< "$out" || fail "no disabled reason in: $out"
grep -q "linear forward -> skinny_dot" <<< "$out" && fail "a disabled kernel ran"
out=$(MIXPREC_DISABLE_KERNELS=skinny_dott "$M" bench --steps 1 --warmup 0 2>&1) && fail "unknown kernel name accepted"
grep -q "no kernel is named 'skinny_dott'" <<< "$out" && grep -q "skinny_rows" <<< "$out" \
  || fail "unknown kernel name: unclear error: $out"
# Captured first: grep -q stops reading at the match, and with pipefail the help's writer, killed
# by SIGPIPE on a later write (help longer than the 4 KiB stdio buffer), would fail the pipeline.
help=$("$M" train --help) || fail "train --help failed"
grep -q "O2" <<< "$help" || fail "train --help does not mention the levels"
help=$("$M" --help) || fail "--help failed"
grep -q "train" <<< "$help" || fail "--help does not list train"
echo "cli errors ok"
