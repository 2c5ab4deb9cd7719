#!/usr/bin/python3
"""mixprec's best against PyTorch's best, per zoo model, in one run: the benchmark that cannot flatter us.

For each model, every configuration of both sides is timed once per round, round after round
(odd rounds in reverse order, so that neither side always runs first), and each configuration's
figure is the minimum over rounds of its median step time:
  mixprec     `mixprec bench` at O0, O2-bf16 and O2-f16, each in pynative and in graph mode;
              one fresh process per configuration and round.
  PyTorch 2.x (--torch2, from bench/setup_torch2.sh) in fp32, bf16 autocast and f16 autocast,
              eager and torch.compile'd (unless --no-compile).
  PyTorch 1.x (--torch1, Debian's python3-torch 1.13) in fp32, bf16 and f16 autocast, eager
              only; skipped when that Python has no torch.
Each row then sets mixprec's fastest configuration against PyTorch's fastest, whatever their
precisions: "best vs best" is PyTorch's ms over mixprec's ms.

What keeps the comparison honest:
- Every PyTorch figure has its own process (`--worker`), kept alive across rounds so that
  torch.compile compiles once: between its turns it waits on a pipe, and the CPU time each idle
  worker (with its children) uses while any other configuration is timed is measured; a share
  above IDLE_CPU_WARN of one core is printed as a warning and recorded in the JSON.
- A PyTorch configuration whose step takes more than SLOW_FACTOR x its own version's eager fp32
  step in the first round (an emulated or fallback path, e.g. f16 autocast convolutions on a
  CPU without native f16) is reported as "emulated/slow: Nx fp32" and not timed further, so
  that a speed-up over it never counts; so is a PyTorch whose CPU autocast does not support a
  precision (1.13 and f16). torch.compile failures are reported per configuration.
- fp32 GEMMs in Debian's PyTorch go through whatever libblas.so.3 the machine has; on the
  reference BLAS (~2 GFLOP/s) its fp32 figures mean nothing. Each worker reports the BLAS it
  loaded and a 1024^3 fp32 matmul rate; fp32 figures measured on the reference BLAS are refused
  (install libopenblas0-pthread).
- A mixprec figure whose run skipped updates in timed steps (its dynamic loss scale starts at
  2^24; an f16 step that overflows skips the optimizer) is refused: a skipped step is cheaper.
  Its O2-f16 runs get MIXPREC_F16_WARMUP untimed steps so that the scale settles first.
- Both sides run the same work: the zoo's networks layer for layer (defined below), the default
  batches (BATCH), synthetic data, the same thread count, WARMUP untimed steps before each
  round's timed steps, and each model's training optimizer, which `mixprec bench` takes from the
  zoo registry as `mixprec train` does (RECIPE; each mixprec report's recipe is checked against
  it): Momentum(lr 0.01, momentum 0.9) against torch.optim.SGD(lr=0.01, momentum=0.9), AdamW
  against torch.optim.AdamW with the same rate and weight decay, gpt-tiny's clipping at global
  norm 1 against clip_grad_norm_, mean softmax cross-entropy on fp32 logits. PyTorch's f16 steps run without a
  GradScaler (mixprec's O2 steps do scale, unscale and check): the peer gets the benefit of the
  doubt. Transformers use F.scaled_dot_product_attention where the PyTorch has it (2.0+), the
  explicit softmax composition otherwise.

usage: /usr/bin/python3 bench/compare_torch.py [--models a,b] [--rounds 3] [--steps 20] [--threads 2]
       [--mixprec build/tools/mixprec] [--torch2 PYTHON|none] [--torch1 PYTHON|none] [--no-compile]
       [--json out.json] [--quick]
"""
import argparse
import json
import math
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.abspath(__file__)
BATCH = {"simplenet": 256, "lenet": 256, "convnet-bn": 256, "mlp": 256, "resnet-small": 64, "vit-tiny": 128,
         "gpt-tiny": 32}
# Each model's training optimizer (src/nn/zoo.cpp, the registry): (name, lr, weight decay, max grad norm).
RECIPE = {m: ("Momentum", 0.01, 0.0, 0.0) for m in BATCH}
RECIPE.update({"vit-tiny": ("AdamW", 1e-3, 0.05, 0.0), "gpt-tiny": ("AdamW", 3e-4, 0.1, 1.0)})
QUICK_MODELS = ["simplenet", "lenet"]  # --quick: 1 round of QUICK_STEPS steps on these
QUICK_STEPS = 5
WARMUP = 5                 # untimed steps before each round's timed steps, on both sides
MIXPREC_F16_WARMUP = 16    # O2-f16: enough halvings for the dynamic loss scale (2^24) to settle
SLOW_FACTOR = 10           # a PyTorch step above this many times its own fp32 step is emulated/slow
IDLE_CPU_WARN = 0.02       # an idle worker's CPU share of a core, while another is timed, worth a warning
TIMEOUT_S = 1800           # one measurement (torch.compile included) that takes longer has failed
SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")
TORCH_PRECISIONS = {"fp32": "fp32", "bf16": "bf16 autocast", "f16": "f16 autocast"}
MIXPREC_LEVELS = {"O0": ("O0", "bf16"), "O2-bf16": ("O2", "bf16"), "O2-f16": ("O2", "f16")}


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
    """The BLAS this process mapped (after a matmul): openblas, mkl, or the reference libblas.
    numpy's own bundled OpenBLAS (PyPI's numpy.libs) is not PyTorch's and does not count."""
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if ".so" in line and "numpy.libs" not in line}
    real = {os.path.realpath(p) for p in libs}
    if any("openblas" in p for p in real): return "openblas"
    if any("mkl" in os.path.basename(p) for p in real): return "mkl"
    if any(os.path.basename(p).startswith("libblas.so") for p in real): return "reference"
    return "built-in"  # PyPI wheels link MKL statically


def make_step(torch, model, precision, compiled):
    """One training step of `model` as a function of no arguments: zero_grad, forward under the
    precision's autocast (loss in fp32 outside it), backward, the model's optimizer (RECIPE), after
    clipping where it clips."""
    import torch.nn as nn
    torch.manual_seed(0)
    batch = BATCH[model]
    net = networks()[model]()
    if model == "gpt-tiny":
        x = torch.randint(0, 256, (batch, 128)); y = torch.randint(0, 256, (batch * 128,))
    else:
        x = torch.randn(batch, 1, 28, 28); y = torch.randint(0, 10, (batch,))
    name, lr, weight_decay, max_grad_norm = RECIPE[model]
    if name == "AdamW":
        opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    lossf = nn.CrossEntropyLoss()
    dtype = {"fp32": None, "bf16": torch.bfloat16, "f16": torch.float16}[precision]
    if dtype is not None:
        # A PyTorch whose CPU autocast lacks the dtype warns and runs fp32 instead: catch it here.
        with torch.autocast("cpu", dtype=dtype):
            got = torch.nn.functional.linear(torch.ones(2, 2), torch.ones(2, 2)).dtype
        if got != dtype:
            raise RuntimeError(f"CPU autocast to {dtype} is not supported by this PyTorch (it ran {got})")

    def forward_loss(inp, target):
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            out = net(inp)
        return lossf(out.reshape(-1, out.shape[-1]).float(), target)
    if compiled:
        if not hasattr(torch, "compile"):
            raise RuntimeError(f"PyTorch {torch.__version__} has no torch.compile")
        forward_loss = torch.compile(forward_loss)

    def step():
        opt.zero_grad(set_to_none=True)
        forward_loss(x, y).backward()
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(net.parameters(), max_grad_norm)
        opt.step()
    return step, sum(p.numel() for p in net.parameters())


def time_steps(step, warmup, steps, limit_ms):
    """`warmup` untimed steps, then the median of `steps` timed ones in ms; stops early, as slow,
    when the first two timed steps both exceed `limit_ms`."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append((time.perf_counter() - t) * 1e3)
        if limit_ms is not None and len(times) == 2 and min(times) > limit_ms:
            break
    return {"step_ms": statistics.median(times), "timed_steps": len(times)}


def first_line(e):
    """A short, one-line description of an exception (inductor's run to pages)."""
    text = f"{type(e).__name__}: {e}".strip().splitlines()[0]
    return text[:240]


def worker(model, precision, variant, threads):
    """One PyTorch configuration: says it is ready (or why not) on stdout, then answers each
    request line {"warmup", "steps", "limit_ms"} on stdin with one JSON line, until EOF."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever else prints (PyTorch's warnings, inductor) goes to stderr

    def reply(obj):
        proto.write(json.dumps(obj) + "\n"); proto.flush()
    import torch
    torch.set_num_threads(threads)
    a = torch.randn(1024, 1024); b = torch.randn(1024, 1024); a @ b
    t = time.perf_counter()
    for _ in range(5): a @ b
    info = {"torch": torch.__version__, "blas": loaded_blas(),
            "gemm_gflops_f32": 2 * 1024 ** 3 * 5 / (time.perf_counter() - t) / 1e9,
            "cpu_capability": torch.backends.cpu.get_cpu_capability()
            if hasattr(torch.backends, "cpu") and hasattr(torch.backends.cpu, "get_cpu_capability") else None}
    try:
        step, info["params"] = make_step(torch, model, precision, variant == "compile")
    except Exception as e:
        reply({"error": first_line(e), **info}); return
    reply({"ready": True, **info})
    for line in sys.stdin:
        req = json.loads(line)
        try:
            reply(time_steps(step, req["warmup"], req["steps"], req["limit_ms"]))
        except Exception as e:  # torch.compile compiles on the first call: its failures land here
            reply({"error": first_line(e)}); return


# ---------------------------------------------------------------- figures, bests, the table (pure)

@dataclass
class Figure:
    """One configuration's measurements in a run: a median step time per round it was timed."""
    side: str        # "mixprec", "torch2" or "torch1"
    precision: str   # mixprec: O0 / O2-bf16 / O2-f16; PyTorch: fp32 / bf16 / f16
    variant: str     # mixprec: pynative / graph; PyTorch: eager / compile
    version: str = ""  # PyTorch's version
    rounds_ms: list = field(default_factory=list)
    floors_ms: list = field(default_factory=list)  # mixprec: the floor its report gave, per round
    status: str = "ok"  # anything else ("failed: ...", "emulated/slow: ...", "refused: ...") is out
    notes: list = field(default_factory=list)

    @property
    def key(self):
        return f"{self.side} {self.precision} {self.variant}"

    @property
    def label(self):
        if self.side == "mixprec":
            return f"{self.precision} {self.variant}"
        return f"{self.version} {TORCH_PRECISIONS[self.precision]}" + (" compile" if self.variant == "compile" else "")

    @property
    def ms(self):
        """The figure: the minimum over rounds of the median, or None if it is out."""
        return min(self.rounds_ms) if self.status == "ok" and self.rounds_ms else None

    def floor_share(self):
        """mixprec: the floor of the round that gave the figure over the figure."""
        if self.ms is None or not self.floors_ms:
            return None
        return self.floors_ms[self.rounds_ms.index(self.ms)] / self.ms

    def as_json(self):
        return {"config": self.key, "label": self.label, "status": self.status, "ms": self.ms,
                "rounds_ms": self.rounds_ms, "floor_share": self.floor_share(), "notes": self.notes}


def plan_figures(torch_versions, compile_):
    """Every configuration of one model, in the order of a round: precision by precision,
    mixprec pynative, each PyTorch eager, mixprec graph, PyTorch 2.x compiled; so each PyTorch's
    fp32 step is timed before its other precisions in the first round. torch_versions maps
    "torch2"/"torch1" to a version for the PyTorches present."""
    figures = []
    for level, precision in zip(MIXPREC_LEVELS, TORCH_PRECISIONS):
        figures.append(Figure("mixprec", level, "pynative"))
        figures += [Figure(side, precision, "eager", version) for side, version in torch_versions.items()]
        figures.append(Figure("mixprec", level, "graph"))
        if compile_ and "torch2" in torch_versions:
            figures.append(Figure("torch2", precision, "compile", torch_versions["torch2"]))
    return figures


def round_order(figures, r):
    """Round r's order: the plan's, reversed on odd rounds so that drift favours neither side."""
    return figures if r % 2 == 0 else figures[::-1]


def slow_factor(ms, fp32_ms):
    """How many times its own fp32 step a PyTorch step takes, when that exceeds SLOW_FACTOR."""
    if ms is None or not fp32_ms:
        return None
    factor = ms / fp32_ms
    return factor if factor > SLOW_FACTOR else None


def best(figures, side):
    """The fastest figure still in whose side starts with `side` ("mixprec" or "torch"), or None."""
    timed = [f for f in figures if f.side.startswith(side) and f.ms is not None]
    return min(timed, key=lambda f: f.ms, default=None)


def summarize(model, figures):
    """One row: each side's best configuration and the ratio PyTorch ms / mixprec ms."""
    m, t = best(figures, "mixprec"), best(figures, "torch")
    return {"model": model, "batch": BATCH[model],
            "mixprec_best": m and m.label, "mixprec_ms": m and m.ms, "mixprec_floor_share": m and m.floor_share(),
            "torch_best": t and t.label, "torch_ms": t and t.ms,
            "best_vs_best": t.ms / m.ms if m and t else None,
            "configs": [f.as_json() for f in figures]}


TABLE_HEADER = ("| model (batch) | mixprec best | ms | PyTorch best | ms | best vs best | mixprec share of floor |\n"
                "|---|---|---|---|---|---|---|")


def format_row(row):
    """One markdown row of the table; a missing side or ratio shows as a dash."""
    def ms(v): return "—" if v is None else f"{v:.1f}"
    def x(v): return "—" if v is None else f"{v:.2f}x"
    share = "—" if row["mixprec_floor_share"] is None else f"{row['mixprec_floor_share']:.2f}"
    return (f"| {row['model']} ({row['batch']}) | {row['mixprec_best'] or '—'} | {ms(row['mixprec_ms'])} "
            f"| {row['torch_best'] or '—'} | {ms(row['torch_ms'])} | {x(row['best_vs_best'])} | {share} |")


def format_notes(row):
    """What left the race on this row (failures, emulated/slow paths, refusals) and its warnings."""
    lines = [f"- {row['model']}: {c['label']}: {c['status']}" for c in row["configs"] if c["status"] != "ok"]
    lines += [f"- {row['model']}: {c['label']}: {n}" for c in row["configs"] for n in c["notes"]]
    return lines


def cpu_summary(cpuinfo):
    """The CPU's model name and which of SPEED_FLAGS it has, from /proc/cpuinfo's text."""
    name, flags = "unknown", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and name == "unknown":
            name = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return {"model": name, "flags": {f: f in flags for f in SPEED_FLAGS}}


def format_cpu(cpu):
    have = " ".join(f for f, on in cpu["flags"].items() if on) or "none"
    lack = " ".join(f for f, on in cpu["flags"].items() if not on) or "none"
    return f"CPU: {cpu['model']}, {os.cpu_count()} CPUs; has: {have}; lacks: {lack}"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="mixprec's best against PyTorch's best, per zoo model, in one run.")
    p.add_argument("--models", help=f"comma-separated, of {','.join(BATCH)} (default: all)")
    p.add_argument("--rounds", type=int, help="alternated rounds; each figure is the min of its rounds' medians "
                   "(default 3)")
    p.add_argument("--steps", type=int, help="timed steps per round (the median is taken; default 20)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mixprec", default="build/tools/mixprec")
    p.add_argument("--torch2", default="build/torch2-venv/bin/python-torch2",
                   help="a Python with PyTorch 2.x (bench/setup_torch2.sh prints it), or 'none' to run without "
                        "the peer (the table then says so)")
    p.add_argument("--torch1", default="/usr/bin/python3",
                   help="a Python with Debian's PyTorch 1.13 (skipped when it has no torch), or 'none'")
    p.add_argument("--no-compile", action="store_true", help="leave out the torch.compile'd configurations")
    p.add_argument("--json", default="", help="write every configuration's figures here")
    p.add_argument("--quick", action="store_true",
                   help=f"a smoke test: 1 round of {QUICK_STEPS} steps on {','.join(QUICK_MODELS)} (unless given)")
    a = p.parse_args(argv)
    a.models = a.models.split(",") if a.models else list(QUICK_MODELS if a.quick else BATCH)
    a.rounds = a.rounds if a.rounds is not None else 1 if a.quick else 3
    a.steps = a.steps if a.steps is not None else QUICK_STEPS if a.quick else 20
    unknown = [m for m in a.models if m not in BATCH]
    if unknown:
        p.error(f"unknown model(s) {','.join(unknown)}; valid: {','.join(BATCH)}")
    if a.rounds < 1 or a.steps < 1 or a.threads < 1:
        p.error("--rounds, --steps and --threads must be at least 1")
    return a


# ---------------------------------------------------------------- orchestrator

def tree_cpu_seconds(pid):
    """User + system CPU seconds of process `pid` and its live descendants (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                total += sum(tree_cpu_seconds(int(c)) for c in f.read().split())
        return total
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


class TorchWorker:
    """The process of one PyTorch figure (see worker()), alive across rounds."""

    def __init__(self, python, model, fig, threads):
        self.stderr = tempfile.TemporaryFile("w+")
        env = dict(os.environ, OMP_NUM_THREADS=str(threads),
                   TORCHINDUCTOR_COMPILE_THREADS="1")  # no compile pool left behind to steal cycles
        self.proc = subprocess.Popen([python, HERE, "--worker", model, fig.precision, fig.variant, str(threads)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     text=True, env=env)
        self.info = self._answer()

    def _answer(self):
        ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else ""
        if line:
            return json.loads(line)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if not ready:
            return {"error": f"no answer within {TIMEOUT_S} s"}
        self.stderr.seek(0)
        tail = self.stderr.read().strip().splitlines()[-1:] or ["no message"]
        return {"error": f"worker exited ({self.proc.returncode}): {tail[0][:240]}"}

    def run(self, warmup, steps, limit_ms):
        self.proc.stdin.write(json.dumps({"warmup": warmup, "steps": steps, "limit_ms": limit_ms}) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill(); self.proc.wait()
        self.stderr.close()


class Refused(Exception):
    """A measurement that ran but must not count."""


def run_mixprec(binary, model, fig, steps, threads):
    """One `mixprec bench` process: its report (a dict); raises Refused, RuntimeError or
    subprocess.TimeoutExpired."""
    level, dtype = MIXPREC_LEVELS[fig.precision]
    warmup = MIXPREC_F16_WARMUP if fig.precision == "O2-f16" else WARMUP
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "report.json")
        r = subprocess.run([binary, "bench", "--model", model, "--amp-level", level, "--dtype", dtype,
                            "--mode", fig.variant, "--steps", str(steps), "--warmup", str(warmup),
                            "--threads", str(threads), "--report", report],
                           capture_output=True, text=True, timeout=TIMEOUT_S)
        if r.returncode != 0:
            tail = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or [f"exit {r.returncode}"]
            raise RuntimeError(tail[0][:240])
        with open(report) as f:
            j = json.load(f)
    rec = j.get("recipe", {})
    want = RECIPE[model]
    got = (rec.get("optimizer"), rec.get("lr"), rec.get("weight_decay"), rec.get("max_grad_norm"))
    if got != want:
        raise RuntimeError(f"mixprec bench --model {model} built {got}, the peer runs {want}: update RECIPE")
    # bench runs max(warmup, 2) untimed steps first; overflow skips come first, as the scale falls.
    if j["skipped_steps"] > max(warmup, 2):
        raise Refused(f"{j['skipped_steps'] - max(warmup, 2)} timed steps skipped their update (loss-scale overflow)")
    return j


class Race:
    """The rounds of one model: its figures, the PyTorch workers alive across them, and what the
    run learnt about the machine (the peers' BLAS and CPU capability, mixprec's CPU features)."""

    def __init__(self, model, args, pythons, torch_versions, peers):
        self.model, self.args, self.pythons, self.peers = model, args, pythons, peers
        self.figures = plan_figures(torch_versions, not args.no_compile)
        self.workers = {}  # figure key -> TorchWorker
        self.fp32_ms = {}  # "torch2"/"torch1" -> its eager fp32 median in the first round

    def run(self):
        try:
            for r in range(self.args.rounds):
                for fig in round_order(self.figures, r):
                    if fig.status == "ok":
                        self.time_one(fig, r)
                for fig in self.figures:  # a figure out of the race needs its worker no more
                    if fig.status != "ok" and fig.key in self.workers:
                        self.workers.pop(fig.key).close()
        finally:
            for w in self.workers.values():
                w.close()
        return self.figures

    def time_one(self, fig, r):
        """Round r's figure of `fig`, or its status set; and the idle workers' CPU meanwhile."""
        idle = {k: (w, tree_cpu_seconds(w.proc.pid)) for k, w in self.workers.items() if k != fig.key}
        start = time.perf_counter()
        ms = self.time_mixprec(fig) if fig.side == "mixprec" else self.time_torch(fig, r)
        wall = time.perf_counter() - start
        for k, (w, before) in idle.items():
            share = (tree_cpu_seconds(w.proc.pid) - before) / wall
            if share > IDLE_CPU_WARN:
                fig.notes.append(f"round {r + 1}: the idle worker of '{k}' used {share:.0%} of a core meanwhile")
        if fig.status != "ok":
            print(f"  round {r + 1}: {fig.label}: {fig.status}", flush=True)
            return
        fig.rounds_ms.append(ms)
        print(f"  round {r + 1}: {fig.label}: {ms:.1f} ms", flush=True)

    def time_mixprec(self, fig):
        try:
            j = run_mixprec(self.args.mixprec, self.model, fig, self.args.steps, self.args.threads)
        except Refused as e:
            fig.status = f"refused: {e}"; return None
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            fig.status = f"failed: {e}"; return None
        self.peers.setdefault("mixprec", {"version": j["mixprec_version"], "cpu_features": j["cpu_features"]})
        fig.floors_ms.append(j["floor_ms"])
        graph = j.get("graph")
        if graph and graph["replays"] == 0:
            note = f"graph not replayed ({graph['fallback']}): it ran eagerly"
            if note not in fig.notes:
                fig.notes.append(note)
        return j["step_ms_median"]

    def time_torch(self, fig, r):
        if fig.key not in self.workers:
            self.workers[fig.key] = TorchWorker(self.pythons[fig.side], self.model, fig, self.args.threads)
        w = self.workers[fig.key]
        if "error" in w.info:
            fig.status = f"failed: {w.info['error']}"; return None
        if fig.side not in self.peers:
            self.peers[fig.side] = {k: w.info.get(k) for k in ("torch", "blas", "gemm_gflops_f32", "cpu_capability")}
            print(f"  PyTorch {w.info['torch']}: BLAS {w.info['blas']}, fp32 GEMM {w.info['gemm_gflops_f32']:.0f} "
                  f"GFLOP/s, CPU capability {w.info['cpu_capability']}", flush=True)
        is_fp32_eager = fig.precision == "fp32" and fig.variant == "eager"
        own_fp32 = self.fp32_ms.get(fig.side) if r == 0 and not is_fp32_eager else None
        out = w.run(WARMUP, self.args.steps, own_fp32 and SLOW_FACTOR * own_fp32)
        if "error" in out:
            fig.status = f"failed: {out['error']}"; return None
        ms = out["step_ms"]
        if is_fp32_eager and r == 0:
            self.fp32_ms[fig.side] = ms  # the yardstick of the slow rule, refused or not
        factor = slow_factor(ms, own_fp32)
        if factor:
            fig.status = f"emulated/slow: {factor:.1f}x fp32"
        elif fig.precision == "fp32" and w.info["blas"] == "reference":
            fig.status = (f"refused: fp32 on the reference BLAS ({w.info['gemm_gflops_f32']:.1f} GFLOP/s); "
                          "install libopenblas0-pthread")
        return ms


def torch_version(python):
    """The torch version that `python` imports, or None."""
    if python == "none":
        return None
    try:
        r = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                           text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else None


def main(argv=None):
    args = parse_args(argv)
    with open("/proc/cpuinfo") as f:
        cpu = cpu_summary(f.read())
    print(format_cpu(cpu))
    if not os.access(args.mixprec, os.X_OK):
        sys.exit(f"compare_torch: no mixprec binary at {args.mixprec} (build it, or pass --mixprec)")
    pythons = {"torch2": args.torch2, "torch1": args.torch1}
    versions = {side: torch_version(python) for side, python in pythons.items()}
    if versions["torch2"] is None and args.torch2 != "none":
        sys.exit(f"compare_torch: {args.torch2} has no PyTorch: run `bash bench/setup_torch2.sh` and pass the Python "
                 "it prints as --torch2 (or --torch2 none, for a run without the peer that matters)")
    if versions["torch2"] and int(versions["torch2"].split(".")[0]) < 2:
        sys.exit(f"compare_torch: --torch2 {args.torch2} has PyTorch {versions['torch2']}, not 2.x")
    print(f"PyTorch 2.x: {versions['torch2'] or 'none (--torch2 none): no peer at its best'}; "
          f"Debian's PyTorch: {versions['torch1'] or 'none at ' + args.torch1}; "
          f"torch.compile: {'off (--no-compile)' if args.no_compile else 'on'}")
    print(f"{args.rounds} alternated rounds of {args.steps} timed steps (after {WARMUP} untimed), "
          f"{args.threads} threads; each figure is the min over rounds of its median", flush=True)
    torch_versions = {side: v.split("+")[0] for side, v in versions.items() if v}  # 2.15.0+cu132: 2.15.0
    rows, peers = [], {}
    for model in args.models:
        print(f"{model} (batch {BATCH[model]}):", flush=True)
        row = summarize(model, Race(model, args, pythons, torch_versions, peers).run())
        rows.append(row)
        print(format_row(row), flush=True)
    print()
    print(TABLE_HEADER)
    for row in rows:
        print(format_row(row))
    notes = [line for row in rows for line in format_notes(row)]
    if notes:
        print("\nNot in the race, and warnings:\n" + "\n".join(notes))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "peers": peers,
                       "settings": {"rounds": args.rounds, "steps": args.steps, "warmup": WARMUP,
                                    "threads": args.threads, "compile": not args.no_compile},
                       "rows": rows}, f, indent=2)


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        main()
