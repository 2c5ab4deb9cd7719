# Tensor casts: astype and ops.cast dtypes, f16 overflow to inf, bf16 rounding, promotion when
# float16 and float32 meet.
import numpy as np
import mindspore as ms
from mindspore import ops
import facts

F = facts.Facts()
a = ms.Tensor(np.array([1.0, 70000.0, 1e-8, 3.14159], np.float32))
F.run("astype_f16.dtype", lambda: facts.dt(a.astype(ms.float16).dtype))
F.run("astype_f16.values", lambda: facts.arr(a.astype(ms.float16)))
F.run("astype_bf16.values", lambda: facts.arr(a.astype(ms.bfloat16)))
F.run("ops_cast.dtype", lambda: facts.dt(ops.cast(a, ms.float16).dtype))
F.run("roundtrip.values", lambda: facts.arr(a.astype(ms.float16).astype(ms.float32)))
h = ms.Tensor(np.array([1.5], np.float16))
s = ms.Tensor(np.array([2.0], np.float32))
F.run("promote.add", lambda: facts.dt((h + s).dtype))
F.run("promote.mul", lambda: facts.dt((s * h).dtype))
F.run("promote.python_scalar", lambda: facts.dt((h * 2.0).dtype))
F.run("promote.bf16_f16", lambda: facts.dt((h + h.astype(ms.bfloat16)).dtype))
F.run("int_tensor.dtype", lambda: facts.dt(ms.Tensor([1, 2]).dtype))
F.run("float_list.dtype", lambda: facts.dt(ms.Tensor([1.0, 2.0]).dtype))
F.run("f64_numpy.dtype", lambda: facts.dt(ms.Tensor(np.array([1.0])).dtype))
F.run("f16_max_plus", lambda: facts.arr(ms.Tensor(np.array([65504.0], np.float16)) * 2.0))
F.run("f16_matmul_overflow", lambda: facts.arr(ops.matmul(ms.Tensor(np.full((1, 4), 200.0, np.float16)),
                                                          ms.Tensor(np.full((4, 1), 200.0, np.float16)))))
F.emit()
