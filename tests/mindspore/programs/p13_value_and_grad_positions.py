# ms.value_and_grad: the shapes of its results for grad_position 0, 1, (0, 1), None with weights,
# both, and has_aux; gradient values and dtypes.
import numpy as np
import mindspore as ms
from mindspore import nn
import facts

ms.set_context(mode=ms.PYNATIVE_MODE)
F = facts.Facts()
x = ms.Tensor(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
y = ms.Tensor(np.array([[0.5, -1.0], [2.0, 0.0]], np.float32))


def f(a, b):
    return (a * b * b).sum()


def f_aux(a, b):
    return (a * b).sum(), a * 2.0


def describe(key, value):
    """tuple/Tensor structure with shapes, dtypes and values."""
    if isinstance(value, (tuple, list)):
        F.put(f"{key}.kind", facts.kind(value))
        F.put(f"{key}.len", len(value))
        for i, v in enumerate(value):
            describe(f"{key}[{i}]", v)
    else:
        F.put(f"{key}.kind", facts.kind(value))
        if hasattr(value, "asnumpy"):
            F.put(f"{key}.shape", list(value.shape))
            F.put(f"{key}.dtype", facts.dt(value.dtype))
            F.put(f"{key}.values", facts.arr(value))


with F.guard("pos0.ok"):
    v, g = ms.value_and_grad(f, grad_position=0)(x, y)
    describe("pos0.value", v)
    describe("pos0.grad", g)
with F.guard("pos1.ok"):
    v, g = ms.value_and_grad(f, grad_position=1)(x, y)
    describe("pos1.grad", g)
with F.guard("pos01.ok"):
    v, g = ms.value_and_grad(f, grad_position=(0, 1))(x, y)
    describe("pos01.grad", g)
with F.guard("pos_tuple1.ok"):
    v, g = ms.value_and_grad(f, grad_position=(1,))(x, y)
    describe("pos_tuple1.grad", g)
with F.guard("default_position.ok"):
    v, g = ms.value_and_grad(f)(x, y)
    describe("default_position.grad", g)
with F.guard("aux.ok"):
    v, g = ms.value_and_grad(f_aux, grad_position=0, has_aux=True)(x, y)
    describe("aux.value", v)
    describe("aux.grad", g)
with F.guard("no_aux_tuple.ok"):
    v, g = ms.value_and_grad(f_aux, grad_position=0)(x, y)
    describe("no_aux_tuple.grad", g)

net = nn.Dense(2, 1, weight_init="ones", bias_init="zeros")


def g_net(a):
    return net(a).sum()


params = net.trainable_params()
with F.guard("weights.ok"):
    v, g = ms.value_and_grad(g_net, None, params)(x)
    describe("weights.value", v)
    describe("weights.grad", g)
with F.guard("both.ok"):
    v, g = ms.value_and_grad(g_net, 0, params)(x)
    describe("both.grad", g)
with F.guard("both_tuple.ok"):
    v, g = ms.value_and_grad(g_net, (0,), params)(x)
    describe("both_tuple.grad", g)
with F.guard("grad_fn.ok"):
    g = ms.grad(f, grad_position=1)(x, y)
    describe("grad_fn.grad", g)
F.emit()
