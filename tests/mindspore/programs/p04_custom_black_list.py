# custom_mixed_precision with a black list: everything but the listed cells runs in the low dtype.
import numpy as np
import mindspore as ms
from mindspore import nn, amp
import facts

ms.set_context(mode=ms.PYNATIVE_MODE)
F = facts.Facts()


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(6, 8)
        self.bn = nn.BatchNorm1d(8)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(8, 3)
        self.seen = []

    def construct(self, x):
        x = self.fc1(x)
        self.seen.append(("fc1", facts.dt(x.dtype)))
        x = self.bn(x)
        self.seen.append(("bn", facts.dt(x.dtype)))
        x = self.relu(x)
        self.seen.append(("relu", facts.dt(x.dtype)))
        x = self.fc2(x)
        self.seen.append(("fc2", facts.dt(x.dtype)))
        return x


x = ms.Tensor(np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32))
for tag, black in (("bn", [nn.BatchNorm1d]), ("bn_dense", [nn.BatchNorm1d, nn.Dense]),
                   ("builtin", amp.get_black_list())):
    net = Net()
    net.set_train(False)
    with F.guard(f"{tag}.apply"):
        wrapped = amp.custom_mixed_precision(net, black_list=black, dtype=ms.float16)
    with F.guard(f"{tag}.call"):
        out = wrapped(x)
        F.put(f"{tag}.output", facts.dt(out.dtype))
    for name, d in net.seen:
        F.put(f"{tag}.cell.{name}", d)
    for name, p in net.parameters_dict().items():  # BatchNorm's moving statistics: see p01
        if "moving_" in name:
            continue
        F.put(f"{tag}.param.{name}", facts.dt(p.dtype))
F.emit()
