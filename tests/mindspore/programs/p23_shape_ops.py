# The shape ops a custom attention layer uses (issue 31, item 4): Tensor.permute in its two
# spellings, ops.permute / transpose / swapaxes, ops.split with an int and with sizes, ops.chunk
# (fewer pieces than asked), unbind, narrow, stack, softmax(dtype=): the shapes and values they
# give, the gradient through split + permute, and the builtin error class of each wrong argument.
# (Not recorded: a negative split size, TypeError in MindSpore and ValueError in mixprec, and a
# numpy integer for chunks, refused by MindSpore only; docs/python.md lists both.)
import numpy as np
import mindspore as ms
from mindspore import ops
import facts

ms.set_context(mode=ms.PYNATIVE_MODE)
F = facts.Facts()
a = np.arange(60, dtype=np.float32).reshape(2, 6, 5) / 10
x = ms.Tensor(a)


def shapes(ts):
    return [list(t.shape) for t in ts]


F.run("permute.args", lambda: facts.arr(x.permute(2, 0, 1)))
F.run("permute.tuple", lambda: list(x.permute((0, 2, 1)).shape))
F.run("ops.permute", lambda: facts.arr(ops.permute(x, (1, 0, 2))))
F.run("ops.transpose", lambda: list(ops.transpose(x, (2, 1, 0)).shape))
F.run("ops.swapaxes", lambda: facts.arr(ops.swapaxes(x, 0, -1)))
F.run("split.int", lambda: shapes(ops.split(x, 4, axis=1)))
F.run("split.int.kind", lambda: facts.kind(ops.split(x, 4, axis=1)))
F.run("split.sizes", lambda: [facts.arr(t) for t in ops.split(x, [1, 3, 2], 1)])
F.run("split.method", lambda: shapes(x.split((2, 4), axis=-2)))
F.run("chunk.uneven", lambda: shapes(ops.chunk(x, 3, axis=2)))
F.run("chunk.fewer", lambda: shapes(x.chunk(4, axis=1)))
F.run("unbind", lambda: [facts.arr(t) for t in ops.unbind(x, 1)])
F.run("narrow", lambda: facts.arr(ops.narrow(x, 2, 1, 3)))
F.run("stack", lambda: list(ops.stack([x, x], -1).shape))
F.run("softmax.dtype", lambda: facts.dt(ops.softmax(x, axis=-1, dtype=ms.float16).dtype))


def f(t):  # the qkv split of an attention layer, heads permuted in front
    q, k, v = ops.split(t, 2, axis=1)
    return (q.permute(0, 2, 1) * 1.0 + k.permute(0, 2, 1) * 2.0 + v.permute(0, 2, 1) * 3.0).sum()


F.run("grad.split_permute", lambda: facts.arr(ms.grad(f)(x)))
F.run("grad.chunk", lambda: facts.arr(ms.grad(lambda t: (ops.chunk(t, 2, 2)[1] * 2.0).sum())(x)))

# Errors last (MindSpore reports some of them when the result is read, hence asnumpy()).
F.raises("error.split_sum", lambda: ops.split(x, [2, 2], axis=1))
F.raises("error.split_axis", lambda: ops.split(x, 2, axis=3))
F.raises("error.split_zero", lambda: ops.split(x, 0))
F.raises("error.split_float", lambda: ops.split(x, 2.0))
F.raises("error.split_float_size", lambda: ops.split(x, [2, 4.0], 1))
F.raises("error.split_axis_bool", lambda: ops.split(x, 2, axis=True))
F.raises("error.chunk_zero", lambda: ops.chunk(x, 0))
F.raises("error.chunk_axis", lambda: ops.chunk(x, 2, axis=-4))
F.raises("error.unbind_dim", lambda: ops.unbind(x, 3))
F.raises("error.narrow_past", lambda: ops.narrow(x, 1, 4, 3))
F.raises("error.narrow_negative_start", lambda: ops.narrow(x, 1, -2, 2).asnumpy())
F.raises("error.swapaxes", lambda: ops.swapaxes(x, 0, 3).asnumpy())
F.raises("error.stack_shapes", lambda: ops.stack([x, x[:, :2]]).asnumpy())
F.raises("error.permute_float", lambda: ops.transpose(x, (0, 1, 1.5)).asnumpy())
F.raises("error.permute_string", lambda: x.permute("012").asnumpy())
F.raises("error.permute_short", lambda: x.permute(0, 1).asnumpy())
F.raises("error.permute_repeated", lambda: x.permute(0, 2, 2).asnumpy())
F.raises("error.permute_range", lambda: ops.permute(x, (0, 1, 3)).asnumpy())
F.emit()
