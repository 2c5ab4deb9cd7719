# build_train_network's keep_batchnorm_fp32 and cast_model_type: the dtype each sub-cell outputs
# and BatchNorm's parameters, for the combinations a user writes (float16 named: the default low
# dtype differs, p02).
import numpy as np
import mindspore as ms
from mindspore import nn, amp
import facts

ms.set_context(mode=ms.PYNATIVE_MODE)
F = facts.Facts()


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, pad_mode='same')
        self.bn = nn.BatchNorm2d(2)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(2 * 4 * 4, 3)
        self.seen = []

    def construct(self, x):
        x = self.conv(x)
        self.seen.append(("conv", facts.dt(x.dtype)))
        x = self.bn(x)
        self.seen.append(("bn", facts.dt(x.dtype)))
        x = self.fc(self.flatten(x))
        self.seen.append(("fc", facts.dt(x.dtype)))
        return x


x = ms.Tensor(np.random.default_rng(8).standard_normal((2, 1, 4, 4)).astype(np.float32))
y = ms.Tensor(np.array([0, 2], np.int32))
cases = {
    "O2.keep_false": ("O2", {"keep_batchnorm_fp32": False, "cast_model_type": ms.float16}),
    "O2.keep_true": ("O2", {"keep_batchnorm_fp32": True, "cast_model_type": ms.float16}),
    "O3.keep_true": ("O3", {"keep_batchnorm_fp32": True, "cast_model_type": ms.float16}),
    "O0.cast_f16": ("O0", {"cast_model_type": ms.float16}),
    "O2.cast_f32": ("O2", {"cast_model_type": ms.float32}),
    "O2.cast_f16": ("O2", {"cast_model_type": ms.float16}),
}
for tag, (level, kw) in cases.items():
    net = Net()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    with F.guard(f"{tag}.build"):
        step = amp.build_train_network(net, opt, loss, level=level, loss_scale_manager=None, **kw)
        step(x, y)
    for name, d in net.seen:
        F.put(f"{tag}.cell.{name}", d)
    for name, p in net.parameters_dict().items():  # BatchNorm's moving statistics: see p01
        if "moving_" in name:
            continue
        F.put(f"{tag}.param.{name}", facts.dt(p.dtype))
F.emit()
