# save_checkpoint / load_checkpoint / load_param_into_net: what load_param_into_net returns, the
# dtypes after loading fp32 weights into an O2 (float16) network, and which error a shape
# mismatch raises.
import os
import tempfile
import numpy as np
import mindspore as ms
from mindspore import nn, amp
import facts

ms.set_context(mode=ms.PYNATIVE_MODE)
F = facts.Facts()


class Net(nn.Cell):
    def __init__(self, hidden=8):
        super().__init__()
        self.fc1 = nn.Dense(4, hidden)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(hidden, 2)

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


d = tempfile.mkdtemp()
path = os.path.join(d, "net.ckpt")
src = Net()
ms.save_checkpoint(src, path)
params = ms.load_checkpoint(path)
F.put("ckpt.keys", sorted(params.keys()))
F.put("ckpt.dtypes", {k: facts.dt(v.dtype) for k, v in params.items()})

dst = amp.auto_mixed_precision(Net(), "O2", dtype=ms.float16)
with F.guard("load_o2.ok"):
    r = ms.load_param_into_net(dst, params)
    F.put("load_o2.return_kind", facts.kind(r))
    F.put("load_o2.return", [sorted(x) for x in r] if isinstance(r, tuple) else r)
inner = Net()
ms.load_param_into_net(inner, params)
F.put("loaded.equal", all(np.array_equal(facts.arr(p), facts.arr(params[k]))
                          for k, p in inner.parameters_dict().items()))
F.put("loaded_o2.param_dtypes", {k: facts.dt(p.dtype) for k, p in dst.parameters_dict().items()})

x = ms.Tensor(np.ones((3, 4), np.float32))
F.put("o2.output_dtype", facts.dt(dst(x).dtype))
F.put("o2.close_to_fp32", bool(np.allclose(facts.arr(dst(x)), facts.arr(inner(x)), rtol=1e-2, atol=1e-2)))

partial = {k: v for k, v in params.items() if k.startswith("fc1")}
with F.guard("partial.ok"):
    r = ms.load_param_into_net(Net(), partial)
    F.put("partial.return", [sorted(x) for x in r] if isinstance(r, tuple) else r)
extra = dict(params)
extra["unused.weight"] = ms.Parameter(ms.Tensor(np.ones((2,), np.float32)), name="unused.weight")
with F.guard("extra.ok"):
    r = ms.load_param_into_net(Net(), extra)
    F.put("extra.return", [sorted(x) for x in r] if isinstance(r, tuple) else r)
F.raises("strict_partial", lambda: ms.load_param_into_net(Net(), partial, strict_load=True))
F.raises("shape_mismatch", lambda: ms.load_param_into_net(Net(hidden=5), params))
F.raises("missing_file", lambda: ms.load_checkpoint(os.path.join(d, "nope.ckpt")))
with open(os.path.join(d, "bad.ckpt"), "wb") as f:
    f.write(b"not a checkpoint")
F.raises("corrupt_file", lambda: ms.load_checkpoint(os.path.join(d, "bad.ckpt")))

# a checkpoint saved from the O2 network holds fp32 weights
path2 = os.path.join(d, "o2.ckpt")
ms.save_checkpoint(dst, path2)
F.put("o2_ckpt.dtypes", {k: facts.dt(v.dtype) for k, v in ms.load_checkpoint(path2).items()})
F.emit()
