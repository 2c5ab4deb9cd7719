#!/usr/bin/python3
"""mixprec's fused attention against PyTorch's F.scaled_dot_product_attention, forward + backward,
at the shapes of bench/attention_bench.cpp (L = 128 and 512 with B * H = 16, D = 32, packed; the
zoo's gpt-tiny and vit-tiny, q, k, v as head views of one [B, L, 3, H, D] projection), in fp32 and
bf16, alternated round after round in one run.

Each round runs, in turn (the order reversed on odd rounds), one process of
  ours   attention_bench's BM_attention/fused (the op with autograd, as a user calls it: min_ms and
         med_ms over its iterations) and BM_kernel (the fused kernel's forward and backward alone);
  base   the same, with LD_LIBRARY_PATH=--base-lib (another libmixprec.so.0: the kernel before a
         change), if given;
  torch  F.scaled_dot_product_attention(q, k, v, is_causal=...) then backward of the same output
         gradient (.grad cleared each iteration), same leaves, dtypes and thread count.
Each figure is the minimum over rounds of a process's median (and, second table, of its minimum:
on a shared machine a median can hold a descheduled thread); the ratios are torch / ours (above 1:
ours is faster) and base / ours.

usage: python3 bench/attention_vs_torch.py --torch "$(bash bench/setup_torch2.sh)" \\
         [--bench build/bench/attention_bench] [--base-lib DIR] [--rounds 5] [--threads 2]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

# (name, L, bf16, causal, B, H, D, qkv): bench/attention_bench.cpp's shapes().
SHAPES = [(f"L{L} {'bf16' if dt else 'f32'} {'causal' if c else 'plain'}", L, dt, c, 4, 4, 32, 0)
          for c in (0, 1) for L in (128, 512) for dt in (0, 1)]
SHAPES += [(f"gpt-tiny {'bf16' if dt else 'f32'}", 128, dt, 1, 32, 4, 32, 1) for dt in (0, 1)]
SHAPES += [(f"vit-tiny {'bf16' if dt else 'f32'}", 50, dt, 0, 128, 4, 16, 1) for dt in (0, 1)]

TORCH_WORKER = r"""
import json, statistics, sys, time
import torch
import torch.nn.functional as F
shapes, threads, iters = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
out = {}
for name, L, bf16, causal, B, H, D, qkv in shapes:
    dt = torch.bfloat16 if bf16 else torch.float32
    g = torch.Generator().manual_seed(1)
    if qkv:
        leaves = [torch.randn(B, L, 3, H, D, generator=g).to(dt).requires_grad_()]
        p = leaves[0].permute(2, 0, 3, 1, 4)
        views = lambda: (p[0], p[1], p[2])
    else:
        leaves = [torch.randn(B, H, L, D, generator=g).to(dt).requires_grad_() for _ in range(3)]
        views = lambda: leaves
    dout = torch.randn(B, H, L, D, generator=g).to(dt)
    def step():
        for t in leaves:
            t.grad = None
        q, k, v = views()
        o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        o.backward(dout)
    for _ in range(3):
        step()
    t = []
    deadline = time.perf_counter() + 0.5
    while len(t) < iters or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        step()
        t.append(time.perf_counter() - t0)
    out[name] = {"min_ms": min(t) * 1e3, "med_ms": statistics.median(t) * 1e3}
print(json.dumps({"torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability(),
                  "times": out}))
"""


def bench_name_args(name):
    return tuple(int(x) for x in re.findall(r":(\d+)", name)[:7])


def run_ours(bench, threads, lib):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if lib:
        env["LD_LIBRARY_PATH"] = lib
    out = subprocess.run([bench, "--benchmark_filter=BM_attention/fused|BM_kernel",
                          "--benchmark_format=json"], env=env, check=True,
                         capture_output=True, text=True).stdout
    by_args = {s[1:]: s[0] for s in SHAPES}
    res = {}
    for b in json.loads(out)["benchmarks"]:
        name = by_args[bench_name_args(b["name"])]
        kind = "op" if b["name"].startswith("BM_attention") else "kernel"
        res[(name, kind)] = (b["med_ms"], b["min_ms"])
    return res


def run_torch(python, threads, iters):
    out = subprocess.run([python, "-c", TORCH_WORKER, json.dumps(SHAPES), str(threads), str(iters)],
                         check=True, capture_output=True, text=True).stdout
    info = json.loads(out.strip().splitlines()[-1])
    return info, {(k, "op"): (v["med_ms"], v["min_ms"]) for k, v in info["times"].items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/bench/attention_bench")
    ap.add_argument("--torch", required=True, help="a Python with PyTorch 2.x (bench/setup_torch2.sh)")
    ap.add_argument("--base-lib", default="", help="a folder holding another libmixprec.so.0")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    best = {}  # (side, shape, kind, statistic) -> min over rounds
    info = {}
    sides = ["ours", "torch"] + (["base"] if args.base_lib else [])
    for r in range(args.rounds):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            if side == "torch":
                info, res = run_torch(args.torch, args.threads, args.iters)
            else:
                res = run_ours(args.bench, args.threads, args.base_lib if side == "base" else "")
            for (shape, kind), stats in res.items():
                for stat, ms in zip(("median", "min"), stats):
                    key = (side, shape, kind, stat)
                    best[key] = min(best.get(key, float("inf")), ms)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    flags = open("/proc/cpuinfo").read()
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16")
           if re.search(rf"\b{f}\b", flags)]
    print(f"PyTorch {info.get('torch')} (CPU capability {info.get('capability')}), "
          f"{args.threads} threads, {args.rounds} rounds; CPU flags: {' '.join(isa)}")
    for stat in ("median", "min"):
        print(f"\nms, min over rounds of each process's {stat}:")
        head = "| shape | ours op | ours kernel | torch | torch / ours op |"
        if args.base_lib:
            head += " base op | base kernel | base / ours op | base / ours kernel |"
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for shape, *_ in SHAPES:
            o, ok, t = (best[(side, shape, kind, stat)]
                        for side, kind in (("ours", "op"), ("ours", "kernel"), ("torch", "op")))
            row = f"| {shape} | {o:.2f} | {ok:.2f} | {t:.2f} | {t / o:.2f} |"
            if args.base_lib:
                b, bk = best[("base", shape, "op", stat)], best[("base", shape, "kernel", stat)]
                row += f" {b:.2f} | {bk:.2f} | {b / o:.2f} | {bk / ok:.2f} |"
            print(row)


if __name__ == "__main__":
    main()
