// ops.scaled_dot_product_attention for Python, and the kernel profile (mixprec/ops/profile.h).
//
// MindSpore 2.x has no scaled dot-product attention that runs on the CPU (ops.flash_attention_score
// is Ascend-only, with its own head_num / input_layout arguments), so this follows PyTorch's
// torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=None,
// dropout_p=0.0, is_causal=False, *, scale=None): query [..., Lq, E], key [..., Lk, E], value
// [..., Lk, Ev] -> [..., Lq, Ev], with the same leading dims. Without dropout and with no mask or
// a bool mask (True: may attend), it is one call of the C++ op ops::scaled_dot_product_attention:
// the fused FlashAttention kernel, which keeps nothing of size [Lq, Lk] for the backward. A float
// attn_mask (added to the scores) or dropout_p > 0 runs the composition of the C++ ops instead
// (matmul, masked_fill, add, softmax, dropout, matmul), differentiable too. is_causal is PyTorch's
// top-left triangle (query i sees keys j <= i); the C++ op's causal flag is the bottom-right one,
// the same when Lq == Lk, and otherwise a bool mask carries the triangle.
#include <cmath>
#include <limits>

#include "binding.h"
#include "mixprec/ops/profile.h"

namespace mixprec::python {
namespace {

constexpr const char* kWhat = "scaled_dot_product_attention";

bool is_bool_mask(const Tensor& m) { return m.dtype() == DType::boolean || m.dtype() == DType::u8; }

// The keys each query may attend to, as a new bool tensor of `shape` ([..., Lq, Lk]): the user's
// bool mask (broadcast; undefined: every key), and PyTorch's top-left causal triangle when
// `causal`; inverted (the keys to hide, for masked_fill) when `invert`. Masks are not
// differentiated: this is host arithmetic on bytes.
Tensor host_mask(const Tensor& user, bool causal, const Shape& shape, bool invert, Device device) {
  const int64_t n = shape_numel(shape), lq = shape[shape.size() - 2], lk = shape.back();
  std::vector<uint8_t> b = user.defined()
                               ? ops::broadcast_to(user.detach(), shape).to_vector<uint8_t>()
                               : std::vector<uint8_t>(static_cast<size_t>(n), 1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = (i / lk) % lq, col = i % lk;
    const bool allowed = b[static_cast<size_t>(i)] != 0 && (!causal || col <= row);
    b[static_cast<size_t>(i)] = allowed != invert;
  }
  return Tensor::from_vector(b, shape, DType::boolean).to(device);
}

// x [..., L, E] as 4-D [B, H, L, E]: leading ones added, or the leading dims but the last merged.
Tensor to_4d(const Tensor& x) {
  Shape s = x.shape();
  while (s.size() < 4) s.insert(s.begin(), 1);
  if (s.size() > 4) {
    int64_t b = 1;
    for (size_t i = 0; i + 3 < s.size(); ++i) b *= s[i];
    s = {b, s[s.size() - 3], s[s.size() - 2], s.back()};
  }
  return ops::reshape(x, s);
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                  double dropout_p, std::optional<double> scale) {
  const std::pair<const char*, const Tensor*> named[] = {{"query", &q}, {"key", &k}, {"value", &v}};
  for (auto [name, t] : named) {
    if (!is_floating(t->dtype()))
      throw py::type_error(std::string(kWhat) + ": " + name + " must be a floating tensor, got " +
                           std::string(dtype_name(t->dtype())));
    if (t->dim() < 2)
      throw py::value_error(std::string(kWhat) + ": " + name +
                            " must have at least 2 dims (..., L, " + "E), got shape " +
                            shape_text(t->shape()));
  }
  const auto lead = [](const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); };
  if (lead(k) != lead(q) || lead(v) != lead(q))
    throw py::value_error(std::string(kWhat) +
                          ": query, key and value must have the same leading " +
                          "(batch, head) dims, got shapes " + shape_text(q.shape()) + ", " +
                          shape_text(k.shape()) + " and " + shape_text(v.shape()));
  if (q.size(-1) != k.size(-1))
    throw py::value_error(std::string(kWhat) + ": query's last dim " + std::to_string(q.size(-1)) +
                          " differs from key's " + std::to_string(k.size(-1)));
  if (k.size(-2) != v.size(-2))
    throw py::value_error(std::string(kWhat) + ": key has " + std::to_string(k.size(-2)) +
                          " positions but value has " + std::to_string(v.size(-2)));
  if (!(dropout_p >= 0.0 && dropout_p < 1.0))
    throw py::value_error(std::string(kWhat) + ": dropout_p must be in [0, 1), got " +
                          std::to_string(dropout_p));
  if (scale && !std::isfinite(*scale))
    throw py::value_error(std::string(kWhat) + ": scale must be finite, got " +
                          std::to_string(*scale));
  if (!mask.defined()) return;
  if (!is_bool_mask(mask) && !is_floating(mask.dtype()))
    throw py::type_error(
        std::string(kWhat) + ": attn_mask must be a bool tensor (True: may attend) " +
        "or a floating one (added to the scores), got " + std::string(dtype_name(mask.dtype())));
  Shape scores = lead(q);
  scores.push_back(q.size(-2));
  scores.push_back(k.size(-2));
  bool fits = mask.dim() <= static_cast<int64_t>(scores.size());
  for (int64_t d = 1; fits && d <= mask.dim(); ++d) {
    const int64_t m = mask.size(-d), s = scores[scores.size() - static_cast<size_t>(d)];
    fits = m == s || m == 1;
  }
  if (!fits)
    throw py::value_error(std::string(kWhat) + ": attn_mask of shape " + shape_text(mask.shape()) +
                          " does not broadcast to the scores' shape " + shape_text(scores));
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const py::object& attn_mask,
                 double dropout_p, bool is_causal, std::optional<double> scale) {
  if (!attn_mask.is_none() && !py::isinstance<Tensor>(attn_mask))
    throw py::type_error(std::string(kWhat) + ": attn_mask must be a Tensor or None, got " +
                         std::string(py::str(py::type::of(attn_mask).attr("__name__"))));
  const Tensor mask = attn_mask.is_none() ? Tensor() : attn_mask.cast<Tensor>();
  check_inputs(q, k, v, mask, dropout_p, scale);
  py::gil_scoped_release release;

  const int64_t lq = q.size(-2), lk = k.size(-2);
  Shape out_shape(q.shape().begin(), q.shape().end() - 1);
  out_shape.push_back(v.size(-1));
  const Tensor q4 = to_4d(q), k4 = to_4d(k), v4 = to_4d(v);
  const Shape scores4 = {q4.size(0), q4.size(1), lq, lk};
  Shape scores = Shape(q.shape().begin(), q.shape().end() - 1);
  scores.push_back(lk);
  const bool float_mask = mask.defined() && !is_bool_mask(mask);
  const Tensor bool_mask = mask.defined() && !float_mask ? mask : Tensor();
  // A bool mask as 4-D: as given when it fits (the op broadcasts it), else materialised.
  const auto mask4 = [&](const Tensor& m) {
    return m.dim() <= 4 && q.dim() <= 4
               ? m
               : host_mask(m, false, scores, false, q.device()).reshape(scores4);
  };
  // The keys a query may see (or, inverted, those to hide), the causal triangle included.
  const auto allowed = [&](bool invert) {
    if (!bool_mask.defined()) return host_mask({}, is_causal, {lq, lk}, invert, q.device());
    return host_mask(bool_mask, is_causal, scores, invert, q.device()).reshape(scores4);
  };

  Tensor out;
  if (!float_mask && dropout_p == 0.0) {  // the fused kernel
    ops::AttentionOptions o{.scale = scale};
    if (is_causal && lq == lk) {
      o.causal = true;  // top-left and bottom-right agree
      if (bool_mask.defined()) o.mask = mask4(bool_mask);
    } else if (is_causal) {
      o.mask = allowed(false);
    } else if (bool_mask.defined()) {
      o.mask = mask4(bool_mask);
    }
    out = ops::scaled_dot_product_attention(q4, k4, v4, o);
  } else {  // the composition: a float mask or dropout on the probabilities
    const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
    Tensor sc = ops::mul(ops::matmul(q4, ops::transpose(k4, -2, -1)), s);
    if (is_causal || bool_mask.defined())
      sc = ops::masked_fill(sc, allowed(true), -std::numeric_limits<double>::infinity());
    if (float_mask)
      sc = ops::add(sc, mask.dim() <= 4 && q.dim() <= 4
                            ? mask
                            : ops::reshape(ops::broadcast_to(mask, scores), scores4));
    Tensor p = ops::softmax(sc, -1);
    if (dropout_p > 0.0) p = ops::dropout(p, dropout_p, true, default_generator());
    out = ops::matmul(p, v4);
  }
  return ops::reshape(out, out_shape);
}

}  // namespace

void bind_attention(Modules& m) {
  m.ops.def(
      "scaled_dot_product_attention", &attention, "query"_a, "key"_a, "value"_a,
      "attn_mask"_a = py::none(), "dropout_p"_a = 0.0, "is_causal"_a = false, py::kw_only(),
      "scale"_a = py::none(),
      "softmax(query @ key^T * scale + mask) @ value, PyTorch's "
      "torch.nn.functional.scaled_dot_product_attention (MindSpore 2.x has no CPU "
      "counterpart).\n\nquery [..., Lq, E], key [..., Lk, E], value [..., Lk, Ev] with the same "
      "leading dims -> [..., Lq, Ev]. scale defaults to 1/sqrt(E). attn_mask: a bool tensor "
      "(True: may attend) or a float one added to the scores, broadcast to [..., Lq, Lk]. "
      "is_causal: query i attends to keys j <= i (PyTorch's top-left rule); with attn_mask, "
      "both apply. Without dropout and with no mask or a bool one this is the fused C++ "
      "kernel (ops::scaled_dot_product_attention: nothing of size [Lq, Lk] is kept for the "
      "backward); a float mask or dropout_p > 0 (applied whenever given, as in PyTorch) runs "
      "the composition of matmul, softmax and dropout.");

  m.ops.def("set_profiling", &ops::set_profiling, "enabled"_a,
            "mixprec only: turns the kernel profile on or off (MIXPREC_PROFILE=1 turns it on for "
            "the whole process). While on, each kernel dispatch adds its time to the row of its "
            "(op, phase, kernel).");
  m.ops.def("profiling", &ops::profiling, "mixprec only: whether the kernel profile is on.");
  m.ops.def("profile_reset", &ops::profile_reset, "mixprec only: empties the kernel profile.");
  m.ops.def(
      "profile_rows",
      [] {
        py::list rows;
        for (const ops::ProfileRow& r : ops::profile_rows())
          rows.append(py::dict("op"_a = r.op, "phase"_a = r.phase, "impl"_a = r.impl,
                               "seconds"_a = r.seconds, "calls"_a = r.calls,
                               "flops"_a = r.work.flops, "bytes"_a = r.work.bytes));
        return rows;
      },
      "mixprec only: the kernel profile, one dict per (op, phase, kernel) with its total "
      "seconds and calls, the FLOPs of its products (GEMMs, convolutions, attention; else 0) and "
      "the bytes of the tensors it read and wrote, the most time first: e.g. {'op': "
      "'scaled_dot_product_attention', 'phase': 'forward', 'impl': 'flash', ...}.");
}

}  // namespace mixprec::python
