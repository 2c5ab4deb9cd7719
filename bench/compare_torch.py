#!/usr/bin/python3
"""mixprec vs PyTorch (Debian python3-torch 1.13) on the zoo, in one run, as ratios.

For each model: PyTorch fp32 and bf16-autocast steps (SGD momentum 0.9, same batch, same thread
count), then `mixprec bench` at O0 and O2-bf16, interleaved so both see the same machine state.
The PyTorch networks are the zoo's, layer for layer (they follow ../shared/peer/torch_peer.py,
except that simplenet's conv has no bias, as the seed's MindSpore Conv2d has none).

usage: /usr/bin/python3 bench/compare_torch.py [--models a,b] [--steps 20] [--threads 2]
       [--mixprec build/tools/mixprec] [--json out.json]
"""
import argparse, json, statistics, subprocess, sys, time, os

import torch
import torch.nn as nn


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
                         nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


class Basic(nn.Module):
    def __init__(s, cin, cout, stride):
        super().__init__()
        s.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False); s.b1 = nn.BatchNorm2d(cout)
        s.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False); s.b2 = nn.BatchNorm2d(cout)
        s.down = None if stride == 1 and cin == cout else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
    def forward(s, x):
        y = s.b2(s.c2(torch.relu(s.b1(s.c1(x)))))
        return torch.relu(y + (x if s.down is None else s.down(x)))


def resnet_small():
    return nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                         Basic(32, 32, 1), Basic(32, 32, 1), Basic(32, 64, 2), Basic(64, 64, 1),
                         Basic(64, 128, 2), Basic(128, 128, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))


MODELS = {"simplenet": (SimpleNet, 256), "lenet": (lenet, 256), "convnet-bn": (convnet_bn, 256),
          "mlp": (mlp, 256), "resnet-small": (resnet_small, 64)}


def torch_step_ms(name, amp, steps):
    make, batch = MODELS[name]
    torch.manual_seed(0)
    net = make(); x = torch.randn(batch, 1, 28, 28); y = torch.randint(0, 10, (batch,))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9); lossf = nn.CrossEntropyLoss()
    times = []
    for i in range(steps + 3):
        t = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = lossf(net(x), y)
        loss.backward(); opt.step()
        if i >= 3: times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, sum(p.numel() for p in net.parameters())


def mixprec_step(binary, name, level, steps, threads):
    out = f"/tmp/mixprec_bench_{os.getpid()}.json"
    cmd = [binary, "bench", "--model", name, "--amp-level", level, "--dtype", "bf16", "--steps", str(steps),
           "--warmup", "3", "--threads", str(threads), "--report", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mixprec", default="build/tools/mixprec")
    p.add_argument("--json", default="")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rows = []
    for m in a.models.split(","):
        t32, nparams = torch_step_ms(m, False, a.steps)
        o0 = mixprec_step(a.mixprec, m, "O0", a.steps, a.threads)
        t16, _ = torch_step_ms(m, True, a.steps)
        o2 = mixprec_step(a.mixprec, m, "O2", a.steps, a.threads)
        row = {"model": m, "batch": MODELS[m][1], "params": nparams, "torch_fp32_ms": t32, "torch_bf16_ms": t16,
               "mixprec_O0_ms": o0["step_ms_median"], "mixprec_O2_bf16_ms": o2["step_ms_median"],
               "O0_vs_torch_fp32": t32 / o0["step_ms_median"], "O2_vs_torch_bf16": t16 / o2["step_ms_median"],
               "O2_vs_O0": o0["step_ms_median"] / o2["step_ms_median"],
               "O2_efficiency": o2["efficiency"], "O2_floor_ms": o2["floor_ms"],
               "activation_O2_over_O0": o2["activation_memory_bytes"] / max(1, o0["activation_memory_bytes"]),
               "gemm_gflops_f32": o0["gemm_gflops_measured"], "gemm_gflops_bf16": o2["gemm_gflops_measured"],
               "bandwidth_gbs": o2["bandwidth_gbs_measured"]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print("| model (batch) | torch fp32 | mixprec O0 | speed-up | torch bf16 | mixprec O2-bf16 | speed-up | O2 vs O0 | O2 efficiency | activations O2/O0 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} ({r['batch']}) | {r['torch_fp32_ms']:.1f} ms | {r['mixprec_O0_ms']:.1f} ms | {r['O0_vs_torch_fp32']:.2f}x "
              f"| {r['torch_bf16_ms']:.1f} ms | {r['mixprec_O2_bf16_ms']:.1f} ms | {r['O2_vs_torch_bf16']:.2f}x "
              f"| {r['O2_vs_O0']:.2f}x | {r['O2_efficiency']:.2f} | {r['activation_O2_over_O0']:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
