# The seed's BatchNorm note: at O2 BatchNorm stays FP32 by default; "check whether the BN layer was
# accidentally forced to FP16". A conv-BN-ReLU net through build_train_network at O2: BatchNorm's
# input/output dtypes and parameters by default, with keep_batchnorm_fp32=False, with
# bn.to_float(float16), and at O3; and whether a training step keeps everything finite.
import numpy as np
import mindspore as ms
from mindspore import nn, amp
import facts

F = facts.Facts()
ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, pad_mode='same')
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(4 * 6 * 6, 10)
        self.seen = []

    def construct(self, x):
        x = self.conv(x)
        self.seen.append(("conv", facts.dt(x.dtype)))
        x = self.bn(x)
        self.seen.append(("bn", facts.dt(x.dtype)))
        x = self.relu(x)
        x = self.fc(self.flatten(x))
        self.seen.append(("fc", facts.dt(x.dtype)))
        return x


rng = np.random.default_rng(9)
x = ms.Tensor(rng.standard_normal((4, 1, 6, 6)).astype(np.float32))
y = ms.Tensor(rng.integers(0, 10, 4).astype(np.int32))
f16 = {"cast_model_type": ms.float16}  # the seed's dtype (mixprec's default is bfloat16, p02)
cases = {"O2.default": ("O2", f16, None), "O2.keep_false": ("O2", dict(f16, keep_batchnorm_fp32=False), None),
         "O2.bn_to_f16": ("O2", f16, ms.float16), "O3.default": ("O3", f16, None)}
for tag, (level, kw, bn_dtype) in cases.items():
    net = Net()
    if bn_dtype is not None:
        net.bn.to_float(bn_dtype)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    with F.guard(f"{tag}.step"):
        step = amp.build_train_network(net, opt, loss, level=level, loss_scale_manager=None, **kw)
        out = step(x, y)
        F.put(f"{tag}.loss_finite", bool(np.isfinite(facts.num(out))))
    for name, d in net.seen[:3]:
        F.put(f"{tag}.cell.{name}", d)
    for name, p in net.parameters_dict().items():  # BatchNorm's moving statistics: see p01
        if "moving_" in name:
            continue
        F.put(f"{tag}.param.{name}", facts.dt(p.dtype))
    F.put(f"{tag}.params_finite", all(bool(np.isfinite(facts.arr(p)).all()) for p in net.trainable_params()))
F.emit()
