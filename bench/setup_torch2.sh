#!/usr/bin/env bash
# A PyTorch 2.x from PyPI for bench/compare_torch.py --torch2, in its own virtual environment, for
# CPU runs only: PyPI's torch wheel is a CUDA build, so it needs a few NVIDIA libraries to load
# (cufile, cuSPARSELt, NVSHMEM, NCCL) even when no GPU is used; the multi-GB rest of its CUDA
# dependencies (and triton) is not installed. Prints the Python to pass as --torch2.
# usage: bash bench/setup_torch2.sh [VENV_DIR]   (default: build/torch2-venv)
set -euo pipefail
venv=${1:-build/torch2-venv}
python3 -m venv "$venv"
"$venv/bin/pip" install -q --no-deps torch
"$venv/bin/pip" install -q --no-deps nvidia-cufile nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 nvidia-nccl-cu13
"$venv/bin/pip" install -q filelock typing_extensions sympy networkx jinja2 fsspec numpy
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
libs=$(find "$site/nvidia" -name lib -type d | tr '\n' ':')
cat > "$venv/bin/python-torch2" <<WRAP
#!/bin/sh
# PyTorch 2.x on the CPU: the NVIDIA libraries its CUDA wheel links against, then the venv's Python.
LD_LIBRARY_PATH="$libs\${LD_LIBRARY_PATH:-}" exec "$(cd "$venv" && pwd)/bin/python" "\$@"
WRAP
chmod +x "$venv/bin/python-torch2"
"$venv/bin/python-torch2" -c 'import torch; print("PyTorch", torch.__version__, "CPU capability", torch.backends.cpu.get_cpu_capability())' >&2
echo "$(cd "$venv" && pwd)/bin/python-torch2"
