# Never silent about an undone cast (issue 31, item 2), in the seed's own words: a custom softmax
# cell under O2 float16 called as self.softmax(x.astype(ms.float32)) gives NaN, as in MindSpore's
# GRAPH_MODE, and mixprec says so once, naming the cell, the level and the fix; no warning once the
# fix is applied, and none when silenced.
import numpy as np
import pytest

import mixprec as ms
from mixprec import amp, nn, ops


class MySoftmax(nn.Cell):
    def construct(self, x):
        e = ops.exp(x)
        return e / e.sum(-1, keepdims=True)


class MySoftmaxCastInside(nn.Cell):
    def construct(self, x):
        e = ops.exp(x.astype(ms.float32))
        return e / e.sum(-1, keepdims=True)


class Head(nn.Cell):
    def __init__(self, softmax, cast_in_caller=True):
        super().__init__()
        self.fc = nn.Dense(4, 4, weight_init="ones", bias_init="zeros")
        self.softmax = softmax
        self.cast_in_caller = cast_in_caller

    def construct(self, x):
        x = self.fc(x)
        if self.cast_in_caller:
            return self.softmax(x.astype(ms.float32))  # the seed's fix
        return self.softmax(x)


X = ms.Tensor(np.array([[30.0, 0.0, 0.0, 0.0], [4.0, 8.0, 12.0, 6.0]], np.float32))


@pytest.fixture(autouse=True)
def warnings_on():
    amp.set_undone_cast_warnings(True)
    yield
    amp.set_undone_cast_warnings(True)


def run(net, capfd, times=2):
    capfd.readouterr()
    for _ in range(times):
        out = net(X)
    return out, capfd.readouterr().err


def test_the_seeds_softmax_fix_in_the_caller_warns_once_with_the_fix(capfd):
    net = amp.auto_mixed_precision(Head(MySoftmax()), "O2", dtype=ms.float16)
    out, err = run(net, capfd)
    assert np.isnan(out.asnumpy()).any()  # as MindSpore: the cast is undone at the cell's boundary
    assert err.count("mixprec: warning:") == 1, err
    assert "'softmax' (MySoftmax)" in err and "O2 casts it back to float16" in err, err
    assert "net.softmax.to_float(ms.float32)" in err and "cast inside MySoftmax's construct" in err, err
    reported = [u for u in amp.undone_casts() if u["cell_class"] == "MySoftmax" and u["cell_dtype"] == ms.float16]
    assert reported and reported[0]["path"] == "softmax" and reported[0]["level"] == "O2"


@pytest.mark.parametrize("fix", ["to_float", "cast_inside"])
def test_no_warning_once_the_fix_is_applied(fix, capfd):
    fresh = type("Fixed_" + fix, (MySoftmax,), {})  # a class no earlier test reported (one warning per cell)
    if fix == "to_float":
        sm = fresh()
        net = amp.auto_mixed_precision(Head(sm), "O3", dtype=ms.float16)
        sm.to_float(ms.float32)
    else:
        net = amp.auto_mixed_precision(Head(MySoftmaxCastInside(), cast_in_caller=False), "O3", dtype=ms.float16)
    out, err = run(net, capfd)
    assert np.isfinite(out.asnumpy()).all()
    assert "mixprec: warning:" not in err, err
    assert not any(u["cell_class"] in (fresh.__name__, "MySoftmaxCastInside") for u in amp.undone_casts())


def test_silenced(capfd):
    amp.set_undone_cast_warnings(False)

    class Other(MySoftmax):  # a class not reported before in this process
        pass

    net = amp.auto_mixed_precision(Head(Other()), "O2", dtype=ms.bfloat16)
    _, err = run(net, capfd)
    assert err == ""
    assert any(u["cell_class"] == "Other" for u in amp.undone_casts())  # recorded, not printed
