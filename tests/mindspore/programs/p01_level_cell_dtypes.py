# Each AMP level (O0 O1 O2 O3, the default low dtype float16 passed explicitly) on a small CNN:
# the dtype of every sub-cell's output (recorded by the network's own construct, PYNATIVE_MODE),
# the network's output dtype, and every parameter's dtype after auto_mixed_precision
# (parameters_dict(), keyed by the parameter's name).
import numpy as np
import mindspore as ms
from mindspore import nn, amp
import facts

ms.set_context(mode=ms.PYNATIVE_MODE)
F = facts.Facts()


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, pad_mode='valid')
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(4 * 6 * 6, 5)
        self.softmax = nn.Softmax()
        self.seen = []

    def construct(self, x):
        x = self.conv(x)
        self.seen.append(("conv", facts.dt(x.dtype)))
        x = self.bn(x)
        self.seen.append(("bn", facts.dt(x.dtype)))
        x = self.relu(x)
        self.seen.append(("relu", facts.dt(x.dtype)))
        x = self.flatten(x)
        self.seen.append(("flatten", facts.dt(x.dtype)))
        x = self.fc(x)
        self.seen.append(("fc", facts.dt(x.dtype)))
        x = self.softmax(x)
        self.seen.append(("softmax", facts.dt(x.dtype)))
        return x


x = ms.Tensor(np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32))
for level in ["O0", "O1", "O2", "O3"]:
    net = Net()
    net.set_train(False)
    with F.guard(f"{level}.apply"):
        wrapped = amp.auto_mixed_precision(net, level, dtype=ms.float16)
    with F.guard(f"{level}.call"):
        out = wrapped(x)
        F.put(f"{level}.output", facts.dt(out.dtype))
        F.put(f"{level}.output_finite", bool(np.isfinite(facts.arr(out)).all()))
    for name, d in net.seen:
        F.put(f"{level}.cell.{name}", d)
    for name, p in net.parameters_dict().items():
        F.put(f"{level}.param.{name}", facts.dt(p.dtype))
F.emit()
