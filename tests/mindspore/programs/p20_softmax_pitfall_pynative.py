# s3_seed_softmax_pitfall.py in PYNATIVE_MODE (mixprec has one semantics for both modes, MindSpore's
# GRAPH_MODE one; MindSpore's PYNATIVE_MODE casts the inputs of every op of a flagged cell). Four variants on logits
# up to 30 (exp(30) > 65504): no cast, the seed's cast in the caller, the cast inside the softmax
# cell's construct, and to_float(float32) on the softmax cell. Facts: output dtype, finite or not.
import numpy as np
import mindspore as ms
from mindspore import nn, ops, amp
import facts

F = facts.Facts()
ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")


class MySoftmax(nn.Cell):
    def construct(self, x):
        e = ops.exp(x)
        return e / e.sum(-1, keepdims=True)


class MySoftmaxCastInside(nn.Cell):
    def construct(self, x):
        x = x.astype(ms.float32)
        e = ops.exp(x)
        return e / e.sum(-1, keepdims=True)


class Head(nn.Cell):
    def __init__(self, softmax, cast_in_caller):
        super().__init__()
        self.fc = nn.Dense(4, 4, weight_init="ones", bias_init="zeros")
        self.softmax = softmax
        self.cast_in_caller = cast_in_caller

    def construct(self, x):
        x = self.fc(x)
        if self.cast_in_caller:
            x = self.softmax(x.astype(ms.float32))  # the seed's fix
        else:
            x = self.softmax(x)
        return x


x = ms.Tensor(np.array([[7.5, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 1.5]], np.float32))
variants = {
    "no_cast": (MySoftmax, False, False),
    "seed_cast_in_caller": (MySoftmax, True, False),
    "cast_inside_cell": (MySoftmaxCastInside, False, False),
    "to_float32_on_cell": (MySoftmax, False, True),
}
x = x * 4.0  # logits up to 30
for tag, (cls, in_caller, to_f32) in variants.items():
    sm = cls()
    net = Head(sm, in_caller)
    net = amp.auto_mixed_precision(net, "O2", dtype=ms.float16)
    if to_f32:
        sm.to_float(ms.float32)
    with F.guard(f"{tag}.call"):
        out = net(x)
        F.put(f"{tag}.output_dtype", facts.dt(out.dtype))
        F.put(f"{tag}.finite", bool(np.isfinite(facts.arr(out)).all()))
F.emit()
