# amp.build_train_network on the CPU: which loss-scale managers each framework accepts at each
# level, what one step returns, and which errors invalid arguments raise.
import numpy as np
import mindspore as ms
from mindspore import nn, amp
from mindspore.train.loss_scale_manager import FixedLossScaleManager, DynamicLossScaleManager
import facts

ms.set_context(mode=ms.PYNATIVE_MODE)
F = facts.Facts()
x = ms.Tensor(np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32))
y = ms.Tensor(np.array([0, 1, 2, 1], np.int32))


def parts():
    net = nn.SequentialCell([nn.Dense(6, 8), nn.ReLU(), nn.Dense(8, 3)])
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    return net, opt, loss


managers = {
    "none": lambda: None,
    "fixed_nodrop": lambda: FixedLossScaleManager(1024.0, drop_overflow_update=False),
    "fixed_drop": lambda: FixedLossScaleManager(1024.0, drop_overflow_update=True),
    "dynamic": lambda: DynamicLossScaleManager(),
}
for level in ["O0", "O2", "O3"]:
    for mname, make in managers.items():
        net, opt, loss = parts()
        key = f"{level}.{mname}"
        with F.guard(f"{key}.build"):
            step = amp.build_train_network(net, opt, loss, level=level, loss_scale_manager=make())
            out = step(x, y)
            F.put(f"{key}.out_kind", facts.kind(out))
            first = out[0] if isinstance(out, tuple) else out
            F.put(f"{key}.loss_dtype", facts.dt(first.dtype))
            F.put(f"{key}.loss_finite", bool(np.isfinite(facts.num(first))))
# the level's default manager (argument left out): O2 defaults to DynamicLossScaleManager
for level in ["O0", "O1", "O2", "O3"]:
    net, opt, loss = parts()
    with F.guard(f"default_manager.{level}"):
        amp.build_train_network(net, opt, loss, level=level)
net, opt, loss = parts()
F.raises("error.bad_level", lambda: amp.build_train_network(net, opt, loss, level="O5"))
F.raises("error.unknown_kwarg", lambda: amp.build_train_network(net, opt, loss, level="O2", foo=1))
F.raises("error.manager_type", lambda: amp.build_train_network(net, opt, loss, level="O2", loss_scale_manager=3))
F.raises("error.optimizer_type", lambda: amp.build_train_network(net, None, loss, level="O2"))
F.raises("error.boost_level", lambda: amp.build_train_network(net, opt, loss, level="O2", boost_level="O9",
                                                              loss_scale_manager=None))
F.raises("error.cast_model_type_bf16", lambda: amp.build_train_network(
    net, opt, loss, level="O2", cast_model_type=ms.bfloat16, loss_scale_manager=None))
F.emit()
