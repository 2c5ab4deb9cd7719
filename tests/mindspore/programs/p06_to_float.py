# Cell.to_float: it forces one sub-cell's compute dtype, returns the cell, and wins over the
# level (to_float(float32) on a cell of an O3 network; to_float(float16) on a cell at O0).
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
        self.fc2 = nn.Dense(8, 3)
        self.seen = []

    def construct(self, x):
        x = self.fc1(x)
        self.seen.append(("fc1", facts.dt(x.dtype)))
        x = self.relu(x)
        self.seen.append(("relu", facts.dt(x.dtype)))
        x = self.fc2(x)
        self.seen.append(("fc2", facts.dt(x.dtype)))
        return x


x = ms.Tensor(np.random.default_rng(4).standard_normal((4, 6)).astype(np.float32))
cases = {
    "fc1_f16_at_O0": ("O0", "fc1", ms.float16),
    "fc2_f32_at_O3": ("O3", "fc2", ms.float32),
    "fc1_f32_at_O2": ("O2", "fc1", ms.float32),
    "fc1_bf16_at_O0": ("O0", "fc1", ms.bfloat16),
}
# to_float after the level (on the network the level returned)
for tag, (level, cell, dtype) in {"fc2_f32_after_O3": ("O3", "fc2", ms.float32),
                                  "fc1_f32_after_O2": ("O2", "fc1", ms.float32)}.items():
    net = Net()
    with F.guard(f"{tag}.apply"):
        wrapped = amp.auto_mixed_precision(net, level, dtype=ms.float16)
        getattr(net, cell).to_float(dtype)
    with F.guard(f"{tag}.call"):
        out = wrapped(x)
        F.put(f"{tag}.output", facts.dt(out.dtype))
    for name, d in net.seen:
        F.put(f"{tag}.cell.{name}", d)
for tag, (level, cell, dtype) in cases.items():
    net = Net()
    with F.guard(f"{tag}.apply"):
        sub = getattr(net, cell)
        F.put(f"{tag}.returns_self", sub.to_float(dtype) is sub)
        wrapped = amp.auto_mixed_precision(net, level, dtype=ms.float16)
    with F.guard(f"{tag}.call"):
        out = wrapped(x)
        F.put(f"{tag}.output", facts.dt(out.dtype))
    for name, d in net.seen:
        F.put(f"{tag}.cell.{name}", d)
    for name, p in net.parameters_dict().items():
        F.put(f"{tag}.param.{name}", facts.dt(p.dtype))
# to_float on the whole network, no level
net = Net()
with F.guard("whole_f16.call"):
    out = net.to_float(ms.float16)(x)
    F.put("whole_f16.output", facts.dt(out.dtype))
for name, d in net.seen:
    F.put(f"whole_f16.cell.{name}", d)
F.raises("error.int32", lambda: Net().to_float(ms.int32))
F.raises("error.not_a_dtype", lambda: Net().to_float("float16"))
F.emit()
