# Which error each invalid value_and_grad call raises.
import numpy as np
import mindspore as ms
from mindspore import nn
import facts

ms.set_context(mode=ms.PYNATIVE_MODE)
F = facts.Facts()
x = ms.Tensor(np.array([1.0, 2.0], np.float32))


def f(a):
    return (a * a).sum()


F.raises("none_and_no_weights", lambda: ms.value_and_grad(f, None, None)(x))
F.raises("position_out_of_range", lambda: ms.value_and_grad(f, 3)(x))
F.raises("negative_position", lambda: ms.value_and_grad(f, -1)(x))
F.raises("position_string", lambda: ms.value_and_grad(f, "0")(x))
F.raises("weights_not_params", lambda: ms.value_and_grad(f, None, [1, 2])(x))
F.raises("aux_not_tuple", lambda: ms.value_and_grad(f, 0, has_aux=True)(x))
F.raises("int_output", lambda: ms.value_and_grad(lambda a: 3, 0)(x))
F.emit()
