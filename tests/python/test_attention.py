# The surface a custom layer needs (issue 31, item 4): a transformer block written in Python as a
# MindSpore user would (multi-head attention with permute, split / chunk and
# ops.scaled_dot_product_attention; LayerNorm, Dense, GELU) trains at O0 and O2 and reaches the
# fused attention kernel, which the kernel profile shows; its output and gradients equal the same
# block written with matmul + softmax. The new ops against numpy, forward and backward; their
# wrong arguments are ValueError / TypeError.
import math

import numpy as np
import pytest

import mixprec as ms
from mixprec import amp, nn, ops


def cpu_has_flash():
    """The fused CPU kernel needs AVX2, FMA and F16C (src/ops/cpu/attention.cpp); else ref runs."""
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return False
    return {"avx2", "fma", "f16c"} <= set(flags)


def rows_of(op):
    return {(r["phase"], r["impl"]) for r in ops.profile_rows() if r["op"] == op}


@pytest.fixture
def profile():
    ops.profile_reset()
    ops.set_profiling(True)
    yield
    ops.set_profiling(False)
    ops.profile_reset()  # an empty profile prints nothing at exit


def grads(fn, *arrays):
    """value_and_grad of fn over every argument (float32 numpy arrays in, numpy out)."""
    ts = [ms.Tensor(a) for a in arrays]
    v, g = ms.value_and_grad(fn, tuple(range(len(ts))))(*ts)
    g = (g,) if len(ts) == 1 else g  # MindSpore: a one-element grad_position gives one Tensor
    return v.asnumpy(), [x.asnumpy() for x in g]


# ---------------------------------------------------------------- permute, split, chunk, ...

def test_shape_ops_match_numpy_and_return_views_with_gradients():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 6, 5)).astype(np.float32)
    x = ms.Tensor(a)
    np.testing.assert_array_equal(x.permute(2, 0, 1).asnumpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(x.permute((0, 2, 1)).asnumpy(), a.transpose(0, 2, 1))
    np.testing.assert_array_equal(x.permute([-1, 0, 1]).asnumpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(ops.permute(x, (1, 0, 2)).asnumpy(), a.transpose(1, 0, 2))
    np.testing.assert_array_equal(x.T.asnumpy(), a.T)
    np.testing.assert_array_equal(x.swapdims(0, -1).asnumpy(), a.swapaxes(0, -1))
    # split: an int gives equal pieces and a smaller last one; a list gives each size.
    assert [t.shape for t in ops.split(x, 4, axis=1)] == [(2, 4, 5), (2, 2, 5)]
    pieces = ops.split(x, [1, 3, 2], 1)
    assert isinstance(pieces, tuple) and [t.shape for t in pieces] == [(2, 1, 5), (2, 3, 5), (2, 2, 5)]
    for got, want in zip(pieces, np.split(a, [1, 4], axis=1)):
        np.testing.assert_array_equal(got.asnumpy(), want)
        assert np.shares_memory(got.asnumpy(), x.asnumpy())  # views, as the slices are
    assert [t.shape for t in x.split((2, 4), axis=-2)] == [(2, 2, 5), (2, 4, 5)]
    # chunk: pieces of ceil(n / chunks), so possibly fewer than asked (MindSpore's note).
    assert [t.shape[2] for t in ops.chunk(x, 3, axis=2)] == [2, 2, 1]
    assert [t.shape[1] for t in x.chunk(4, axis=1)] == [2, 2, 2]
    assert [t.shape[1] for t in ops.chunk(x, np.int64(6), 1)] == [1] * 6  # numpy ints are ints
    for got, want in zip(ops.unbind(x, dim=1), np.moveaxis(a, 1, 0)):
        np.testing.assert_array_equal(got.asnumpy(), want)
    np.testing.assert_array_equal(x.narrow(2, 1, 3).asnumpy(), a[:, :, 1:4])
    np.testing.assert_array_equal(ops.narrow(x, 1, 4, 2).asnumpy(), a[:, -2:])
    np.testing.assert_array_equal(ops.stack([x, x * 2], axis=-1).asnumpy(), np.stack([a, a * 2], -1))
    np.testing.assert_array_equal(x.unsqueeze(-1).asnumpy(), a[..., None])

    # Gradients through the C++ autograd ops: every piece weighted differently.
    w = rng.standard_normal((2, 6, 5)).astype(np.float32)

    def f(t):
        q, k, v = ops.chunk(t.permute(1, 0, 2), 3, axis=0)  # [2, 2, 5] each
        u = ops.unbind(ops.narrow(t, 2, 1, 3), dim=0)  # 2 x [6, 3]
        return ops.sum(q * 1.0 + k * 2.0 + v * 3.0) + ops.sum(ops.stack(u, 0) * ms.Tensor(w[:, :, 1:4]))

    _, (g,) = grads(f, a)
    want = np.repeat(np.array([1.0, 2.0, 3.0], np.float32), 2)[None, :, None] * np.ones_like(a)
    want[:, :, 1:4] += w[:, :, 1:4]
    np.testing.assert_allclose(g, want, rtol=1e-6)


def test_more_of_mindsporess_tensor_and_ops_surface():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 2)).astype(np.float32)
    x = ms.Tensor(a)
    e = np.exp(a - a.max(-1, keepdims=True))
    cases = [(x.matmul(ms.Tensor(b)), a @ b), (x.softmax(-1), e / e.sum(-1, keepdims=True)),
             (ops.softmax(x, axis=-1, dtype=ms.float16), (e / e.sum(-1, keepdims=True)).astype(np.float16)),
             (x.exp(), np.exp(a)), (x.abs().sqrt(), np.sqrt(np.abs(a))), (x.abs().rsqrt(), 1 / np.sqrt(np.abs(a))),
             (x.abs().log(), np.log(np.abs(a))), (x.neg(), -a), (x.sigmoid(), 1 / (1 + np.exp(-a))),
             (x.tanh(), np.tanh(a)), (x.clamp(-0.5, 0.5), np.clip(a, -0.5, 0.5)), (ops.clip(x, max=0.1), np.minimum(a, 0.1)),
             (x.masked_fill(ms.Tensor(a > 0), 0.0), np.where(a > 0, 0, a)), (x.add(1.0), a + 1), (x.sub(x), a * 0),
             (x.mul(x), a * a), (x.div(2.0), a / 2), (x.pow(2.0), a ** 2), (x.maximum(ms.Tensor(a * 0)), np.maximum(a, 0)),
             (x.minimum(ms.Tensor(a * 0)), np.minimum(a, 0)), (x[:1].broadcast_to((3, 4)), np.broadcast_to(a[:1], (3, 4))),
             (x[:1].expand_as(x), np.broadcast_to(a[:1], (3, 4))), (x.half(), a.astype(np.float16)),
             (x.half().float(), a.astype(np.float16).astype(np.float32)),
             (ops.bmm(ms.Tensor(a[None]), ms.Tensor(b[None])), (a @ b)[None]), (ops.swapdims(x, 0, 1), a.T),
             (ops.layer_norm(x, (4,)), (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5))]
    for got, want in cases:
        assert got.dtype == {np.float16: ms.float16}.get(want.dtype.type, ms.float32)
        np.testing.assert_allclose(got.asnumpy().astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("call,error,match", [
    (lambda x: x.permute(0, 1), ValueError, r"not a permutation .* has 2 entries, expected 3"),
    (lambda x: x.permute(0, 2, 2), ValueError, "dim 2 appears twice"),
    (lambda x: ops.permute(x, (0, 1, 3)), ValueError, r"3 is out of range \[-3, 3\)"),
    (lambda x: x.transpose(1, 0), ValueError, "not a permutation"),
    (lambda x: ops.transpose(x, (0, 1, 1.5)), TypeError, "axis must be an int, got float"),
    (lambda x: x.permute("012"), TypeError, "tuple or list of ints"),
    (lambda x: ops.split(x, [2, 2], axis=1), ValueError, r"sums to 4, but axis 1 .* has 6 elements"),
    (lambda x: x.split([7, -1], 1), ValueError, "negative size"),
    (lambda x: ops.split(x, 2, axis=3), ValueError, r"axis 3 is out of range for a tensor of 3 dims"),
    (lambda x: ops.split(x, 0), ValueError, "must be positive"),
    (lambda x: ops.split(x, 2.0), TypeError, "int or a tuple / list of ints, got float"),
    (lambda x: ops.split(x, 2, axis=True), TypeError, "axis must be an int, got bool"),
    (lambda x: ops.chunk(x, 0), ValueError, "chunks must be positive"),
    (lambda x: x.chunk(2, axis=-4), ValueError, "out of range"),
    (lambda x: ops.unbind(x, 3), ValueError, "dim 3 is out of range"),
    (lambda x: ops.narrow(x, 1, 4, 3), ValueError, "goes past axis 1 of size 6"),
    (lambda x: ops.narrow(x, 1, -2, 2), ValueError, r"start -2 is out of range \[0, 6\)"),
    (lambda x: ops.swapaxes(x, 0, 3), ValueError, "axis1 3 is out of range"),
    (lambda x: ops.stack([x, x[:, :2]]), ValueError, "must have one shape"),
])
def test_wrong_arguments_are_python_errors(call, error, match):
    with pytest.raises(error, match=match):
        call(ms.Tensor(np.zeros((2, 6, 5), np.float32)))


# ---------------------------------------------------------------- scaled_dot_product_attention

def np_attention(q, k, v, do, allowed=None, bias=None, scale=None):
    """PyTorch's definition in numpy (float64), with its backward for the upstream gradient do."""
    q, k, v, do = (t.astype(np.float64) for t in (q, k, v, do))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    if bias is not None:
        s = s + bias
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = p @ v
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return o, ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, dv


@pytest.mark.parametrize("case", ["plain", "causal", "causal_lq_lt_lk", "bool_mask", "mask_and_causal",
                                  "float_mask", "scale", "3d", "5d"])
def test_sdpa_matches_numpy_forward_and_backward(case, profile):
    rng = np.random.default_rng(2)
    lead, lq, lk, e, ev = (2, 3), 5, 5, 8, 4
    if case == "causal_lq_lt_lk":
        lq = 3
    if case == "3d":
        lead = (3,)
    if case == "5d":
        lead = (2, 2, 3)
    q = rng.standard_normal(lead + (lq, e)).astype(np.float32)
    k = rng.standard_normal(lead + (lk, e)).astype(np.float32)
    v = rng.standard_normal(lead + (lk, ev)).astype(np.float32)
    do = rng.standard_normal(lead + (lq, ev)).astype(np.float32)
    kw, allowed, bias, scale = {}, None, None, None
    tril = np.tril(np.ones((lq, lk), bool))  # PyTorch's is_causal: query i sees keys j <= i
    if case.startswith("causal"):
        kw, allowed = {"is_causal": True}, tril
    if case in ("bool_mask", "mask_and_causal", "5d"):
        m = rng.random((lq, lk)) < 0.7
        m[:, 0] = True  # no row without a key
        kw["attn_mask"], allowed = ms.Tensor(m), m
        if case == "mask_and_causal":
            kw["is_causal"], allowed = True, m & tril
    if case == "float_mask":
        bias = rng.standard_normal((1, 1, lq, lk)).astype(np.float32)
        kw["attn_mask"] = ms.Tensor(bias)
    if case == "scale":
        kw["scale"] = scale = 0.3

    def f(tq, tk, tv):
        return ops.sum(ops.scaled_dot_product_attention(tq, tk, tv, **kw) * ms.Tensor(do))

    out = ops.scaled_dot_product_attention(ms.Tensor(q), ms.Tensor(k), ms.Tensor(v), **kw)
    want = np_attention(q, k, v, do, allowed, bias, scale)
    assert out.shape == want[0].shape
    np.testing.assert_allclose(out.asnumpy(), want[0], rtol=1e-4, atol=1e-5)
    _, g = grads(f, q, k, v)
    for got, w in zip(g, want[1:]):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)
    fused = rows_of("scaled_dot_product_attention")
    if case == "float_mask":  # an additive mask: the composition of matmul and softmax
        assert not fused and rows_of("softmax"), ops.profile_rows()
    else:
        impl = "flash" if cpu_has_flash() else "ref"
        assert fused == {("forward", impl), ("backward", impl)}, ops.profile_rows()


def test_sdpa_dropout_runs_the_composition_and_differentiates():
    rng = np.random.default_rng(3)
    q = ms.Tensor(rng.standard_normal((1, 2, 4, 8)).astype(np.float32))
    ms.set_seed(7)
    a = ops.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    ms.set_seed(7)
    b = ops.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    c = ops.scaled_dot_product_attention(q, q, q)
    np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())  # the seeded generator, as ops.dropout
    assert not np.allclose(a.asnumpy(), c.asnumpy())
    _, g = ms.value_and_grad(lambda t: ops.sum(ops.scaled_dot_product_attention(t, t, t, dropout_p=0.1)))(q)
    assert np.isfinite(g.asnumpy()).all() and g.shape == q.shape


@pytest.mark.parametrize("kw,error,match", [
    ({"key": np.zeros((2, 3, 5, 7))}, ValueError, "query's last dim 8 differs from key's 7"),
    ({"value": np.zeros((2, 3, 4, 8))}, ValueError, "key has 5 positions but value has 4"),
    ({"key": np.zeros((2, 1, 5, 8))}, ValueError, "same leading"),
    ({"query": np.zeros(8)}, ValueError, "at least 2 dims"),
    ({"query": np.zeros((2, 3, 5, 8), np.int32)}, TypeError, "query must be a floating tensor, got i32"),
    ({"attn_mask": np.zeros((4, 5), bool)}, ValueError, r"attn_mask of shape \(4, 5\) does not broadcast"),
    ({"attn_mask": np.zeros((5, 5), np.int32)}, TypeError, "attn_mask must be a bool tensor"),
    ({"attn_mask": "causal"}, TypeError, "attn_mask must be a Tensor or None, got str"),
    ({"dropout_p": 1.0}, ValueError, r"dropout_p must be in \[0, 1\)"),
    ({"scale": float("inf")}, ValueError, "scale must be finite"),
])
def test_sdpa_wrong_arguments_are_python_errors(kw, error, match):
    args = {n: np.zeros((2, 3, 5, 8), np.float32) for n in ("query", "key", "value")}
    args.update(kw)
    args = {n: ms.Tensor(a) if isinstance(a, np.ndarray) else a for n, a in args.items()}
    with pytest.raises(error, match=match):
        ops.scaled_dot_product_attention(**args)
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'causal'"):
        ops.scaled_dot_product_attention(args["query"], args["query"], args["query"], causal=True)


# ---------------------------------------------------------------- a user-written transformer block

class Attention(nn.Cell):
    """Multi-head self-attention as a MindSpore user writes it; `fused` False is the reference."""

    def __init__(self, dim, heads, causal):
        super().__init__()
        self.qkv = nn.Dense(dim, 3 * dim)
        self.proj = nn.Dense(dim, dim)
        self.heads, self.causal, self.fused = heads, causal, True

    def construct(self, x):
        b, n, d = x.shape
        h = self.heads
        q, k, v = ops.split(self.qkv(x), d, axis=-1)  # three [b, n, d] views
        q, k, v = (t.reshape(b, n, h, d // h).permute(0, 2, 1, 3) for t in (q, k, v))
        self.seen_dtype = q.dtype  # what the AMP level gave attention (bf16 at O2)
        if self.fused:
            o = ops.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:  # the same attention written with matmul and softmax
            s = ops.matmul(q, k.swapaxes(-1, -2)) * (1.0 / math.sqrt(d // h))
            if self.causal:
                s = s.masked_fill(ms.Tensor(np.triu(np.ones((n, n), bool), 1)), float("-inf"))
            o = ops.matmul(ops.softmax(s, axis=-1), v)
        return self.proj(o.permute(0, 2, 1, 3).reshape(b, n, d))


class Block(nn.Cell):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim, heads, causal):
        super().__init__()
        self.ln1 = nn.LayerNorm((dim,))
        self.attn = Attention(dim, heads, causal)
        self.ln2 = nn.LayerNorm((dim,))
        self.fc1 = nn.Dense(dim, 2 * dim)
        self.gelu = nn.GELU()
        self.fc2 = nn.Dense(2 * dim, dim)

    def construct(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(self.gelu(self.fc1(self.ln2(x))))


class Classifier(nn.Cell):
    def __init__(self, features=6, dim=32, heads=4, classes=2):
        super().__init__()
        self.embed = nn.Dense(features, dim)
        self.block = Block(dim, heads, causal=True)
        self.head = nn.Dense(dim, classes)

    def construct(self, x):
        h = self.block(self.embed(x))
        first, rest = ops.split(h, [1, h.shape[1] - 1], axis=1)  # the first token, and the others
        return self.head(ops.mean(rest, axis=1) + ops.squeeze(first, 1))


def task(rng, n=32, length=8, features=6):
    x = rng.standard_normal((n, length, features)).astype(np.float32)
    y = (x[:, :, 0].sum(1) > 0).astype(np.int32)
    return x, y


def loss_and_grads(net, x, y):
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    params = net.trainable_params()
    loss, g = ms.value_and_grad(lambda a, b: loss_fn(net(a), b), None, params)(ms.Tensor(x), ms.Tensor(y))
    return loss.item(), [t.astype(ms.float32).asnumpy() for t in g]


@pytest.mark.parametrize("level", ["O0", "O2"])
def test_user_transformer_block_equals_its_matmul_softmax_composition(level, profile):
    rng = np.random.default_rng(4)
    x, y = task(rng)
    ms.set_seed(0)
    net = Classifier()
    if level == "O2":
        net = amp.auto_mixed_precision(net, "O2", ms.bfloat16)
    attn = net.block.attn
    ops.profile_reset()
    loss_f, g_f = loss_and_grads(net, x, y)
    fused = rows_of("scaled_dot_product_attention")
    attn.fused = False
    loss_c, g_c = loss_and_grads(net, x, y)
    impl = "flash" if cpu_has_flash() else "ref"
    assert fused == {("forward", impl), ("backward", impl)}, ops.profile_rows()
    assert attn.seen_dtype == {"O0": ms.float32, "O2": ms.bfloat16}[level]
    assert len(g_f) == len(net.trainable_params()) == 16
    # O0: f32 throughout, one summation order apart (measured: 5e-7 of the largest gradient).
    # O2: bf16 matmuls; the composition also rounds the scores to bf16 before its f32 softmax,
    # where the fused kernel keeps them in f32 (measured: 2.4e-3).
    rtol = 1e-4 if level == "O0" else 0.02
    assert loss_f == pytest.approx(loss_c, rel=rtol)
    for name, a, b in zip([n for n, _ in net.parameters_and_names()], g_f, g_c):
        assert np.abs(a - b).max() <= rtol * np.abs(b).max(), (level, name, np.abs(a - b).max(), np.abs(b).max())


@pytest.mark.parametrize("level", ["O0", "O2"])
@pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE])
def test_user_transformer_block_trains_through_the_fused_kernel(level, mode, profile):
    rng = np.random.default_rng(5)
    x, y = task(rng)
    ms.set_seed(1)
    previous = ms.get_context("mode")
    ms.set_context(mode=mode)
    try:
        net = Classifier()
        loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        opt = nn.Adam(net.trainable_params(), learning_rate=3e-3)
        step = amp.build_train_network(network=net, optimizer=opt, loss_fn=loss_fn, level=level)
        tx, ty = ms.Tensor(x), ms.Tensor(y)
        losses = [step(tx, ty).item() for _ in range(12)]
    finally:
        ms.set_context(mode=previous)
    assert all(np.isfinite(losses)) and np.mean(losses[-3:]) < 0.8 * np.mean(losses[:3]), losses
    impl = "flash" if cpu_has_flash() else "ref"
    assert rows_of("scaled_dot_product_attention") == {("forward", impl), ("backward", impl)}, ops.profile_rows()
    assert not rows_of("softmax")  # no unfused attention anywhere in the step


def test_profile_rows_carry_each_kernels_flops_and_bytes(profile):
    # [B, H, L, D] = [2, 3, 5, 8] forward: 2 B H L^2 (D + Dv) FLOPs, q, k, v, o and the f32
    # log-sum-exp [2, 3, 5] read or written once.
    q = ms.Tensor(np.ones((2, 3, 5, 8), np.float32))
    ops.scaled_dot_product_attention(q, q, q)
    (row,) = [r for r in ops.profile_rows() if r["op"] == "scaled_dot_product_attention"]
    assert row["calls"] == 1
    assert row["flops"] == 2 * 2 * 3 * 5 * 5 * (8 + 8)
    assert row["bytes"] == 4 * (4 * 2 * 3 * 5 * 8 + 2 * 3 * 5)
