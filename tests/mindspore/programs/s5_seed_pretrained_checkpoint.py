# The seed's note on pretrained weights: FP32 weights loaded into a network built with
# amp_level="O2" are cast automatically, and the checkpoint saved afterwards should be FP32.
# An O0 SimpleNet is saved; a Model(amp_level="O2") is built on a fresh SimpleNet (the seed's
# Model without a manager), the weights are loaded, predict runs, and the network is saved again.
import os
import tempfile
import numpy as np
import mindspore as ms
from mindspore import nn
from mindspore.common.initializer import Normal
from mindspore.train import Model
import facts

F = facts.Facts()
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")


class SimpleNet(nn.Cell):
    def __init__(self):
        super(SimpleNet, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, pad_mode='valid', weight_init=Normal(0.02))
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(32 * 26 * 26, 10)

    def construct(self, x):
        x = self.conv1(x)
        x = self.relu(x)
        x = self.flatten(x)
        x = self.fc(x)
        return x


d = tempfile.mkdtemp()
pre = SimpleNet()
ms.save_checkpoint(pre, os.path.join(d, "pretrained.ckpt"))
param_dict = ms.load_checkpoint(os.path.join(d, "pretrained.ckpt"))
F.put("pretrained.dtypes", {k: facts.dt(v.dtype) for k, v in param_dict.items()})

net = SimpleNet()
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')
optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
with F.guard("model_o2_no_manager.build"):
    Model(network=net, loss_fn=loss_fn, optimizer=optimizer, amp_level="O2")
with F.guard("model_o2_manager_none.build"):
    model = Model(network=net, loss_fn=loss_fn, optimizer=optimizer, amp_level="O2", loss_scale_manager=None)
with F.guard("load.ok"):
    r = ms.load_param_into_net(net, param_dict)
    F.put("load.not_loaded", [sorted(x) for x in r] if isinstance(r, tuple) else r)
x = ms.Tensor(np.random.default_rng(0).random((2, 1, 28, 28)).astype(np.float32))
with F.guard("predict.ok"):
    out = model.predict(x)
    F.put("predict.dtype", facts.dt(out.dtype))
    ref = pre(x)
    F.put("predict.close_to_pretrained_fp32",
          bool(np.allclose(facts.arr(out), facts.arr(ref), rtol=2e-2, atol=2e-2)))
ms.save_checkpoint(net, os.path.join(d, "after.ckpt"))
F.put("saved.dtypes", {k: facts.dt(v.dtype) for k, v in ms.load_checkpoint(os.path.join(d, "after.ckpt")).items()})
F.emit()
