# Checkpoints from Python against the reference `safetensors` package (PyPI; scripts/setup.sh
# installs it into build/python-venv, where ctest runs these tests): what mixprec writes, the
# package reads with identical values, and what the package writes (f32, f16, bf16) mixprec loads.
import numpy as np

try:
    import safetensors.numpy
    from safetensors import serialize_file
except ImportError as e:  # a failure, not a skip: the cross-check is required
    raise ImportError("the reference `safetensors` package is missing: scripts/setup.sh installs it into "
                      "build/python-venv, the interpreter ctest runs these tests with") from e

import mixprec as ms
from mixprec import nn


def make_net():
    return nn.SequentialCell(nn.Conv2d(1, 4, 3, has_bias=True), nn.BatchNorm2d(4), nn.Flatten(), nn.Dense(4 * 8 * 8, 3))


def test_mixprec_checkpoint_is_read_by_safetensors_with_identical_values(tmp_path):
    ms.set_seed(5)
    net = make_net()
    net(ms.Tensor(np.random.default_rng(6).random((2, 1, 8, 8), np.float32)))  # moves the BN statistics
    path = tmp_path / "net.ckpt"
    ms.save_checkpoint(net, str(path))
    read = safetensors.numpy.load_file(str(path))
    state = {n: t.asnumpy() for n, t in net.parameters_and_names()}
    state.update({"1.moving_mean": net[1].moving_mean.asnumpy(), "1.moving_variance": net[1].moving_variance.asnumpy()})
    assert sorted(read) == sorted(state)
    for name, value in state.items():
        assert read[name].dtype == np.float32
        np.testing.assert_array_equal(read[name], value)
    loaded = ms.load_checkpoint(str(path))
    fresh = make_net()
    assert ms.load_param_into_net(fresh, loaded) == ([], [])
    x = ms.Tensor(np.ones((1, 1, 8, 8), np.float32))
    np.testing.assert_array_equal(fresh.set_train(False)(x).asnumpy(), net.set_train(False)(x).asnumpy())


def test_safetensors_files_are_loaded_by_mixprec(tmp_path):
    rng = np.random.default_rng(7)
    values = {"a": rng.standard_normal((3, 4)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float16),
              "c": np.arange(6, dtype=np.int64).reshape(2, 3)}
    path = tmp_path / "ref.safetensors"
    safetensors.numpy.save_file(values, str(path))
    got = ms.load_checkpoint(str(path))
    for name, value in values.items():
        np.testing.assert_array_equal(got[name].asnumpy(), value)
    # bf16 has no numpy type: written from its bit patterns, read back as the same bits.
    bits = np.array([0x3F80, 0xC020, 0x7F80, 0x0001], np.uint16)
    serialize_file({"w": {"dtype": "bfloat16", "shape": [4], "data": bits.tobytes()}}, str(tmp_path / "bf16.safetensors"))
    w = ms.load_checkpoint(str(tmp_path / "bf16.safetensors"))["w"]
    assert w.dtype == ms.bfloat16
    np.testing.assert_array_equal(w.asnumpy(), bits)
    np.testing.assert_array_equal(w.astype(ms.float32).asnumpy()[:3], [1.0, -2.5, np.inf])
    # And one loads into a network by name, cast to the parameter's dtype.
    dense = nn.Dense(4, 3)
    safetensors.numpy.save_file({"weight": values["a"], "bias": np.ones(3, np.float32)}, str(path))
    assert ms.load_param_into_net(dense, ms.load_checkpoint(str(path))) == ([], [])
    np.testing.assert_array_equal(dense.weight.asnumpy(), values["a"])
