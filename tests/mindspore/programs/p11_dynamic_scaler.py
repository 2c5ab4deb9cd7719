# amp.DynamicLossScaler: adjust through real overflows (all_finite of unscaled gradients), the
# scale trajectory, the floor of 1, adjust's return, invalid values.
import numpy as np
import mindspore as ms
from mindspore import amp
import facts

F = facts.Facts()
s = amp.DynamicLossScaler(scale_value=2 ** 10, scale_factor=2, scale_window=3)
good = (ms.Tensor(np.array([1.0, 2.0], np.float32)), ms.Tensor(np.array([0.5], np.float16)))
bad = (ms.Tensor(np.array([np.inf, 2.0], np.float32)), ms.Tensor(np.array([0.5], np.float16)))
nan = (ms.Tensor(np.array([1.0], np.float32)), ms.Tensor(np.array([np.nan], np.float16)))
traj, rets = [], []
for step in "gggbggbbgggggg" + "n":
    grads = {"g": good, "b": bad, "n": nan}[step]
    finite = amp.all_finite(s.unscale(grads))
    rets.append(s.adjust(finite))
    traj.append(facts.num(s.scale_value))
F.put("w3.trajectory", traj)
F.put("w3.adjust_returns", rets)

s = amp.DynamicLossScaler(4, 4, 2)
traj = []
for finite in [False, False, False, True, True, True, True]:
    s.adjust(ms.Tensor(finite))
    traj.append(facts.num(s.scale_value))
F.put("f4.floor_then_grow", traj)

s = amp.DynamicLossScaler(2.0 ** 127, 2, 1)
traj = []
for _ in range(2):
    s.adjust(ms.Tensor(True))
    traj.append(facts.num(s.scale_value))
F.put("huge.growth_stops_at_finite", traj)

s = amp.DynamicLossScaler(8, 2, 1)
F.run("adjust.python_bool", lambda: (s.adjust(False), facts.num(s.scale_value)))
F.raises("error.below_one", lambda: amp.DynamicLossScaler(0.5, 2, 10))
F.raises("error.window_zero", lambda: amp.DynamicLossScaler(1024, 2, 0))
F.raises("error.factor_zero", lambda: amp.DynamicLossScaler(1024, 0, 10))
F.raises("error.factor_float", lambda: amp.DynamicLossScaler(1024, 2.5, 10))
F.emit()
