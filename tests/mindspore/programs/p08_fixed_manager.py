# FixedLossScaleManager: defaults, getters, update_loss_scale through overflows, invalid values.
import mindspore as ms
from mindspore.train.loss_scale_manager import FixedLossScaleManager
from mindspore import amp
import facts

F = facts.Facts()
m = FixedLossScaleManager()
F.run("default.scale", lambda: m.get_loss_scale())
F.run("default.drop", lambda: m.get_drop_overflow_update())
m = FixedLossScaleManager(1024.0, drop_overflow_update=False)
F.run("seed.scale", lambda: m.get_loss_scale())
F.run("seed.drop", lambda: m.get_drop_overflow_update())
F.run("seed.scale_kind", lambda: facts.kind(m.get_loss_scale()))
traj = []
for overflow in [True, True, False, True, False, False]:
    m.update_loss_scale(overflow)
    traj.append(m.get_loss_scale())
F.put("seed.trajectory", traj)
F.run("int.scale", lambda: FixedLossScaleManager(256).get_loss_scale())
F.raises("error.below_one", lambda: FixedLossScaleManager(0.5))
F.raises("error.zero", lambda: FixedLossScaleManager(0))
F.raises("error.negative", lambda: FixedLossScaleManager(-2.0))
F.run("amp_alias", lambda: amp.FixedLossScaleManager is FixedLossScaleManager)
F.run("one_is_valid", lambda: FixedLossScaleManager(1.0).get_loss_scale())
F.emit()
