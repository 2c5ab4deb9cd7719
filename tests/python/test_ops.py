# mixprec.ops from Python: results against numpy, MindSpore's keyword names, gradients through
# value_and_grad / grad with every grad_position form, and the GIL released during C++ compute.
import threading
import time

import numpy as np
import pytest

import mixprec as ms
from mixprec import ops


def test_ops_match_numpy():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    t = ms.Tensor(a)
    e = np.exp(a - a.max(1, keepdims=True))
    cases = [(ops.matmul(t, ms.Tensor(b)), a @ b), (ops.softmax(t, axis=1), e / e.sum(1, keepdims=True)),
             (ops.log_softmax(t, axis=-1), np.log(e / e.sum(1, keepdims=True))), (ops.relu(t), np.maximum(a, 0)),
             (ops.sum(t, dim=0, keepdim=True), a.sum(0, keepdims=True)), (ops.mean(t, axis=1), a.mean(1)),
             (ops.amax(t, axis=1), a.max(1)), (ops.exp(t), np.exp(a)), (ops.abs(t), np.abs(a)),
             (ops.clamp(t, min=-0.5, max=0.5), np.clip(a, -0.5, 0.5)), (ops.transpose(t, (1, 0)), a.T),
             (ops.swapaxes(t, 0, 1), a.T), (ops.reshape(t, (2, 10)), a.reshape(2, 10)),
             (ops.cat([t, t], axis=0), np.concatenate([a, a])), (ops.expand_dims(t, 0), a[None]),
             (ops.maximum(t, ops.zeros((4, 5))), np.maximum(a, 0)), (ops.cast(t, ms.float64), a.astype(np.float64)),
             (ops.dense(t, ms.Tensor(b.T)), a @ b), (ops.tanh(t), np.tanh(a)), (ops.sigmoid(t), 1 / (1 + np.exp(-a)))]
    for got, want in cases:
        np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-5, atol=2e-6)
    assert ops.argmax(t, dim=1).asnumpy().tolist() == a.argmax(1).tolist()
    assert ops.arange(0, 5).dtype == ms.int64 and ops.arange(0, 1, 0.25).asnumpy().tolist() == [0, 0.25, 0.5, 0.75]
    labels = ms.Tensor(np.array([0, 2, 1, 4], np.int32))
    want = -np.log((e / e.sum(1, keepdims=True))[np.arange(4), [0, 2, 1, 4]]).mean()
    np.testing.assert_allclose(ops.cross_entropy(t, labels).asnumpy(), want, rtol=1e-5)


def test_value_and_grad_follows_mindspore_grad_position():
    x = ms.Tensor(np.array([1.0, -2.0, 3.0], np.float32))
    y = ms.Tensor(np.array([0.5, 0.5, 2.0], np.float32))
    w = ms.Parameter(ms.Tensor(np.array([2.0, 2.0, 2.0], np.float32)))

    def f(x, y):
        return ops.sum(x * x * y * w)

    v, gx = ms.value_and_grad(f)(x, y)  # grad_position=0: one Tensor
    assert v.item() == pytest.approx(0.5 * 2 + 4 * 0.5 * 2 + 9 * 2 * 2)
    np.testing.assert_allclose(gx.asnumpy(), 2 * x.asnumpy() * y.asnumpy() * 2)
    _, (gx2, gy) = ms.value_and_grad(f, (0, 1))(x, y)  # a tuple of positions: a tuple
    np.testing.assert_allclose(gy.asnumpy(), x.asnumpy() ** 2 * 2)
    _, (gw,) = ms.value_and_grad(f, None, [w])(x, y)  # weights only
    np.testing.assert_allclose(gw.asnumpy(), x.asnumpy() ** 2 * y.asnumpy())
    _, (g_in, g_w) = ms.value_and_grad(f, 1, [w])(x, y)  # both: (input grads, weight grads)
    np.testing.assert_allclose(g_in.asnumpy(), gy.asnumpy())
    np.testing.assert_allclose(g_w[0].asnumpy(), gw.asnumpy())
    np.testing.assert_allclose(ms.grad(f)(x, y).asnumpy(), gx.asnumpy())
    with pytest.raises(ms.Error, match="has_aux"):
        ms.value_and_grad(lambda x: (ops.sum(x), x))(x)


def test_the_gil_is_released_while_cpp_computes():
    a = ms.Tensor(np.random.default_rng(4).standard_normal((2500, 2500)).astype(np.float32))
    span = {}

    def work():  # one long C++ call
        span["start"] = time.perf_counter()
        ops.matmul(a, a)
        span["end"] = time.perf_counter()

    worker = threading.Thread(target=work)
    stamps = []
    worker.start()
    while worker.is_alive():
        stamps.append(time.perf_counter())  # this thread runs only while it can take the GIL
    worker.join()
    duration = span["end"] - span["start"]
    inside = [t for t in stamps if span["start"] < t < span["end"]]
    longest_gap = np.diff([span["start"]] + inside + [span["end"]]).max()
    # Holding the GIL through the matmul would stop this thread for (nearly) all of it.
    assert len(inside) > 100 and longest_gap < 0.5 * duration, (len(inside), longest_gap, duration)
