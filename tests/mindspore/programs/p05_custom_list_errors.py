# Which error each invalid custom_mixed_precision / auto_mixed_precision call raises.
import mindspore as ms
from mindspore import nn, amp
import facts

F = facts.Facts()


def net():
    return nn.SequentialCell([nn.Dense(4, 4), nn.ReLU()])


F.raises("custom.both_lists", lambda: amp.custom_mixed_precision(net(), white_list=[nn.Dense], black_list=[nn.ReLU]))
F.raises("custom.no_list", lambda: amp.custom_mixed_precision(net()))
F.raises("custom.white_not_a_list", lambda: amp.custom_mixed_precision(net(), white_list=nn.Dense))
F.raises("custom.white_instance", lambda: amp.custom_mixed_precision(net(), white_list=[nn.Dense(2, 2)]))
F.raises("custom.dtype_float32", lambda: amp.custom_mixed_precision(net(), white_list=[nn.Dense], dtype=ms.float32))
F.raises("custom.not_a_cell", lambda: amp.custom_mixed_precision(lambda x: x, white_list=[nn.Dense]))
F.raises("auto.bad_level", lambda: amp.auto_mixed_precision(net(), "O4"))
F.raises("auto.lowercase_level", lambda: amp.auto_mixed_precision(net(), "o2"))
F.raises("auto.dtype_float32", lambda: amp.auto_mixed_precision(net(), "O2", dtype=ms.float32))
F.raises("auto.not_a_cell", lambda: amp.auto_mixed_precision(lambda x: x, "O2"))
F.raises("auto.O0_dtype_float32", lambda: amp.auto_mixed_precision(net(), "O0", dtype=ms.float32))
n = net()
F.run("auto.O0_returns_same_object", lambda: amp.auto_mixed_precision(n, "O0", dtype=ms.float16) is n)
F.raises("auto.level_int", lambda: amp.auto_mixed_precision(net(), 2))
F.emit()
