# The seed's second program (方式二, the functional loop), as the seed writes it, run for 3 steps:
# build_train_network(level="O2", loss_scale_manager=None), value_and_grad(forward_fn, None,
# optimizer.parameters, has_aux=True), StaticLossScaler(1024.0), `loss = scaler.unscale(loss)`,
# `grads = scaler.unscale(grads)`, `optimizer(grads)`. Two changes, both needed in MindSpore too:
# the train cell is named train_net (the seed rebinds `net` and then calls the train cell with one
# input: that call is recorded below as an error fact), and the CPU replaces Ascend.
import numpy as np
import mindspore as ms
from mindspore import nn, ops
from mindspore.common.initializer import Normal
import facts

F = facts.Facts()
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
ms.set_seed(2)


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


net = SimpleNet()
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')
optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)

from mindspore import amp

train_net = amp.build_train_network(
    network=net,
    optimizer=optimizer,
    loss_fn=loss_fn,
    level="O2",
    loss_scale_manager=None
)
rng = np.random.default_rng(0)
data = ms.Tensor(rng.random((8, 1, 28, 28)).astype(np.float32))
label = ms.Tensor(rng.integers(0, 10, 8).astype(np.int32))
F.raises("seed_as_written.train_cell_called_with_one_input", lambda: train_net(data))

record = {}


def train_step(data, label):
    def forward_fn(data, label):
        logits = net(data)
        loss = loss_fn(logits, label)
        return loss, logits

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True)
    scaler = amp.StaticLossScaler(scale_value=1024.0)
    (loss, logits), grads = grad_fn(data, label)
    record["loss_before_unscale"] = facts.num(loss)
    record["logits_dtype"] = facts.dt(logits.dtype)
    loss = scaler.unscale(loss)
    grads = scaler.unscale(grads)
    record["grads_kind"] = facts.kind(grads)
    record["grad_dtypes"] = [facts.dt(g.dtype) for g in grads]
    record["grad_shapes"] = [list(g.shape) for g in grads]
    optimizer(grads)
    return loss


w0 = facts.arr(net.fc.weight).copy()
for i in range(3):
    with F.guard(f"step{i}.ok"):
        loss = train_step(data, label)
        F.put(f"step{i}.loss_dtype", facts.dt(loss.dtype))
        F.put(f"step{i}.unscaled_is_loss_over_1024",
              abs(facts.num(loss) * 1024.0 - record["loss_before_unscale"]) <= 1e-3 * record["loss_before_unscale"])
        F.put(f"step{i}.loss_finite", bool(np.isfinite(record["loss_before_unscale"])))
F.put("logits_dtype", record.get("logits_dtype"))
F.put("grads_kind", record.get("grads_kind"))
F.put("grad_dtypes", record.get("grad_dtypes"))
F.put("grad_shapes", record.get("grad_shapes"))
F.put("fc_weight_changed", bool(not np.array_equal(w0, facts.arr(net.fc.weight))))
with F.guard("train_net.step"):
    out = train_net(data, label)
    F.put("train_net.loss_dtype", facts.dt(out.dtype))
    F.put("train_net.loss_finite", bool(np.isfinite(facts.num(out))))
F.emit()
