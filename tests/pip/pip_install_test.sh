#!/usr/bin/env bash
# ctest pip.install (labels python;slow): `pip install .` as a user runs it. A fresh venv of
# Debian's /usr/bin/python3 (python3-venv), `pip install .` of this source tree into it (a clean
# build of the library and the module only, through pyproject.toml's scikit-build-core, against
# the Debian packages scripts/setup.sh installs), then, from another folder and without
# PYTHONPATH: `import mixprec` finds the installed module, which trains one tiny step.
# pip's build environment comes from PyPI (scikit-build-core; numpy for the venv): where PyPI
# cannot be reached the test says so and exits 77, which CTest reports as "Not Run", never passed.
# Usage: pip_install_test.sh SOURCE_DIR
set -euo pipefail
src=$(cd "${1:?usage: pip_install_test.sh SOURCE_DIR}" && pwd)
py=/usr/bin/python3
say() { echo "pip.install: $*"; }

[ -x "$py" ] || { say "$py is missing (Debian's python3; scripts/setup.sh)"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mixprec-pip.XXXXXX")
trap 'rm -rf "$work"' EXIT
unset PYTHONPATH PYTHONHOME PIP_REQUIRE_VIRTUALENV
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_NO_INPUT=1

"$py" -m venv "$work/venv" || { say "python3 -m venv failed: apt-get install python3-venv (scripts/setup.sh)"; exit 1; }
vpy=$work/venv/bin/python3

# Can pip reach PyPI? The same client, index and certificates as the install below.
if ! timeout 120 "$vpy" -m pip download -q --no-deps --dest "$work/probe" "scikit-build-core>=0.11,<2" \
  > "$work/probe.log" 2>&1; then
  tail -3 "$work/probe.log"
  say "PyPI is not reachable from here (pip download failed): not run"
  exit 77
fi

t0=$SECONDS
if ! (cd "$src" && "$vpy" -m pip install . > "$work/pip.log" 2>&1); then
  tail -40 "$work/pip.log"
  say "FAIL: 'pip install .' failed after $((SECONDS - t0)) s (the last lines of its log above)"
  exit 1
fi
say "'pip install .' built and installed in $((SECONDS - t0)) s"

# What it installed: the module, one file, and its metadata; no library, headers or tools.
site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
installed=$(cd "$site" && ls -d mixprec* | sort | tr '\n' ' ')
say "in site-packages: $installed"
case "$installed" in
  "mixprec-"*".dist-info mixprec.cpython-"*".so ") ;;
  *) say "FAIL: expected mixprec.cpython-*.so and its dist-info in $site, found: $installed"; exit 1 ;;
esac
missing=$(ldd "$site"/mixprec.cpython-*.so | grep "not found" || true)
[ -z "$missing" ] || { echo "$missing"; say "FAIL: the module's libraries are not all found"; exit 1; }

# From another folder, without PYTHONPATH, and nothing of the build tree in sight.
cd "$work"
env -i PATH=/usr/bin:/bin HOME="$work" OMP_NUM_THREADS=2 "$vpy" - "$site" << 'EOF'
import os, sys
import numpy as np
import mixprec as ms
from mixprec import amp, nn, ops

site = sys.argv[1]
assert os.path.dirname(ms.__file__) == site, (ms.__file__, site)
assert np.__version__.startswith("1."), np.__version__  # pybind11 2.10 needs numpy 1.x
print("pip.install: imported", ms.__file__, "version", ms.__version__, "numpy", np.__version__)

ms.set_seed(0)
rng = np.random.default_rng(0)
x = ms.Tensor(rng.standard_normal((16, 4, 8)).astype(np.float32))
y = ms.Tensor(rng.integers(0, 3, 16).astype(np.int32))


class Net(nn.Cell):  # one attention layer and a head: the new ops through the installed module
    def __init__(self):
        super().__init__()
        self.qkv = nn.Dense(8, 24)
        self.head = nn.Dense(8, 3)

    def construct(self, t):
        q, k, v = (p.reshape(16, 4, 2, 4).permute(0, 2, 1, 3) for p in ops.split(self.qkv(t), 8, axis=-1))
        o = ops.scaled_dot_product_attention(q, k, v, is_causal=True).permute(0, 2, 1, 3).reshape(16, 4, 8)
        return self.head(ops.mean(o, axis=1))


net = Net()
opt = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
step = amp.build_train_network(network=net, optimizer=opt, loss_fn=loss_fn, level="O2")
before = [p.asnumpy().copy() for p in net.trainable_params()]
loss = step(x, y).item()
changed = sum(not np.array_equal(b, p.asnumpy()) for b, p in zip(before, net.trainable_params()))
assert np.isfinite(loss) and changed == len(before), (loss, changed)
print(f"pip.install: one O2 step trained (loss {loss:.4f}, {changed} parameters updated)")
EOF
say "passed"
