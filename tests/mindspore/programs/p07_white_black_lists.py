# get_white_list / get_black_list: their entries (by name) and that each returns a copy.
import mindspore as ms
from mindspore import nn, amp
import facts

F = facts.Facts()


def names(lst):
    return sorted(getattr(x, "__name__", str(x)) for x in lst)


F.run("white.names", lambda: names(amp.get_white_list()))
F.run("black.names", lambda: names(amp.get_black_list()))
F.run("white.kind", lambda: facts.kind(amp.get_white_list()))
F.run("white.has_Dense", lambda: nn.Dense in amp.get_white_list() or "Dense" in amp.get_white_list())
F.run("white.has_Conv2d", lambda: nn.Conv2d in amp.get_white_list() or "Conv2d" in amp.get_white_list())
F.run("black.has_BatchNorm2d",
      lambda: nn.BatchNorm2d in amp.get_black_list() or "BatchNorm2d" in amp.get_black_list())
F.run("black.has_LayerNorm", lambda: nn.LayerNorm in amp.get_black_list() or "LayerNorm" in amp.get_black_list())
w = amp.get_white_list()
n = len(w)
w.append(nn.Flatten)
F.run("white.copy", lambda: len(amp.get_white_list()) == n)
b = amp.get_black_list()
m = len(b)
b.clear()
F.run("black.copy", lambda: len(amp.get_black_list()) == m)
F.emit()
