#!/usr/bin/env python3
"""PyTorch beside `mixprec bench --device cuda`, on the same GPU in the same run
(scripts/device_check.sh, stage torch): every zoo model in fp32, bf16 autocast and f16 autocast
with a GradScaler (as mixprec's O0, O2-bf16 and O2-f16 with dynamic loss scaling), timed the way
`mixprec bench` times a device step, so that the first GPU figures are ratios from one run.

The same work as bench/compare_torch.py (whose networks, batches and warm-up it imports, so the
two cannot drift apart): the zoo's networks layer for layer, the default batches, synthetic
data, SGD(lr 0.01, momentum 0.9), mean softmax cross-entropy on fp32 logits. On the GPU:
torch.set_default_device("cuda") builds every module and tensor there; TF32 is off for matmuls
and convolutions (mixprec's f32 GEMMs and convolutions are exact f32 unless told otherwise);
cudnn.benchmark stays off (its default). Per configuration: WARMUP untimed steps, then --steps
steps each followed by torch.cuda.synchronize() (median and minimum: `step_ms_median`), then
--steps steps queued back to back with one synchronize at the end (`step_ms_pipelined`, as
mixprec's steps in flight). Eager only (no torch.compile: its compile time does not fit a run).

usage: python3 bench/torch_gpu_peer.py [--models a,b|all] [--steps 20] [--budget S] [--json out.json]
                                       [--device cuda]
--budget: seconds for the whole script; a configuration is not started once it is spent (it is
reported as skipped). Exit status 0 when every started configuration ran, 1 otherwise.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_torch as ct  # noqa: E402  (networks, BATCH, WARMUP: the CPU comparison's definitions)

PRECISIONS = ("fp32", "bf16", "f16")
MIXPREC_NAME = {"fp32": "O0", "bf16": "O2-bf16", "f16": "O2-f16"}


def make_step(torch, model, precision, device):
    """One training step as a function of no arguments, and the step's GradScaler (f16) or None."""
    import torch.nn as nn
    torch.manual_seed(0)
    batch = ct.BATCH[model]
    net = ct.networks()[model]()
    if model == "gpt-tiny":
        x = torch.randint(0, 256, (batch, 128)); y = torch.randint(0, 256, (batch * 128,))
    else:
        x = torch.randn(batch, 1, 28, 28); y = torch.randint(0, 10, (batch,))
    assert x.device.type == device and next(net.parameters()).device.type == device
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    lossf = nn.CrossEntropyLoss()
    dtype = {"fp32": None, "bf16": torch.bfloat16, "f16": torch.float16}[precision]
    scaler = torch.amp.GradScaler(device) if precision == "f16" else None

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            out = net(x)
        loss = lossf(out.reshape(-1, out.shape[-1]).float(), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    return step, scaler


def time_config(torch, model, precision, device, steps):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    step, scaler = make_step(torch, model, precision, device)
    for _ in range(ct.WARMUP):
        step()
    sync()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    t = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    pipelined = (time.perf_counter() - t) * 1e3 / steps
    r = {"step_ms_median": statistics.median(times), "step_ms_min": min(times), "step_ms_all": times,
         "step_ms_pipelined": pipelined, "samples_per_second": 1e3 * ct.BATCH[model] / statistics.median(times)}
    if scaler is not None:
        r["final_loss_scale"] = scaler.get_scale()
    return r


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="all", help=f"all, or a comma list of {','.join(ct.BATCH)}")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--budget", type=float, default=300, help="seconds for the whole script")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--device", default="cuda", help="cuda (the point) or cpu (to try the script without a GPU)")
    a = p.parse_args(argv)
    t0 = time.monotonic()
    models = list(ct.BATCH) if a.models == "all" else a.models.split(",")
    unknown = [m for m in models if m not in ct.BATCH]
    if unknown:
        p.error(f"unknown model(s) {unknown}; expected {list(ct.BATCH)}")
    import torch
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_gpu_peer: torch.cuda.is_available() is False: no GPU visible to PyTorch", file=sys.stderr)
        return 1
    torch.set_default_device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": a.device,
           "gpu": torch.cuda.get_device_name(0) if a.device == "cuda" else None,
           "cudnn": torch.backends.cudnn.version() if a.device == "cuda" else None,
           "allow_tf32": False, "cudnn_benchmark": torch.backends.cudnn.benchmark, "warmup": ct.WARMUP,
           "steps": a.steps}
    print(f"torch_gpu_peer: PyTorch {env['torch']} (CUDA {env['cuda']}, cuDNN {env['cudnn']}) on {env['gpu'] or a.device}")
    results, failed = [], 0
    for model in models:
        for precision in PRECISIONS:
            row = {"model": model, "precision": precision, "mixprec_peer": MIXPREC_NAME[precision],
                   "batch": ct.BATCH[model]}
            if time.monotonic() - t0 > a.budget:
                row["skipped"] = f"the budget of {a.budget:.0f} s was spent"
            else:
                try:
                    row.update(time_config(torch, model, precision, a.device, a.steps))
                    print(f"{model} {precision}: step median {row['step_ms_median']:.2f} ms (min {row['step_ms_min']:.2f}), "
                          f"in flight {row['step_ms_pipelined']:.2f} ms, {row['samples_per_second']:.0f} samples/s",
                          flush=True)
                except Exception as e:  # one configuration's failure is reported, the rest still run
                    failed += 1
                    row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    print(f"{model} {precision}: FAILED: {row['error']}", flush=True)
            results.append(row)
            if a.json:  # rewritten after every configuration: a killed run leaves what it measured
                with open(a.json + ".tmp", "w") as f:
                    json.dump({"environment": env, "results": results}, f, indent=1)
                os.replace(a.json + ".tmp", a.json)
    print(f"torch_gpu_peer: {len(results)} configurations in {time.monotonic() - t0:.0f} s, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
