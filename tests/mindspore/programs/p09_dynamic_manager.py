# DynamicLossScaleManager: defaults, the scale trajectory through overflows and clean windows,
# the floor of 1, invalid values, and the stop after too many consecutive overflows.
import mindspore as ms
from mindspore.train.loss_scale_manager import DynamicLossScaleManager
import facts

F = facts.Facts()
m = DynamicLossScaleManager()
F.run("default.scale", lambda: m.get_loss_scale())
F.run("default.drop", lambda: m.get_drop_overflow_update())

m = DynamicLossScaleManager(2 ** 10, 2, 3)
pattern = [False, False, False, True, False, False, True, True, False, False, False, False, False, False, False]
traj = []
for overflow in pattern:
    m.update_loss_scale(overflow)
    traj.append(m.get_loss_scale())
F.put("w3.trajectory", traj)

m = DynamicLossScaleManager(4.0, 4, 1)
traj = []
for overflow in [True, True, True, False, False]:
    m.update_loss_scale(overflow)
    traj.append(m.get_loss_scale())
F.put("f4.floor_then_grow", traj)

m = DynamicLossScaleManager(2.0 ** 127, 2, 1)
traj = []
for overflow in [False, False]:
    m.update_loss_scale(overflow)
    traj.append(m.get_loss_scale())
F.put("huge.growth", traj)

F.raises("error.init_below_one", lambda: DynamicLossScaleManager(0.5))
F.raises("error.window_zero", lambda: DynamicLossScaleManager(1024, 2, 0))
F.raises("error.factor_zero", lambda: DynamicLossScaleManager(1024, 0, 10))
F.raises("error.factor_one", lambda: DynamicLossScaleManager(1024, 1, 10))

m = DynamicLossScaleManager(2 ** 10, 2, 10)
stopped_at = None
for i in range(1, 1100):
    try:
        m.update_loss_scale(True)
    except Exception as e:  # noqa: BLE001
        stopped_at = (i, facts.error_kind(e))
        break
F.put("stop.after_consecutive_overflows", stopped_at)
F.emit()
