# train.Model with amp_level: which managers are accepted on the CPU at each level, and the
# network's dtypes once the Model is built (the level applies at construction).
import numpy as np
import mindspore as ms
from mindspore import nn
from mindspore.train import Model
from mindspore.train.loss_scale_manager import FixedLossScaleManager, DynamicLossScaleManager
import facts

ms.set_context(mode=ms.PYNATIVE_MODE)
F = facts.Facts()


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(6, 8)
        self.bn = nn.BatchNorm1d(8)
        self.fc2 = nn.Dense(8, 3)
        self.seen = []

    def construct(self, x):
        x = self.fc1(x)
        self.seen.append(("fc1", facts.dt(x.dtype)))
        x = self.bn(x)
        self.seen.append(("bn", facts.dt(x.dtype)))
        x = self.fc2(x)
        self.seen.append(("fc2", facts.dt(x.dtype)))
        return x


x = ms.Tensor(np.random.default_rng(6).standard_normal((4, 6)).astype(np.float32))
cases = {
    "O2.default": ("O2", {}),
    "O2.none": ("O2", {"loss_scale_manager": None}),
    "O2.cast_model_type_kw": ("O2", {"loss_scale_manager": None, "cast_model_type": ms.float16}),
    "O2.fixed_nodrop": ("O2", {"loss_scale_manager": FixedLossScaleManager(1024.0, drop_overflow_update=False)}),
    "O2.fixed_drop": ("O2", {"loss_scale_manager": FixedLossScaleManager(1024.0)}),
    "O2.dynamic": ("O2", {"loss_scale_manager": DynamicLossScaleManager()}),
    "O3.default": ("O3", {}),
    "O1.default": ("O1", {}),
    "O2.bn_f16": ("O2", {"loss_scale_manager": None, "keep_batchnorm_fp32": False}),
}
for tag, (level, kw) in cases.items():
    net = Net()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    with F.guard(f"{tag}.build"):
        model = Model(net, loss_fn=loss, optimizer=opt, metrics={"acc": nn.Accuracy()}, amp_level=level, **kw)
    net.set_train(False)
    with F.guard(f"{tag}.call"):
        net.seen.clear()
        out = net(x)
        F.put(f"{tag}.output", facts.dt(out.dtype))
        for name, d in net.seen:
            F.put(f"{tag}.cell.{name}", d)
net = Net()
F.raises("error.bad_level", lambda: Model(net, loss_fn=nn.MSELoss(), optimizer=nn.Momentum(
    net.trainable_params(), 0.01, 0.9), amp_level="O7"))
F.emit()
