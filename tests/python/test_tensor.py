# Tensors through numpy: round trips for every dtype (bf16 as numpy.uint16 bit patterns, f16 as
# numpy.float16), asnumpy() sharing the tensor's memory, Python numbers and lists, the Tensor
# methods and operators checked against numpy.
import numpy as np
import pytest

import mixprec as ms


def bf16_bits(x):
    """Round-to-nearest-even float32 -> bfloat16 bit patterns (NaN-free input)."""
    u = np.asarray(x, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


@pytest.mark.parametrize("np_dtype,ms_dtype", [
    (np.float32, ms.float32), (np.float64, ms.float64), (np.float16, ms.float16),
    (np.int32, ms.int32), (np.int64, ms.int64), (np.uint8, ms.uint8), (np.bool_, ms.bool_)])
def test_numpy_round_trip_keeps_values_and_dtype(np_dtype, ms_dtype):
    a = (np.arange(24).reshape(2, 3, 4) % 7 * 1.5 - 3).astype(np_dtype)
    t = ms.Tensor(a)
    assert t.dtype == ms_dtype and t.shape == (2, 3, 4)
    b = t.asnumpy()
    assert b.dtype == np_dtype and b.shape == a.shape
    np.testing.assert_array_equal(a, b)


def test_bf16_round_trips_as_uint16_bit_patterns():
    x = np.array([1.0, -2.5, 3.14159, 1e-3, 65504.0, 1e30], np.float32)
    t = ms.Tensor(x).astype(ms.bfloat16)
    bits = t.asnumpy()
    assert bits.dtype == np.uint16
    np.testing.assert_array_equal(bits, bf16_bits(x))
    back = ms.Tensor(bits, dtype=ms.bfloat16)  # the bits, reinterpreted
    assert back.dtype == ms.bfloat16
    np.testing.assert_array_equal(back.asnumpy(), bits)
    np.testing.assert_array_equal(back.astype(ms.float32).asnumpy(), (bits.astype(np.uint32) << 16).view(np.float32))
    with pytest.raises(TypeError, match="bfloat16"):
        ms.Tensor(bits)  # uint16 alone is ambiguous


def test_f16_is_numpy_float16_both_ways():
    x = np.array([0.1, 65504.0, 6e-8, -1.0], np.float32)
    t = ms.Tensor(x).astype(ms.float16)
    np.testing.assert_array_equal(t.asnumpy(), x.astype(np.float16))
    np.testing.assert_array_equal(ms.Tensor(x.astype(np.float16)).astype(ms.float32).asnumpy(),
                                  x.astype(np.float16).astype(np.float32))


def test_asnumpy_shares_memory_and_is_read_only():
    t = ms.Tensor(np.zeros((3, 4), np.float32))
    a = t.asnumpy()
    t.fill_(2.5)  # an in-place write through the Tensor API is seen by the earlier array
    np.testing.assert_array_equal(a, np.full((3, 4), 2.5, np.float32))
    assert np.shares_memory(a, t.asnumpy())
    assert not a.flags.writeable
    v = t[1:, ::2]  # a strided view shares too, with numpy strides in bytes
    assert v.asnumpy().strides == (16, 8) and np.shares_memory(v.asnumpy(), a)


def test_tensor_from_python_numbers_and_lists_follow_mindspore():
    assert ms.Tensor([1.0, 2.0]).dtype == ms.float32
    assert ms.Tensor([1, 2]).dtype == ms.int64
    assert ms.Tensor(3.5).shape == () and ms.Tensor(3.5).item() == 3.5
    assert ms.Tensor([1, 2], dtype=ms.float16).dtype == ms.float16


def test_methods_and_operators_match_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32) + 3
    ta, tb = ms.Tensor(a), ms.Tensor(b)
    for got, want in [(ta + tb, a + b), (ta - tb, a - b), (ta * tb, a * b), (ta / tb, a / b), (-ta, -a),
                      (ta + 2, a + 2), (2 - ta, 2 - a), (ta * 0.5, a * 0.5), (1 / tb, 1 / b), (ta @ tb.transpose(), a @ b.T),
                      (ta.sum(axis=1), a.sum(1)), (ta.mean(), a.mean()), (ta.reshape(4, 3), a.reshape(4, 3)),
                      (ta[1], a[1]), (ta[:, 1:3], a[:, 1:3]), (ta.astype(ms.float64), a.astype(np.float64))]:
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-6, atol=1e-6)
    assert ta.argmax(axis=1).asnumpy().tolist() == a.argmax(1).tolist()
    assert len(ta) == 3 and ta.ndim == 2 and ta.size == 12
