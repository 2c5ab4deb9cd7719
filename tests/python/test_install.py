# `cmake --install` puts the module where /usr/bin/python3 finds it: lib/python3.X/dist-packages
# under the prefix (on sys.path for the prefixes /usr/local and /usr), and the installed module
# finds the installed libmixprec through its RPATH, with nothing of the build tree in sight.
import os
import subprocess
import sys
import sysconfig

import pytest

PY = "/usr/bin/python3"


@pytest.mark.skipif(not os.path.exists(PY), reason="Debian's /usr/bin/python3 is what the module is built for")
def test_installed_module_imports_from_the_prefix(tmp_path):
    import mixprec  # from build/python: its parent is the build tree (ctest also says MIXPREC_BUILD_DIR)
    build = os.environ.get("MIXPREC_BUILD_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(mixprec.__file__)))
    assert os.path.exists(os.path.join(build, "CMakeCache.txt")), build
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)], check=True, capture_output=True)
    rel = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/dist-packages"
    found = list((prefix / rel).glob("mixprec.*.so"))
    assert len(found) == 1, list(prefix.rglob("mixprec*"))
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(prefix / rel), "OMP_NUM_THREADS": "1"}
    code = ("import mixprec as ms, sys; from mixprec import nn; "
            "print(ms.__file__); print(nn.Dense(3, 2)(ms.ops.ones((1, 3))).shape); "
            f"print('/usr/local/{rel}' in sys.path, '/usr/{rel}' in sys.path)")
    out = subprocess.run([PY, "-c", code], env=env, cwd=tmp_path, check=True, capture_output=True, text=True).stdout.split("\n")
    assert out[0].startswith(str(prefix / rel)) and out[1] == "(1, 2)"
    assert out[2] == "True True"  # the two system prefixes put it on /usr/bin/python3's path
