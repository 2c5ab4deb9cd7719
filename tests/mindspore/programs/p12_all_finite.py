# amp.all_finite: what it returns for finite, inf, nan, f16, bf16, list and tuple inputs, and for
# an empty tuple.
import numpy as np
import mindspore as ms
from mindspore import amp
import facts

F = facts.Facts()
t = ms.Tensor
cases = {
    "finite_f32": (t(np.array([1.0, -2.0], np.float32)), t(np.array([3.0], np.float32))),
    "inf_f32": (t(np.array([1.0, np.inf], np.float32)), t(np.array([3.0], np.float32))),
    "neg_inf": (t(np.array([-np.inf], np.float32)),),
    "nan_f32": (t(np.array([np.nan], np.float32)),),
    "inf_f16": (t(np.array([1.0], np.float32)), t(np.array([70000.0], np.float32)).astype(ms.float16)),
    "max_f16": (t(np.array([65504.0], np.float16)),),
    "bf16_finite": (t(np.array([3.0e38], np.float32)).astype(ms.bfloat16),),
    "one_tensor_tuple": (t(np.array([1.0], np.float32)),),
    "big_finite": (t(np.array([3.4e38], np.float32)),),
    "2d": (t(np.ones((3, 4), np.float32)),),
}
for name, inputs in cases.items():
    F.run(f"{name}", lambda: facts.num(amp.all_finite(inputs)) != 0)
F.run("list_input", lambda: facts.num(amp.all_finite([t(np.array([1.0], np.float32))])) != 0)
F.run("return_kind", lambda: facts.kind(amp.all_finite(cases["finite_f32"])))
F.raises("empty_tuple", lambda: bool(amp.all_finite(())))
F.emit()
