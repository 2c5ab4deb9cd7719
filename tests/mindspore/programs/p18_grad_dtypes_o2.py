# Gradients of an O2 / O3 network's parameters (value_and_grad over weights): their dtypes and
# shapes, and that they are finite.
import numpy as np
import mindspore as ms
from mindspore import nn, amp
import facts

ms.set_context(mode=ms.PYNATIVE_MODE)
F = facts.Facts()
x = ms.Tensor(np.random.default_rng(7).standard_normal((4, 6)).astype(np.float32))
y = ms.Tensor(np.array([0, 1, 2, 1], np.int32))
for level in ["O0", "O1", "O2", "O3"]:
    net = nn.SequentialCell([nn.Dense(6, 8), nn.ReLU(), nn.Dense(8, 3)])
    names = list(net.parameters_dict().keys())
    params = net.trainable_params()
    net = amp.auto_mixed_precision(net, level, dtype=ms.float16)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def forward(a, b):
        logits = net(a)
        return loss_fn(logits, b), logits

    with F.guard(f"{level}.ok"):
        (loss, logits), grads = ms.value_and_grad(forward, None, params, has_aux=True)(x, y)
        F.put(f"{level}.loss_dtype", facts.dt(loss.dtype))
        F.put(f"{level}.logits_dtype", facts.dt(logits.dtype))
        for n, g in zip(names, grads):
            F.put(f"{level}.grad.{n}.dtype", facts.dt(g.dtype))
            F.put(f"{level}.grad.{n}.shape", list(g.shape))
        F.put(f"{level}.grads_finite", all(bool(np.isfinite(facts.arr(g)).all()) for g in grads))
F.emit()
