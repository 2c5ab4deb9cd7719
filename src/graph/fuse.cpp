// GRAPH_MODE's fusion patterns (fuse.h). Each rewrites one recorded call so that it also does the
// work of a later or earlier call, and empties that one. Conditions shared by all:
//  - the buffer between the two calls is an intermediate (made in the step, held by nothing
//    outside the plan) and exactly these two calls hold it, so no one else reads it;
//  - no call between the two holds a buffer whose read or write the fusion moves in time;
//  - the kernel that eager chose accepts the fused problem (`declines` is empty): a fusion never
//    changes the kernel, so it cannot make a call slower by moving it to another implementation;
//  - the fused kernel rounds where eager did (the problem types' comments say how).
// Patterns:
//  1. BatchNorm forward, then ReLU of its output: BatchNorm writes relu(y) into the ReLU's output
//     (BatchNormFwdProblem::relu); y is never written.
//  2. ReLU backward (relu_mask of the incoming gradient by the ReLU's output), then BatchNorm
//     backward of the masked gradient: BatchNorm masks as it reads (BatchNormBwdProblem::relu_y).
//  3. An add, then ReLU of its output (a residual block's end): one add_relu pass writes the
//     ReLU's output (PointwiseFn::add_relu).
// The holders are computed once, before any fusion; a fusion only moves a write earlier, to a
// call that already held the buffers it reads, so the later patterns' conditions stay sound.
//  4. (elide_round_trip_casts, run after 1-3 on holders computed again) A cast of a 16-bit x to
//     f32, y, and later a cast of y (or a reshape of it) back to x's dtype, z, each writing every
//     element at the place in memory it read it from: z's bytes are x's bit for bit (every
//     f16 / bf16 value is an f32; the one exception is a signalling NaN, which the conversions
//     quiet and no kernel produces). The second cast is removed and z's storage aliases x's
//     bytes, provided that nothing writes x from the first cast until z's last use, nothing but
//     the second cast writes z, and z is an intermediate of its own, packed from offset 0. At O1
//     a white-list op's 16-bit output is cast to f32 and, when the next op is on the white list
//     too (conv -> ReLU -> Dense), cast straight back; backward does the same with gradients.
#include "graph/fuse.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/strided_copy.h"
#include "ops/dispatch.h"
#include "ops/elementwise_problem.h"
#include "ops/norm_problem.h"

namespace mixprec::graph::fusion {
namespace {

using ops::BatchNormBwdProblem;
using ops::BatchNormFwdProblem;
using ops::PointwiseFn;
using ops::PointwiseProblem;
using ops::RecordedCall;

// What the plan knows about t's storage (null: made before the step, so not in the holdings).
const Holding* holding_of(const Holdings& holdings, const Tensor& t) {
  auto it = holdings.find(t.storage().get());
  return it == holdings.end() ? nullptr : &it->second;
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.storage() == b.storage() && a.offset() == b.offset() &&
         a.shape() == b.shape() && a.strides() == b.strides() && a.dtype() == b.dtype();
}

class Fuser {
 public:
  Fuser(std::vector<std::function<void()>>& kernels, const Holdings& holdings, bool verbose)
      : kernels_(kernels), holdings_(holdings), verbose_(verbose) {}

  int64_t run() {
    for (size_t i = 0; i < kernels_.size(); ++i) {
      if (auto* bn = call<BatchNormFwdProblem>(i)) fuse_bn_relu_forward(i, *bn);
      if (auto* pw = call<PointwiseProblem>(i)) {
        fuse_add_relu(i, *pw);
        fuse_relu_mask_bn_backward(i, *pw);
      }
    }
    return removed_;
  }

 private:
  template <class P> RecordedCall<P>* call(size_t k) {
    return kernels_[k] ? kernels_[k].template target<RecordedCall<P>>() : nullptr;
  }
  const Holding* holding(const Tensor& t) const { return holding_of(holdings_, t); }
  // t is an intermediate that exactly kernels a and b hold, and no kernel outside [a, b] reached
  // its memory (a kernel holding only a raw pointer would show there).
  bool only_between(const Tensor& t, size_t a, size_t b) const {
    const Holding* h = holding(t);
    const auto ia = static_cast<int64_t>(a), ib = static_cast<int64_t>(b);
    return h != nullptr && h->internal && h->kernels == std::vector<int64_t>{ia, ib} &&
           (h->first_touch < 0 || (h->first_touch >= ia && h->last_touch <= ib));
  }
  // No kernel strictly between a and b holds t's storage.
  bool untouched_between(const Tensor& t, size_t a, size_t b) const {
    const Holding* h = holding(t);
    if (h == nullptr) return false;
    return std::none_of(h->kernels.begin(), h->kernels.end(), [&](int64_t k) {
      return k > static_cast<int64_t>(a) && k < static_cast<int64_t>(b);
    });
  }
  // The other kernel (after `from`, or before it when backwards) holding t, if exactly one does.
  int64_t partner(const Tensor& t, size_t from) const {
    const Holding* h = holding(t);
    if (h == nullptr || h->kernels.size() != 2) return -1;
    const auto k = static_cast<int64_t>(from);
    return h->kernels[0] == k ? h->kernels[1] : h->kernels[1] == k ? h->kernels[0] : -1;
  }
  template <class P> bool accepts(const RecordedCall<P>& c, const P& fused) const {
    const ops::Impl<P>* impl = ops::kernel_of(c.run);
    return impl != nullptr && impl->declines(fused).empty();
  }
  void remove(size_t k, const char* what, size_t into, std::string_view impl) {
    kernels_[k] = nullptr;
    ++removed_;
    if (verbose_)
      std::fprintf(stderr, "mixprec: graph: fused %s (kernel %zu into %zu, %.*s)\n", what, k, into,
                   static_cast<int>(impl.size()), impl.data());
  }

  // The ReLU call that is the only reader of y, the output of call i, if there is one: its
  // index (or -1). Its output z can be written at i instead: no call in between holds it.
  int64_t relu_of(const Tensor& y, size_t i) {
    const int64_t j = partner(y, i);
    if (j <= static_cast<int64_t>(i)) return -1;
    const auto b = static_cast<size_t>(j);
    auto* relu = call<PointwiseProblem>(b);
    if (relu == nullptr || relu->p.fn != PointwiseFn::relu || !same_view(relu->p.in[0], y))
      return -1;
    const Tensor& z = relu->p.out;
    if (!only_between(y, i, b) || !untouched_between(z, i, b) || z.shape() != y.shape() ||
        z.dtype() != y.dtype() || z.strides() != y.strides())
      return -1;
    return j;
  }

  void fuse_bn_relu_forward(size_t i, RecordedCall<BatchNormFwdProblem>& bn) {
    if (bn.p.relu) return;
    const int64_t j = relu_of(bn.p.y, i);
    if (j < 0) return;
    BatchNormFwdProblem fused = bn.p;
    fused.y = call<PointwiseProblem>(static_cast<size_t>(j))->p.out;
    fused.relu = true;
    if (!accepts(bn, fused)) return;
    bn.p = std::move(fused);
    remove(static_cast<size_t>(j), "relu into batch_norm forward", i, ops::kernel_of(bn.run)->name);
  }

  void fuse_add_relu(size_t i, RecordedCall<PointwiseProblem>& add) {
    if (add.p.fn != PointwiseFn::add) return;
    const int64_t j = relu_of(add.p.out, i);
    if (j < 0) return;
    PointwiseProblem fused = add.p;
    fused.fn = PointwiseFn::add_relu;
    fused.out = call<PointwiseProblem>(static_cast<size_t>(j))->p.out;
    if (!accepts(add, fused)) return;
    add.p = std::move(fused);
    remove(static_cast<size_t>(j), "relu into add", i, ops::kernel_of(add.run)->name);
  }

  void fuse_relu_mask_bn_backward(size_t i, RecordedCall<PointwiseProblem>& mask) {
    if (mask.p.fn != PointwiseFn::relu_mask) return;
    const Tensor &g = mask.p.in[0], &z = mask.p.in[1], &dg = mask.p.out;
    const int64_t j = partner(dg, i);
    if (j <= static_cast<int64_t>(i)) return;
    auto* bn = call<BatchNormBwdProblem>(static_cast<size_t>(j));
    if (bn == nullptr || bn->p.relu_y.defined() || !same_view(bn->p.dy, dg)) return;
    const auto b = static_cast<size_t>(j);
    if (!only_between(dg, i, b) || !untouched_between(g, i, b) || !untouched_between(z, i, b) ||
        g.shape() != dg.shape() || g.dtype() != dg.dtype() || z.shape() != dg.shape())
      return;
    BatchNormBwdProblem fused = bn->p;
    fused.dy = g;
    fused.relu_y = z;
    if (!accepts(*bn, fused)) return;
    bn->p = std::move(fused);
    remove(i, "relu backward into batch_norm backward", b, ops::kernel_of(bn->run)->name);
  }

  std::vector<std::function<void()>>& kernels_;
  const Holdings& holdings_;
  bool verbose_;
  int64_t removed_ = 0;
};

}  // namespace

int64_t fuse(std::vector<std::function<void()>>& kernels, const Holdings& holdings, bool verbose) {
  return Fuser(kernels, holdings, verbose).run();
}

namespace {

bool dense(const Tensor& t) { return is_dense(t.shape(), t.strides()); }

// A copy that writes each element at the same place in memory as it read it: s and d dense with
// the same strides.
bool keeps_memory_order(const Tensor& s, const Tensor& d) {
  return s.shape() == d.shape() && s.strides() == d.strides() && dense(s);
}

// v covers exactly t's elements (a view of t's storage, dense, from t's offset: a reshape).
bool same_span(const Tensor& v, const Tensor& t) {
  return v.storage() == t.storage() && v.offset() == t.offset() && v.numel() == t.numel() &&
         v.dtype() == t.dtype() && dense(v) && dense(t);
}

// z's storage is exactly z, from offset 0, so that all of it can take other bytes.
bool owns_its_storage(const Tensor& z) {
  return z.offset() == 0 && dense(z) &&
         z.storage()->nbytes() == static_cast<size_t>(z.numel()) * z.itemsize();
}

bool writes_between(const Holding& h, int64_t after, int64_t upto) {
  return std::any_of(h.writers.begin(), h.writers.end(),
                     [&](int64_t w) { return w > after && w <= upto; });
}

}  // namespace

int64_t elide_round_trip_casts(std::vector<std::function<void()>>& kernels, const Holdings& holdings,
                               std::vector<Alias>& aliases, bool verbose) {
  using mixprec::detail::CopyKernel;
  const auto copy_at = [&](int64_t k) -> const CopyKernel* {
    const auto& f = kernels[static_cast<size_t>(k)];
    return f ? f.target<CopyKernel>() : nullptr;
  };
  int64_t removed = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(kernels.size()); ++i) {
    const CopyKernel* a = copy_at(i);
    if (a == nullptr || !is_low_precision(a->src.dtype()) || a->dst.dtype() != DType::f32 ||
        !keeps_memory_order(a->src, a->dst))
      continue;
    const Tensor &x = a->src, &y = a->dst;
    const Holding *hx = holding_of(holdings, x), *hy = holding_of(holdings, y);
    if (hx == nullptr || hy == nullptr) continue;  // x made before the step: its writers unknown
    for (int64_t j : hy->kernels) {
      // The cast back reads all of y (through a reshape, say) and writes z in the same memory
      // order, so z's bytes are x's.
      const CopyKernel* b = j > i ? copy_at(j) : nullptr;
      if (b == nullptr || !same_span(b->src, y) || !keeps_memory_order(b->src, b->dst) ||
          b->dst.dtype() != x.dtype() || !owns_its_storage(b->dst))
        continue;
      const Holding* hz = holding_of(holdings, b->dst);
      if (hz == nullptr || !hz->internal || hz->output || hz->writers != std::vector<int64_t>{j})
        continue;
      const int64_t last = std::max(hz->kernels.back(), hz->last_touch);
      if (writes_between(*hx, i, last)) continue;
      aliases.push_back(Alias{b->dst.storage(), x.storage(),
                              x.offset() * static_cast<int64_t>(x.itemsize()), last});
      if (verbose)
        std::fprintf(stderr, "mixprec: graph: removed the cast back of %s%s (kernel %lld; kernel %lld cast it to f32)\n",
                     std::string(dtype_name(x.dtype())).c_str(), shape_str(x.shape()).c_str(),
                     static_cast<long long>(j), static_cast<long long>(i));
      kernels[static_cast<size_t>(j)] = nullptr;
      ++removed;
    }
  }
  return removed;
}

}  // namespace mixprec::graph::fusion
