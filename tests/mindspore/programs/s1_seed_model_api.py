# The seed's first program (方式一, the Model API), as the seed writes it: SimpleNet, Momentum,
# FixedLossScaleManager(1024.0, drop_overflow_update=False), Model(amp_level="O2"), trained for
# one epoch of 4 batches. The seed's device is Ascend and it assumes a dataset: here the device
# is the CPU and the dataset a tiny MNIST-format directory written by the program (both
# frameworks read it with MnistDataset). GRAPH_MODE, as in the seed.
import os
import tempfile
import numpy as np
import mindspore as ms
from mindspore import nn, ops
from mindspore.common.initializer import Normal
import facts

F = facts.Facts()
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
ms.set_seed(1)


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

from mindspore.train import Model, LossMonitor, Callback
from mindspore.train.loss_scale_manager import FixedLossScaleManager

loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')
optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
loss_scale_manager = FixedLossScaleManager(1024.0, drop_overflow_update=False)
with F.guard("model.build"):
    model = Model(
        network=net,
        loss_fn=loss_fn,
        optimizer=optimizer,
        metrics={"Accuracy": nn.Accuracy()},
        amp_level="O2",
        loss_scale_manager=loss_scale_manager
    )


def write_idx(d, n):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    images = np.zeros((n, 28, 28), np.uint8)
    for i, c in enumerate(labels):  # a learnable pattern: a bright bar whose row is the class
        images[i, 2 + 2 * c: 4 + 2 * c, 4:24] = 255
    images = np.clip(images + rng.integers(0, 40, images.shape), 0, 255).astype(np.uint8)
    with open(os.path.join(d, "train-images-idx3-ubyte"), "wb") as f:
        f.write(np.array([2051, n, 28, 28], ">i4").tobytes() + images.tobytes())
    with open(os.path.join(d, "train-labels-idx1-ubyte"), "wb") as f:
        f.write(np.array([2049, n], ">i4").tobytes() + labels.tobytes())


data_dir = tempfile.mkdtemp()
write_idx(data_dir, 128)


class Record(Callback):
    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_step_end(self, run_context):
        out = run_context.original_args().net_outputs
        if isinstance(out, (tuple, list)):
            out = out[0]
        self.losses.append(facts.num(out))


rec = Record()
with F.guard("model.train"):
    dataset = ms.dataset.MnistDataset(data_dir, usage="train", shuffle=False)
    dataset = dataset.map(operations=[ms.dataset.vision.Rescale(1.0 / 255, 0), ms.dataset.vision.HWC2CHW()],
                          input_columns="image")
    dataset = dataset.map(operations=[ms.dataset.transforms.TypeCast(ms.int32)], input_columns="label")
    dataset = dataset.batch(32, drop_remainder=True)
    model.train(1, dataset, callbacks=[rec])
F.put("train.steps", len(rec.losses))
F.put("train.losses_finite", [bool(np.isfinite(v)) for v in rec.losses])
F.put("train.params_finite", all(bool(np.isfinite(facts.arr(p)).all()) for p in net.trainable_params()))
F.put("train.param_dtypes", {k: facts.dt(p.dtype) for k, p in net.parameters_dict().items()})
F.emit()
