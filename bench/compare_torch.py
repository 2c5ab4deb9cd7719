#!/usr/bin/python3
"""mixprec vs PyTorch on the zoo, in one run, as ratios.

For each model, interleaved so that every figure sees the same machine state:
  PyTorch 1.13 (Debian's python3-torch) fp32 and bf16 autocast, `mixprec bench` at O0 and
  O2-bf16, and, with --torch2 PYTHON (a PyTorch 2.x from PyPI, see bench/setup_torch2.sh), PyTorch
  2.x eager fp32 and bf16 autocast, and with --compile its torch.compile'd bf16 step too.
Every PyTorch figure runs in its own process (`--worker`), so that the two PyTorch versions never
share an interpreter. The networks are the zoo's, layer for layer; the optimizer is SGD momentum
0.9 on every model, as `mixprec bench` uses; transformers use F.scaled_dot_product_attention where
the PyTorch has it (2.0+), the explicit softmax composition otherwise (1.13).

fp32 GEMMs in Debian's PyTorch go through whatever libblas.so.3 the machine has: on the reference
BLAS (~2 GFLOP/s) its fp32 figures mean nothing. Each worker reports the BLAS it loaded and a
1024^3 fp32 matmul rate; fp32 figures measured on the reference BLAS are refused (reported as
null, with the reason) rather than printed. Install libopenblas0-pthread.

usage: /usr/bin/python3 bench/compare_torch.py [--models a,b] [--steps 20] [--threads 2]
       [--mixprec build/tools/mixprec] [--torch2 /path/to/venv/bin/python] [--compile] [--json out.json]
"""
import argparse, json, math, os, statistics, subprocess, sys, time

HERE = os.path.abspath(__file__)
BATCH = {"simplenet": 256, "lenet": 256, "convnet-bn": 256, "mlp": 256, "resnet-small": 64, "vit-tiny": 128,
         "gpt-tiny": 32}


# ---------------------------------------------------------------- worker (one PyTorch figure)

def networks():
    import torch, torch.nn as nn, torch.nn.functional as F

    class SimpleNet(nn.Module):  # the seed's network: Conv2d(1, 32, 3, valid, no bias), ReLU, Flatten, Dense
        def __init__(s):
            super().__init__(); s.conv1 = nn.Conv2d(1, 32, 3, bias=False); s.fc = nn.Linear(32 * 26 * 26, 10)
        def forward(s, x): return s.fc(torch.flatten(torch.relu(s.conv1(x)), 1))

    def lenet():
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))

    def convnet_bn():
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))

    class Basic(nn.Module):
        def __init__(s, cin, cout, stride):
            super().__init__()
            s.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False); s.b1 = nn.BatchNorm2d(cout)
            s.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False); s.b2 = nn.BatchNorm2d(cout)
            s.down = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        def forward(s, x):
            y = s.b2(s.c2(torch.relu(s.b1(s.c1(x)))))
            return torch.relu(y + (x if s.down is None else s.down(x)))

    def resnet_small():
        return nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                             Basic(32, 32, 1), Basic(32, 32, 1), Basic(32, 64, 2), Basic(64, 64, 1),
                             Basic(64, 128, 2), Basic(128, 128, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(128, 10))

    def mlp():
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                             nn.Linear(2048, 10))

    def attention(q, k, v, causal):  # [B, H, L, D]
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            L = q.shape[-2]; s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(s.float(), -1).to(v.dtype) @ v

    class Block(nn.Module):  # pre-norm: x + MHA(LN(x)), x + MLP(LN(x)); GELU tanh form; fused q/k/v projection
        def __init__(s, dim, heads, hidden, causal):
            super().__init__(); s.h, s.causal = heads, causal
            s.ln1, s.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            s.qkv, s.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            s.fc1, s.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        def forward(s, x):
            B, L, D = x.shape
            q, k, v = s.qkv(s.ln1(x)).view(B, L, 3, s.h, D // s.h).permute(2, 0, 3, 1, 4)
            x = x + s.o(attention(q, k, v, s.causal).transpose(1, 2).reshape(B, L, D))
            return x + s.fc2(F.gelu(s.fc1(s.ln2(x)), approximate="tanh"))

    class ViTTiny(nn.Module):  # 4x4 patches -> 49 tokens + class token, dim 64, 4 blocks of 4 heads, MLP 256
        def __init__(s):
            super().__init__()
            s.patch = nn.Conv2d(1, 64, 4, 4); s.cls = nn.Parameter(torch.zeros(1, 1, 64))
            s.pos = nn.Parameter(torch.randn(1, 50, 64) * 0.02)
            s.blocks = nn.Sequential(*[Block(64, 4, 256, False) for _ in range(4)])
            s.ln = nn.LayerNorm(64); s.head = nn.Linear(64, 10)
        def forward(s, x):
            t = s.patch(x).flatten(2).transpose(1, 2)
            t = torch.cat([s.cls.expand(x.shape[0], -1, -1), t], 1) + s.pos
            return s.head(s.ln(s.blocks(t))[:, 0])

    class GPTTiny(nn.Module):  # bytes, context 128, dim 128, 4 causal blocks of 4 heads, MLP 512
        def __init__(s):
            super().__init__()
            s.tok = nn.Embedding(256, 128); s.pos = nn.Embedding(128, 128)
            s.blocks = nn.Sequential(*[Block(128, 4, 512, True) for _ in range(4)])
            s.ln = nn.LayerNorm(128); s.head = nn.Linear(128, 256)
        def forward(s, idx):
            return s.head(s.ln(s.blocks(s.tok(idx) + s.pos(torch.arange(idx.shape[1])))))

    return {"simplenet": SimpleNet, "lenet": lenet, "convnet-bn": convnet_bn, "mlp": mlp,
            "resnet-small": resnet_small, "vit-tiny": ViTTiny, "gpt-tiny": GPTTiny}


def loaded_blas():
    """The BLAS this process mapped (after a matmul): openblas, mkl, or the reference libblas."""
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if ".so" in line}
    real = {os.path.realpath(p) for p in libs}
    if any("openblas" in p for p in real): return "openblas"
    if any("mkl" in os.path.basename(p) for p in real): return "mkl"
    if any(os.path.basename(p).startswith("libblas.so") for p in real): return "reference"
    return "built-in"  # PyPI wheels link MKL statically


def worker(model, precision, steps, threads):
    import torch, torch.nn as nn
    torch.set_num_threads(threads)
    a = torch.randn(1024, 1024); b = torch.randn(1024, 1024); a @ b
    t = time.perf_counter()
    for _ in range(5): a @ b
    gemm = 2 * 1024 ** 3 * 5 / (time.perf_counter() - t) / 1e9
    blas = loaded_blas()
    torch.manual_seed(0)
    batch = BATCH[model]
    net = networks()[model]()
    if model == "gpt-tiny":
        x = torch.randint(0, 256, (batch, 128)); y = torch.randint(0, 256, (batch * 128,))
    else:
        x = torch.randn(batch, 1, 28, 28); y = torch.randint(0, 10, (batch,))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    lossf = nn.CrossEntropyLoss()
    amp = precision != "fp32"

    def fwd(inp, target):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            out = net(inp)
            return lossf(out.reshape(-1, out.shape[-1]).float(), target)
    step_fwd = torch.compile(fwd) if precision == "bf16-compile" else fwd
    warm = 3 if precision != "bf16-compile" else 5  # compilation happens in the first calls
    times = []
    for i in range(steps + warm):
        t = time.perf_counter()
        opt.zero_grad()
        step_fwd(x, y).backward()
        opt.step()
        if i >= warm: times.append(time.perf_counter() - t)
    ms = statistics.median(times) * 1e3
    print(json.dumps({"torch": torch.__version__, "precision": precision, "step_ms": ms, "blas": blas,
                      "gemm_gflops_f32": gemm, "params": sum(p.numel() for p in net.parameters())}))


# ---------------------------------------------------------------- orchestrator

def torch_step(python, model, precision, steps, threads):
    """One PyTorch figure from a worker process: a dict, or None with the reason printed."""
    r = subprocess.run([python, HERE, "--worker", model, precision, str(steps), str(threads)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"  {python} {model} {precision}: failed: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if precision == "fp32" and out["blas"] == "reference":
        print(f"  PyTorch {out['torch']} {model} fp32 refused: it runs on the reference BLAS "
              f"({out['gemm_gflops_f32']:.1f} GFLOP/s); install libopenblas0-pthread", file=sys.stderr)
        out["step_ms"] = None
    return out


def mixprec_step(binary, name, level, steps, threads):
    out = f"/tmp/mixprec_bench_{os.getpid()}.json"
    cmd = [binary, "bench", "--model", name, "--amp-level", level, "--dtype", "bf16", "--steps", str(steps),
           "--warmup", "3", "--threads", str(threads), "--report", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def ratio(a, b):
    return None if a is None or b is None else a / b


def fmt(v, unit=""):
    return "—" if v is None else (f"{v:.1f} ms" if unit == "ms" else f"{v:.2f}x")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default=",".join(BATCH))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mixprec", default="build/tools/mixprec")
    p.add_argument("--torch1", default="/usr/bin/python3", help="a Python with Debian's PyTorch 1.13")
    p.add_argument("--torch2", default="", help="a Python with PyTorch 2.x (bench/setup_torch2.sh)")
    p.add_argument("--compile", action="store_true", help="also time torch.compile'd bf16 steps (PyTorch 2.x)")
    p.add_argument("--json", default="")
    a = p.parse_args()
    rows = []
    for m in a.models.split(","):
        if m not in BATCH: sys.exit(f"compare_torch: unknown model '{m}'; valid: {','.join(BATCH)}")
        t1_32 = torch_step(a.torch1, m, "fp32", a.steps, a.threads)
        o0 = mixprec_step(a.mixprec, m, "O0", a.steps, a.threads)
        t1_16 = torch_step(a.torch1, m, "bf16-autocast", a.steps, a.threads)
        o2 = mixprec_step(a.mixprec, m, "O2", a.steps, a.threads)
        t2_32 = t2_16 = t2_c = None
        if a.torch2:
            t2_32 = torch_step(a.torch2, m, "fp32", a.steps, a.threads)
            t2_16 = torch_step(a.torch2, m, "bf16-autocast", a.steps, a.threads)
            if a.compile: t2_c = torch_step(a.torch2, m, "bf16-compile", a.steps, a.threads)
        ms = lambda r: None if r is None else r["step_ms"]
        O0, O2 = o0["step_ms_median"], o2["step_ms_median"]
        row = {"model": m, "batch": BATCH[m], "mixprec_O0_ms": O0, "mixprec_O2_bf16_ms": O2, "O2_vs_O0": O0 / O2,
               "torch1": t1_32 and t1_32["torch"], "torch1_blas": t1_32 and t1_32["blas"],
               "torch1_gemm_gflops_f32": t1_32 and t1_32["gemm_gflops_f32"],
               "torch1_fp32_ms": ms(t1_32), "torch1_bf16_ms": ms(t1_16),
               "torch2": t2_32 and t2_32["torch"], "torch2_fp32_ms": ms(t2_32), "torch2_bf16_ms": ms(t2_16),
               "torch2_compile_bf16_ms": ms(t2_c),
               "O0_vs_torch1_fp32": ratio(ms(t1_32), O0), "O2_vs_torch1_bf16": ratio(ms(t1_16), O2),
               "O0_vs_torch2_fp32": ratio(ms(t2_32), O0), "O2_vs_torch2_bf16": ratio(ms(t2_16), O2),
               "O2_vs_torch2_compile_bf16": ratio(ms(t2_c), O2),
               "O2_efficiency": o2["efficiency"], "activation_O2_over_O0":
                   o2["activation_memory_bytes"] / max(1, o0["activation_memory_bytes"]),
               "mixprec_gemm_gflops_f32": o0["gemm_gflops_measured"],
               "mixprec_gemm_gflops_bf16": o2["gemm_gflops_measured"]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print("| model (batch) | mixprec O0 | O2-bf16 | O2/O0 | torch 1.13 fp32 | bf16 | O0 vs fp32 | O2 vs bf16 "
          "| torch 2 fp32 | bf16 | compile bf16 | O0 vs fp32 | O2 vs bf16 | O2 vs compile | activations O2/O0 |")
    print("|---" * 16 + "|")
    for r in rows:
        print(f"| {r['model']} ({r['batch']}) | {fmt(r['mixprec_O0_ms'], 'ms')} | {fmt(r['mixprec_O2_bf16_ms'], 'ms')} "
              f"| {fmt(r['O2_vs_O0'])} | {fmt(r['torch1_fp32_ms'], 'ms')} | {fmt(r['torch1_bf16_ms'], 'ms')} "
              f"| {fmt(r['O0_vs_torch1_fp32'])} | {fmt(r['O2_vs_torch1_bf16'])} | {fmt(r['torch2_fp32_ms'], 'ms')} "
              f"| {fmt(r['torch2_bf16_ms'], 'ms')} | {fmt(r['torch2_compile_bf16_ms'], 'ms')} "
              f"| {fmt(r['O0_vs_torch2_fp32'])} | {fmt(r['O2_vs_torch2_bf16'])} | {fmt(r['O2_vs_torch2_compile_bf16'])} "
              f"| {r['activation_O2_over_O0']:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
