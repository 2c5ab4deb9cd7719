# Training from Python: Model with a Python callback (loss falls, eval), the optimizers against
# their formulas, mixprec.amp (levels, lists, build_train_network, loss scalers and managers,
# all_finite).
import numpy as np
import pytest

import mixprec as ms
from mixprec import amp, nn, ops
from mixprec.train import Callback, LossMonitor, Model
from mixprec.train.loss_scale_manager import DynamicLossScaleManager, FixedLossScaleManager
from conftest import mean_loss_fell


def small_data(fashion_mnist, n=1280, batch=64):
    v = ms.dataset.vision
    ds = ms.dataset.FashionMnistDataset(fashion_mnist, usage="train", num_samples=n)
    return ds.map(operations=[v.Rescale(1.0 / 255, 0), v.HWC2CHW()], input_columns="image").batch(batch, drop_remainder=True)


class Recorder(Callback):
    def __init__(self):
        super().__init__()
        self.losses, self.epochs = [], []

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        self.losses.append(cb.net_outputs)

    def epoch_end(self, run_context):  # MindSpore's older hook name works too
        self.epochs.append(run_context.original_args().cur_epoch_num)


def test_model_trains_with_python_callbacks_and_evaluates(fashion_mnist):
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Flatten(), nn.Dense(784, 64, activation='relu'), nn.Dense(64, 10))
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')
    opt = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    manager = DynamicLossScaleManager(2.0 ** 16, 2, 50)
    model = Model(network=net, loss_fn=loss_fn, optimizer=opt, metrics={"Accuracy": nn.Accuracy()},
                  amp_level="O2", loss_scale_manager=manager)
    rec = Recorder()
    model.train(2, small_data(fashion_mnist), callbacks=[rec, LossMonitor(10)])
    assert len(rec.losses) == 40 and rec.epochs == [1, 2]
    assert mean_loss_fell(rec.losses)
    assert opt.global_step == 40 - model.train_network.skipped_steps
    assert model.train_network.loss_scale_manager.get_loss_scale() == manager.get_loss_scale()
    assert model.eval(small_data(fashion_mnist, 640))["Accuracy"] > 0.6


def test_model_without_an_optimizer_evaluates_and_refuses_to_train(fashion_mnist):
    # MindSpore's Model(network, loss_fn, metrics=...) with no optimizer: eval and predict only.
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Flatten(), nn.Dense(784, 64, activation='relu'), nn.Dense(64, 10))
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')
    trained = Model(net, loss_fn, nn.Momentum(net.trainable_params(), 0.01, 0.9),
                    metrics={"Accuracy": nn.Accuracy()}, amp_level="O2")
    trained.train(1, small_data(fashion_mnist, 640))
    want = trained.eval(small_data(fashion_mnist, 640))["Accuracy"]
    model = Model(net, loss_fn, metrics={"Accuracy": nn.Accuracy(), "Loss": nn.Loss()})
    got = model.eval(small_data(fashion_mnist, 640))
    assert got["Accuracy"] == want and got["Loss"] > 0
    with pytest.raises(ms.Error, match="without an optimizer"):
        model.train(1, small_data(fashion_mnist, 640))


def test_callbacks_say_whether_they_may_lag():
    # Callback.may_lag: False unless a callback reads only its RunContext (then Model.train lets a
    # GPU's steps run ahead of the hooks); the C++ monitors say True, a Python subclass can too.
    class Lagging(Callback):
        def may_lag(self):
            return True

    assert Recorder().may_lag() is False
    assert LossMonitor(10).may_lag() is True
    assert Lagging().may_lag() is True


def test_optimizers_follow_their_formulas():
    p0 = np.array([1.0, -2.0, 0.5], np.float32)
    g = np.array([0.1, 0.2, -0.3], np.float32)
    for make, want in [
        (lambda p: nn.Momentum([p], learning_rate=0.1, momentum=0.9), lambda: p0 - 0.1 * (0.9 * g + g) - 0.1 * g),
        (lambda p: nn.SGD([p], learning_rate=0.1), lambda: p0 - 0.1 * g - 0.1 * g),
        (lambda p: nn.Adam([p], learning_rate=0.01), lambda: p0 - 0.01 * np.sign(g) - 0.01 * np.sign(g)),
    ]:
        p = ms.Parameter(ms.Tensor(p0))
        opt = make(p)
        opt([ms.Tensor(g)])
        opt((ms.Tensor(g),))
        np.testing.assert_allclose(p.asnumpy(), want(), rtol=1e-4, atol=1e-6)
        assert opt.global_step == 2 and opt.parameters[0].shape == (3,)


def test_amp_levels_lists_and_build_train_network():
    assert "Conv2d" in amp.get_white_list() or "conv2d" in amp.get_white_list()
    assert any(n.lower().startswith("softmax") for n in amp.get_black_list())
    rng = np.random.default_rng(5)
    x = ms.Tensor(rng.random((4, 1, 28, 28), np.float32))
    ms.set_seed(3)
    fp32 = ms.zoo.SimpleNet()
    ms.set_seed(3)
    low = amp.auto_mixed_precision(ms.zoo.SimpleNet(), "O2", ms.bfloat16)
    a, b = fp32(x).asnumpy(), low(x).asnumpy()
    assert low(x).dtype == ms.float32  # the output comes back in fp32
    assert not np.array_equal(a, b) and np.allclose(a, b, rtol=0.05, atol=0.02)  # bf16 arithmetic, close
    net = nn.SequentialCell(nn.Flatten(), nn.Dense(784, 10))
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    step = amp.build_train_network(network=net, optimizer=opt, loss_fn=loss_fn, level="O2",
                                   loss_scale_manager=FixedLossScaleManager(1024.0, drop_overflow_update=True))
    labels = ms.Tensor(rng.integers(0, 10, 4).astype(np.int32))
    losses = [step(x, labels).item() for _ in range(5)]
    assert losses[-1] < losses[0] and step.loss_scale_manager.get_loss_scale() == 1024.0
    custom = amp.custom_mixed_precision(nn.SequentialCell(nn.Flatten(), nn.Dense(784, 10)), black_list=[nn.Dense])
    assert custom(x).dtype == ms.float32


def test_loss_scalers_managers_and_all_finite():
    s = amp.StaticLossScaler(scale_value=1024.0)
    t = ms.Tensor(np.array([1.0, 2.0], np.float32))
    np.testing.assert_array_equal(s.scale(t).asnumpy(), [1024.0, 2048.0])
    a, b = s.unscale((t, t * 2))
    np.testing.assert_array_equal(b.asnumpy(), [2 / 1024, 4 / 1024])
    d = amp.DynamicLossScaler(scale_value=2.0 ** 10, scale_factor=2, scale_window=2)
    d.adjust(False)
    assert d.scale_value == 512.0
    d.adjust(True), d.adjust(ms.Tensor(True))
    assert d.scale_value == 1024.0
    assert amp.all_finite([t, t]) is True
    assert amp.all_finite((t, ms.Tensor(np.array([np.inf], np.float32)))) is False
    m = DynamicLossScaleManager(init_loss_scale=2.0 ** 24, scale_factor=2, scale_window=2000)
    m.update_loss_scale(True)
    assert m.get_loss_scale() == 2.0 ** 23 and m.get_drop_overflow_update()
    f = FixedLossScaleManager(1024.0, drop_overflow_update=False)
    assert f.get_loss_scale() == 1024.0 and not f.get_drop_overflow_update()
