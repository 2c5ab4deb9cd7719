# Shared fixtures of the Python tests (run by ctest as python.*, with PYTHONPATH=build/python and
# the interpreter of build/python-venv, which scripts/setup.sh makes with the `safetensors` package).
import os

import pytest

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


@pytest.fixture
def fashion_mnist():
    assert os.path.exists(FASHION_MNIST), "Fashion-MNIST is missing: scripts/setup.sh installs dataset-fashion-mnist"
    return FASHION_MNIST


def mean_loss_fell(losses, k=5):
    """True if the mean of the last k losses is below the mean of the first k."""
    assert len(losses) >= 2 * k, f"only {len(losses)} losses"
    return sum(losses[-k:]) / k < sum(losses[:k]) / k
