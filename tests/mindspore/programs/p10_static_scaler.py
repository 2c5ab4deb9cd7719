# amp.StaticLossScaler: scale / unscale of one Tensor and of a tuple, dtypes kept, adjust's return,
# scale_value, invalid values.
import numpy as np
import mindspore as ms
from mindspore import amp
import facts

F = facts.Facts()
s = amp.StaticLossScaler(1024)
loss = ms.Tensor(np.array(0.5, np.float32))
F.run("scale.value", lambda: facts.num(s.scale(loss)))
F.run("scale.dtype", lambda: facts.dt(s.scale(loss).dtype))
F.run("unscale.value", lambda: facts.num(s.unscale(loss)))
g16 = ms.Tensor(np.array([2048.0, 4.0], np.float16))
g32 = ms.Tensor(np.array([1.0, -3.0], np.float32))
with F.guard("tuple.ok"):
    out = s.unscale((g16, g32))
    F.put("tuple.kind", facts.kind(out))
    F.put("tuple.len", len(out))
    F.put("tuple.dtypes", [facts.dt(t.dtype) for t in out])
    F.put("tuple.values", [facts.arr(t) for t in out])
with F.guard("list.ok"):
    out = s.scale([g16, g32])
    F.put("list.kind", facts.kind(out))
    F.put("list.dtypes", [facts.dt(t.dtype) for t in out])
    F.put("list.values", [facts.arr(t) for t in out])
F.run("f16.scale_overflows", lambda: facts.arr(s.scale(ms.Tensor(np.array([100.0], np.float16)))))
F.run("adjust.true", lambda: s.adjust(ms.Tensor(True)))
F.run("adjust.false", lambda: s.adjust(ms.Tensor(False)))
F.run("scale_value", lambda: facts.num(s.scale_value))
F.run("scale_value.kind", lambda: facts.kind(s.scale_value))
F.raises("error.below_one", lambda: amp.StaticLossScaler(0.5))
F.raises("error.string", lambda: amp.StaticLossScaler("1024"))
F.emit()
