# The seed's table of amp_level (O0 pure FP32; O1 white list, e.g. Conv2d and MatMul, in FP16;
# O2 everything but the black list, e.g. BatchNorm; O3 pure FP16) on the seed's SimpleNet: the
# dtype of each sub-cell's output and of the network's output at each level (PYNATIVE_MODE, so
# that construct can record them), and the white and black lists it names.
import numpy as np
import mindspore as ms
from mindspore import nn, amp
from mindspore.common.initializer import Normal
import facts

F = facts.Facts()
ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")


class SimpleNet(nn.Cell):
    def __init__(self):
        super(SimpleNet, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, pad_mode='valid', weight_init=Normal(0.02))
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(32 * 26 * 26, 10)
        self.seen = []

    def construct(self, x):
        x = self.conv1(x)
        self.seen.append(("conv1", facts.dt(x.dtype)))
        x = self.relu(x)
        self.seen.append(("relu", facts.dt(x.dtype)))
        x = self.flatten(x)
        self.seen.append(("flatten", facts.dt(x.dtype)))
        x = self.fc(x)
        self.seen.append(("fc", facts.dt(x.dtype)))
        return x


x = ms.Tensor(np.random.default_rng(0).random((2, 1, 28, 28)).astype(np.float32))
for level in ["O0", "O1", "O2", "O3"]:
    net = SimpleNet()
    with F.guard(f"{level}.call"):
        out = amp.auto_mixed_precision(net, level, dtype=ms.float16)(x)
        F.put(f"{level}.output", facts.dt(out.dtype))
    for name, d in net.seen:
        F.put(f"{level}.cell.{name}", d)
F.run("white_list.has_Conv2d", lambda: nn.Conv2d in amp.get_white_list() or "Conv2d" in amp.get_white_list())
F.run("black_list.has_BatchNorm2d",
      lambda: nn.BatchNorm2d in amp.get_black_list() or "BatchNorm2d" in amp.get_black_list())
F.emit()
