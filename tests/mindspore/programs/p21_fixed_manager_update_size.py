# The seed's FixedLossScaleManager(1024, drop_overflow_update=False) without the optimizer's
# loss_scale: the size of one update. One SGD step (lr 1) through build_train_network at O0 with
# that manager, against the gradient computed directly: the ratio of update to gradient.
import numpy as np
import mindspore as ms
from mindspore import nn, amp
from mindspore.train.loss_scale_manager import FixedLossScaleManager
import facts

ms.set_context(mode=ms.PYNATIVE_MODE)
F = facts.Facts()
x = ms.Tensor(np.array([[1.0, 2.0]], np.float32))
y = ms.Tensor(np.array([[0.5]], np.float32))
for tag, manager in (("none", None), ("fixed1024", FixedLossScaleManager(1024.0, drop_overflow_update=False))):
    net = nn.Dense(2, 1, weight_init="ones", bias_init="zeros")
    loss = nn.MSELoss()
    opt = nn.SGD(net.trainable_params(), learning_rate=1.0)
    w0 = facts.arr(net.weight).copy()
    expected_grad = 2.0 * (w0 @ np.array([1.0, 2.0]) - 0.5) * np.array([1.0, 2.0])
    with F.guard(f"{tag}.step"):
        step = amp.build_train_network(net, opt, loss, level="O0", loss_scale_manager=manager)
        out = step(x, y)
        first = out[0] if isinstance(out, tuple) else out
        F.put(f"{tag}.loss", facts.num(first))
        delta = w0 - facts.arr(net.weight)
        F.put(f"{tag}.update_over_grad", (delta / expected_grad).tolist())
F.emit()
