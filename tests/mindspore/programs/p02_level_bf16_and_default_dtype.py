# bfloat16 at O1/O2/O3, and the level's default low dtype when `dtype` is left out
# (MindSpore: float16; mixprec: bfloat16, the fast CPU type).
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
        self.relu = nn.ReLU()
        self.ln = nn.LayerNorm((8,))
        self.fc2 = nn.Dense(8, 3)
        self.seen = []

    def construct(self, x):
        x = self.fc1(x)
        self.seen.append(("fc1", facts.dt(x.dtype)))
        x = self.relu(x)
        self.seen.append(("relu", facts.dt(x.dtype)))
        x = self.ln(x)
        self.seen.append(("ln", facts.dt(x.dtype)))
        x = self.fc2(x)
        self.seen.append(("fc2", facts.dt(x.dtype)))
        return x


x = ms.Tensor(np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32))
for level in ["O1", "O2", "O3"]:
    for tag, kw in (("bf16", {"dtype": ms.bfloat16}), ("default", {})):
        net = Net()
        with F.guard(f"{tag}.{level}.apply"):
            wrapped = amp.auto_mixed_precision(net, level, **kw)
        with F.guard(f"{tag}.{level}.call"):
            out = wrapped(x)
            F.put(f"{tag}.{level}.output", facts.dt(out.dtype))
        for name, d in net.seen:
            F.put(f"{tag}.{level}.cell.{name}", d)
        for name, p in net.parameters_dict().items():
            F.put(f"{tag}.{level}.param.{name}", facts.dt(p.dtype))
F.emit()
