# The Python cases of the hostile-user campaign (issue 29, ../shared/reference/hostile-cases.md):
# each mistake ends with an exception that says what to do, never a crash or pybind11's list of
# signatures. A Cell that assigns a sub-cell before Cell.__init__ runs is a TypeError (it
# segfaulted); a bad learning rate gets the library's message; a construct that returns None is a
# TypeError naming the class; dataset.map of a Python function says functions are unsupported.
import math

import numpy as np
import pytest

import mixprec as ms
from mixprec import nn


def test_cell_assigned_before_init_is_a_type_error():
    class Early(nn.Cell):
        def __init__(self):
            self.fc = nn.Dense(3, 4)  # before super().__init__()
            super().__init__()

    with pytest.raises(TypeError) as e:
        Early()
    assert "before Cell.__init__ ran: call super().__init__() first" in str(e.value)
    assert "Early" in str(e.value)


def test_plain_attribute_before_init_is_kept():
    class Early(nn.Cell):
        def __init__(self):
            self.width = 4  # not a cell: harmless
            super().__init__()
            self.fc = nn.Dense(3, self.width)

        def construct(self, x):
            return self.fc(x)

    net = Early()
    assert net(ms.Tensor(np.ones((2, 3), np.float32))).shape == (2, 4)


@pytest.mark.parametrize("lr", [math.nan, math.inf, -1.0])
def test_bad_learning_rate_gets_the_library_message(lr):
    params = nn.Dense(3, 4).trainable_params()
    for make in (lambda: nn.Momentum(params, lr, 0.9), lambda: nn.SGD(params, lr), lambda: nn.Adam(params, lr),
                 lambda: nn.AdamW(params, lr)):
        with pytest.raises(ms.Error) as e:
            make()
        assert "learning rate must be finite and >= 0" in str(e.value)
        assert "incompatible" not in str(e.value)


def test_learning_rate_of_the_wrong_type_names_it():
    params = nn.Dense(3, 4).trainable_params()
    with pytest.raises(TypeError) as e:
        nn.Momentum(params, "fast", 0.9)
    assert "learning_rate: expected a number or a LearningRate, got a str" in str(e.value)


def test_good_learning_rates_still_work():
    params = nn.Dense(3, 4).trainable_params()
    nn.Momentum(params, 0.01, 0.9)
    nn.Momentum(params, 1, 0.9)
    nn.Momentum(params, nn.LearningRate.cosine(0.1, 10), 0.9)


def test_construct_returning_none_is_a_type_error_naming_the_class():
    class Forgetful(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(3, 4)

        def construct(self, x):
            self.fc(x)  # no return

    with pytest.raises(TypeError) as e:
        Forgetful()(ms.Tensor(np.ones((2, 3), np.float32)))
    assert "Forgetful.construct returned None (is a `return` missing?)" in str(e.value)
    assert "incompatible function arguments" not in str(e.value)


def test_dataset_map_of_a_python_function_says_it_is_unsupported(fashion_mnist):
    ds = ms.dataset.FashionMnistDataset(fashion_mnist, usage="test", num_samples=4, shuffle=False)
    for ops in (lambda x: x, [lambda x: x]):
        with pytest.raises(TypeError) as e:
            ds.map(operations=ops, input_columns="image")
        assert "Python functions are not supported" in str(e.value)
        assert "not iterable" not in str(e.value)
