#!/usr/bin/env bash
# Makes the venv that the MindSpore conformance suite (tests/mindspore, CTest label `mindspore`)
# runs MindSpore in: /usr/bin/python3 (Debian's 3.11) with MindSpore's CPU wheel and numpy from
# PyPI. MindSpore is never a dependency of mixprec: only that suite imports it, and without this
# venv the suite reports "not run".
#
#   scripts/setup_mindspore.sh [VENV]      # default: build/mindspore-venv
#
# The version is pinned: the suite's expected-difference table (tests/mindspore/expected.py) was
# measured against it. MINDSPORE_VERSION=... overrides it (then expect the table to need review).
# numpy is pinned below 2: MindSpore 2.10's compiled kernels were built against numpy 1.x and its
# softmax fails ("A module that was compiled using NumPy 1.x cannot be run in NumPy 2") with 2.x.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$root/build/mindspore-venv}
version=${MINDSPORE_VERSION:-2.10.0}
python=/usr/bin/python3

if ! "$python" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
  echo "setup_mindspore.sh: $python must be Python 3.11 (MindSpore ${version}'s cp311 wheel)" >&2
  exit 1
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "setup_mindspore.sh: the pinned MindSpore CPU wheel is for x86_64 Linux" >&2
  exit 1
fi
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "setup_mindspore.sh: $python lacks venv/ensurepip: apt-get install python3-venv" >&2
  exit 1
fi

if [ ! -x "$venv/bin/python3" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python3" -m pip install --disable-pip-version-check -q "mindspore==$version" "numpy==1.26.4"
"$venv/bin/python3" -c 'import mindspore, numpy; print("mindspore", mindspore.__version__, "numpy", numpy.__version__)'
echo "setup_mindspore.sh: $venv is ready; run: ctest --test-dir build -L mindspore --output-on-failure"
