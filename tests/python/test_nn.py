# Cells from Python: a Python-defined SimpleNet and the C++ zoo SimpleNet give bitwise-equal
# outputs and gradients from the same seed (O0 and O2); attribute assignment registers sub-cells
# and Parameters; the layers take MindSpore's keywords and compute what numpy says; a wrong
# keyword is a TypeError naming it; a mixprec error arrives as mixprec.Error with its hint; a
# Conv2d whose output a Flatten transposes writes row-major from its next call, same values.
import numpy as np
import pytest

import mixprec as ms
from mixprec import nn, ops
from mixprec.common.initializer import Normal, initializer


class PySimpleNet(nn.Cell):  # the seed's SimpleNet, as written there (no layout hint, as the zoo's)
    def __init__(self):
        super(PySimpleNet, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, pad_mode='valid', weight_init=Normal(0.02))
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(32 * 26 * 26, 10)

    def construct(self, x):
        return self.fc(self.flatten(self.relu(self.conv1(x))))


def outputs_and_grads(net, x, label):
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')

    def forward(x, label):
        logits = net(x)
        return loss_fn(logits, label), logits

    (loss, logits), grads = ms.value_and_grad(forward, None, net.trainable_params(), has_aux=True)(x, label)
    return [loss.asnumpy(), logits.asnumpy()] + [g.asnumpy() for g in grads]


@pytest.mark.parametrize("level", ["O0", "O2"])
def test_python_cell_equals_cpp_zoo_cell_bitwise(level):
    rng = np.random.default_rng(1)
    x = ms.Tensor(rng.random((8, 1, 28, 28), np.float32))
    label = ms.Tensor(rng.integers(0, 10, 8).astype(np.int32))
    ms.set_seed(7)
    py_net = PySimpleNet()
    ms.set_seed(7)
    cpp_net = ms.zoo.SimpleNet()
    if level != "O0":
        ms.amp.auto_mixed_precision(py_net, level, ms.bfloat16)
        ms.amp.auto_mixed_precision(cpp_net, level, ms.bfloat16)
    assert [n for n, _ in py_net.parameters_and_names()] == [n for n, _ in cpp_net.parameters_and_names()]
    got, want = outputs_and_grads(py_net, x, label), outputs_and_grads(cpp_net, x, label)
    assert len(got) == 5  # loss, logits, 3 gradients
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_attribute_assignment_registers_cells_and_parameters():
    class Affine(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = ms.Parameter(ms.Tensor(np.eye(3, dtype=np.float32) * 2))
            self.frozen = ms.Parameter(ms.Tensor(np.ones(3, np.float32)), requires_grad=False)
            self.inner = nn.Dense(3, 2, weight_init="ones", bias_init="zeros")
            self.note = "not registered"

        def construct(self, x):
            return self.inner(ops.matmul(x, self.w) + self.frozen)

    net = Affine()
    assert [n for n, _ in net.parameters_and_names()] == ["w", "frozen", "inner.weight", "inner.bias"]
    assert len(net.trainable_params()) == 3
    x = ms.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    y = net(x).asnumpy()
    np.testing.assert_allclose(y, np.repeat((np.arange(6).reshape(2, 3) * 2 + 1).sum(1, keepdims=True), 2, 1))
    assert "Affine" in repr(net)


def test_layers_take_mindspore_keywords_and_match_numpy():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    t = ms.Tensor(x)
    np.testing.assert_allclose(nn.Softmax(axis=1)(t).asnumpy().sum(1), np.ones((2, 8, 8)), rtol=1e-6)
    pooled = nn.MaxPool2d(kernel_size=2, stride=2)(t).asnumpy()
    np.testing.assert_array_equal(pooled, x.reshape(2, 3, 4, 2, 4, 2).max((3, 5)))
    avg = nn.AvgPool2d(kernel_size=2, stride=2, pad_mode='valid')(t).asnumpy()
    np.testing.assert_allclose(avg, x.reshape(2, 3, 4, 2, 4, 2).mean((3, 5)), rtol=1e-5, atol=1e-6)
    bn = nn.BatchNorm2d(3, eps=1e-5, momentum=0.9)(t).asnumpy()  # training mode: batch statistics
    want = (x - x.mean((0, 2, 3), keepdims=True)) / np.sqrt(x.var((0, 2, 3), keepdims=True) + 1e-5)
    np.testing.assert_allclose(bn, want, rtol=1e-4, atol=1e-5)
    ln = nn.LayerNorm((8,), epsilon=1e-7)(t).asnumpy()
    np.testing.assert_allclose(ln, (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-7),
                               rtol=1e-4, atol=1e-5)
    conv = nn.Conv2d(3, 4, 3, stride=2, pad_mode='pad', padding=1, has_bias=True, bias_init='ones')
    assert conv(t).shape == (2, 4, 4, 4) and conv.bias is not None
    seq = nn.SequentialCell([nn.Flatten(), nn.Dense(192, 5, activation='relu')])
    out = seq(t).asnumpy()
    dense = seq[1]
    np.testing.assert_allclose(out, np.maximum(x.reshape(2, -1) @ dense.weight.asnumpy().T + dense.bias.asnumpy(), 0),
                               rtol=1e-5, atol=1e-5)
    assert nn.Dropout(p=0.5).set_train(False)(t).asnumpy().tolist() == x.tolist()
    w = initializer(Normal(0.02), (256, 256)).asnumpy()
    assert abs(w.std() - 0.02) < 0.002


def test_wrong_keyword_is_pythons_usual_type_error_naming_it():
    with pytest.raises(TypeError, match=r"^Conv2d\(\) got an unexpected keyword argument 'pad_mod'$"):
        nn.Conv2d(1, 32, 3, pad_mod='valid')
    with pytest.raises(TypeError, match=r"^Momentum\(\) got an unexpected keyword argument 'learning_rat'$"):
        nn.Momentum(nn.Dense(2, 2).trainable_params(), learning_rat=0.1, momentum=0.9)
    with pytest.raises(TypeError, match=r"^softmax\(\) got an unexpected keyword argument 'axes'$"):
        ops.softmax(ops.ones((2, 2)), axes=1)
    with pytest.raises(TypeError, match=r"^Tensor.reshape\(\) got an unexpected keyword argument 'foo'$"):
        ms.Tensor([1.0, 2.0]).reshape(2, foo=1)
    with pytest.raises(TypeError, match="incompatible"):  # right names, wrong types: pybind11's message
        nn.Dense("a", 2)


def test_mixprec_error_carries_message_and_hint():
    with pytest.raises(ms.Error) as e:
        nn.Dense(4, 2)(ms.Tensor(np.ones((3, 5), np.float32)))
    assert "5" in e.value.message and isinstance(e.value.hint, str)
    with pytest.raises(ms.Error) as e:
        ms.set_context(device_target="Ascend")
    assert "CPU" in e.value.message and e.value.hint == 'use device_target="CPU"'
    assert isinstance(e.value, RuntimeError)


def test_context_accepts_both_modes_and_names_the_device():
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    assert ms.get_context("mode") == ms.GRAPH_MODE and ms.get_context("device_target") == "CPU"
    ms.set_context(mode=ms.PYNATIVE_MODE)
    assert ms.get_context("mode") == ms.PYNATIVE_MODE
    with pytest.raises(ms.Error, match="no CUDA (backend|device)"):
        ms.set_context(device_target="GPU")
    assert ms.get_context("device_target") == "CPU"


def row_major(t):
    """True if t's byte strides are row-major for its shape (dims of size 1 ignored)."""
    step, ok = t.strides[-1], True
    for n, stride in zip(reversed(t.shape), reversed(t.strides)):
        ok = ok and (n == 1 or stride == step)
        step *= n
    return ok


def test_flattened_conv_output_becomes_row_major_with_the_same_values():
    rng = np.random.default_rng(5)
    x = ms.Tensor(rng.random((3, 1, 11, 11), np.float32))
    conv = nn.Conv2d(1, 6, 3, pad_mode='valid', weight_init=Normal(0.02))
    first = conv(x)
    assert not row_major(first), "channels-last until a Flatten says otherwise"
    flat = nn.Flatten()(nn.ReLU()(first))  # the seed's order: conv, relu, flatten
    second = conv(x)
    assert row_major(second), "the library chose row-major for this Conv2d"
    np.testing.assert_array_equal(first.asnumpy(), second.asnumpy())
    np.testing.assert_array_equal(flat.asnumpy(), nn.Flatten()(nn.ReLU()(second)).asnumpy())
    # A layout given explicitly is kept.
    fixed = nn.Conv2d(1, 6, 3, pad_mode='valid', weight_init=Normal(0.02), memory_format='channels_last')
    nn.Flatten()(fixed(x))
    assert not row_major(fixed(x))
    with pytest.raises(ValueError, match="memory_format must be 'any', 'channels_last' or 'contiguous'"):
        nn.Conv2d(1, 6, 3, memory_format='nhwc')
