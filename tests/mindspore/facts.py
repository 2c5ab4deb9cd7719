"""Helpers for the conformance programs (tests/mindspore/programs/*.py).

A program is written once against MindSpore's names (`import mindspore as ms`) and run twice:
under MindSpore, and under mixprec (run_program.py maps the `mindspore` package onto `mixprec`).
It records facts (JSON values) with the helpers below and `emit()`s them; run_suite.py compares
the two runs fact by fact.

Only plain Python and numpy are used here, so the helpers work the same in both frameworks: what
differs between them shows up in the facts, not in these helpers.
"""
import json
import math
import sys

import numpy as np

_BUILTIN_ERRORS = (TypeError, ValueError, IndexError, KeyError, AttributeError, NotImplementedError,
                   ImportError, RuntimeError, OSError, ArithmeticError, AssertionError)


def error_kind(e):
    """The first builtin exception class in the MRO of e's class: mixprec.Error counts as a
    RuntimeError (it is one), MindSpore's own classes as the builtin they derive from."""
    for cls in type(e).__mro__:
        if cls in _BUILTIN_ERRORS:
            return cls.__name__
    return "Exception"


def dt(dtype):
    """A dtype as one canonical lower-case name: float16, bfloat16, float32, int64, bool..."""
    s = str(dtype).split(".")[-1].lower()
    return {"bool_": "bool", "float": "float32", "half": "float16"}.get(s, s)


def kind(x):
    """What sort of Python value x is: 'Tensor', 'Parameter', 'float', 'int', 'bool', 'tuple', 'list', 'None', ..."""
    if x is None:
        return "None"
    name = type(x).__name__
    if name in ("Tensor", "Parameter", "StubTensor", "_TensorPy"):
        return "Tensor"
    return name


def num(x):
    """A scalar (Python number, bool, or 1-element Tensor) as a float, inf and nan kept."""
    if hasattr(x, "asnumpy"):
        a = x.asnumpy() if dt(x.dtype) != "bfloat16" else x.astype(_ms().float32).asnumpy()
        return float(np.asarray(a, dtype=np.float64).reshape(-1)[0])
    return float(x)


def arr(x):
    """A Tensor's values as a float64 numpy array (bf16 read through float32)."""
    if dt(x.dtype) == "bfloat16":
        x = x.astype(_ms().float32)
    return np.asarray(x.asnumpy(), dtype=np.float64)


def _ms():
    return sys.modules["mindspore"]


def clean(v):
    """A value made JSON-safe: floats rounded to 6 significant digits, inf/nan as strings."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return float(f"{v:.6g}")
    if isinstance(v, np.ndarray):
        return [clean(x) for x in v.reshape(-1).tolist()]
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    return repr(v)


class Facts:
    def __init__(self):
        self.facts = {}
        self.messages = {}

    def put(self, key, value):
        if key in self.facts:
            raise KeyError(f"fact {key!r} recorded twice")
        self.facts[key] = clean(value)

    def run(self, key, fn):
        """Records fn()'s value, or {'raises': kind} if it raises (the message is kept for the report)."""
        try:
            v = fn()
        except Exception as e:  # noqa: BLE001 - which error is the fact
            self.facts[key] = {"raises": error_kind(e)}
            self.messages[key] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
            return None
        self.put(key, v)
        return v

    def raises(self, key, fn):
        """Records which builtin error class fn() raises, or 'none'."""
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            self.facts[key] = error_kind(e)
            self.messages[key] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
            return
        self.facts[key] = "none"

    def guard(self, key):
        """A context manager: an exception inside the block is recorded as fact `key` = kind (and
        swallowed), so that one missing API does not end the program; `key` = 'ok' otherwise."""
        facts = self

        class _Guard:
            def __enter__(self):
                return self

            def __exit__(self, et, e, tb):
                if e is None:
                    facts.facts[key] = "ok"
                    return False
                if not isinstance(e, Exception):
                    return False
                facts.facts[key] = {"raises": error_kind(e)}
                facts.messages[key] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
                return True

        return _Guard()

    def emit(self):
        print("FACTS " + json.dumps({"facts": self.facts, "messages": self.messages}, sort_keys=True))
        sys.stdout.flush()


