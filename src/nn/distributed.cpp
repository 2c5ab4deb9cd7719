// DistributedGradReducer (see nn/distributed.h) and the cell-wide broadcast and buffer average.
// Packing is one pass per gradient: widen a chunk to f32 (when it is not f32), multiply by the
// mean's 1/degree, OR a non-finite flag on the exponent bits, and write the chunk in the bucket's
// dtype. Chunks are independent, so the result does not depend on the thread count. On a GPU the
// buckets live on the parameters' device and packing is ops queued there (widen, scale, one
// rounding into the bucket's dtype); its finite check is the caller's, on the device (the
// device train step), as a host flag would wait for the GPU. The constructor first checks that
// every rank built the same buckets (comm::check_same_job), so a mismatch is an error naming what
// differs, never an all-reduce of unequal sizes.
#include "mixprec/nn/distributed.h"

#include <algorithm>
#include <chrono>
#include <charconv>
#include <cstring>

#include "mixprec/comm/communication.h"
#include "mixprec/convert.h"
#include "mixprec/error.h"
#include "mixprec/grad_mode.h"
#include "mixprec/ops/autocast.h"
#include "mixprec/ops/ops.h"
#include "ops/amp_problem.h"  // finite_bits

namespace mixprec::nn {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

constexpr int64_t kChunk = 4096;

// dst (f32 or bf16) = src * mul; returns false if any source value is inf/NaN.
bool pack_values(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                 float mul) {
  const size_t src_size = dtype_size(src_dtype), dst_size = dtype_size(dst_dtype);
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > 65536)
  for (int64_t c = 0; c < (n + kChunk - 1) / kChunk; ++c) {
    const int64_t lo = c * kChunk, len = std::min(n, lo + kChunk) - lo;
    alignas(64) float buf[kChunk];
    const char* s = static_cast<const char*>(src) + lo * static_cast<int64_t>(src_size);
    char* d = static_cast<char*>(dst) + lo * static_cast<int64_t>(dst_size);
    float* out = dst_dtype == DType::f32 ? reinterpret_cast<float*>(d) : buf;
    const float* in = src_dtype == DType::f32 ? reinterpret_cast<const float*>(s) : buf;
    if (src_dtype != DType::f32) convert_row(s, src_dtype, buf, DType::f32, len);
    int local = 0;
    for (int64_t i = 0; i < len; ++i) {
      local |= !ops::finite_bits(in[i]);
      out[i] = in[i] * mul;
    }
    if (dst_dtype != DType::f32) convert_row(buf, DType::f32, d, dst_dtype, len);
    bad |= local;
  }
  return bad == 0;
}

// The device's packing: dst (a slice of a bucket) = grad * mul, with one rounding into dst's dtype.
void pack_on_device(Tensor dst, const Tensor& grad, float mul) {
  NoGradGuard ng;
  AutocastScope as_is(AutocastState{});  // f32 arithmetic, whatever the caller's scope
  if (!grad.defined()) {
    dst.fill_(0.0);
    return;
  }
  const Tensor flat = grad.contiguous().reshape({grad.numel()});
  if (mul == 1.0f) {  // a sum: one converting copy (exact widening, then the one rounding)
    dst.copy_(flat);
    return;
  }
  dst.copy_(ops::mul(flat.astype(DType::f32), static_cast<double>(mul)));
}

// The shortest decimal that reads back as `v`.
std::string exact(double v) {
  char buf[32];
  return {buf, std::to_chars(buf, buf + sizeof buf, v).ptr};
}

}  // namespace

std::vector<comm::JobSetting> DistributedGradReducer::layout_settings() const {
  const AutoParallelContext& ctx = get_auto_parallel_context();
  std::string shapes, buckets;
  int64_t values = 0;
  for (const Tensor& p : params_) {
    shapes += (shapes.empty() ? "" : ", ") + shape_str(p.shape()) + " " +
              std::string(dtype_name(p.dtype()));
    values += p.numel();
  }
  for (const Bucket& b : buckets_) {
    if (!buckets.empty()) buckets += ',';
    buckets += std::to_string(b.numel);
  }
  return {{"parameters",
           std::to_string(params_.size()) + " tensors of " + std::to_string(values) + " values"},
          {"parameter shapes", shapes},
          {"grad_allreduce_dtype", std::string(dtype_name(dtype_))},
          {"bucket_cap_mb", exact(ctx.bucket_cap_mb)},
          {"first_bucket_mb", exact(ctx.first_bucket_mb)},
          {"gradient buckets", std::to_string(buckets_.size()) + " of " + buckets + " values"},
          {"gradients_mean", mean_ ? "true" : "false"},
          {"mean degree", std::to_string(degree_)},
          {"overlap_grad_reduce", overlap_ ? "true" : "false"}};
}

DistributedGradReducer::DistributedGradReducer(std::vector<Tensor> parameters,
                                               std::optional<bool> mean, std::optional<int> degree)
    : params_(std::move(parameters)) {
  const AutoParallelContext& ctx = get_auto_parallel_context();
  mean_ = mean.value_or(ctx.gradients_mean);
  degree_ = degree.value_or(communication::get_group_size());
  MIXPREC_CHECK(degree_ >= 1, "DistributedGradReducer: degree must be >= 1, got ", degree_);
  dtype_ = ctx.grad_allreduce_dtype;
  overlap_ = ctx.overlap_grad_reduce;
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype_));
  const auto cap = [](double mb) {
    return std::max<int64_t>(1, static_cast<int64_t>(mb * 1024 * 1024));
  };
  slot_.resize(params_.size());
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    MIXPREC_CHECK(p.defined() && is_floating(p.dtype()) && p.is_contiguous(),
                  "DistributedGradReducer: parameter ", k,
                  " must be a defined, contiguous floating tensor");
    // The cap of the bucket being filled: the first one's, or the others'.
    const int64_t limit = cap(buckets_.size() <= 1 ? ctx.first_bucket_mb : ctx.bucket_cap_mb);
    if (buckets_.empty() ||
        (buckets_.back().numel > 0 && (buckets_.back().numel + p.numel()) * esize > limit))
      buckets_.emplace_back();
    slot_[k] = {buckets_.size() - 1, buckets_.back().numel};
    buckets_.back().params.push_back(k);
    buckets_.back().numel += p.numel();
  }
  int64_t total = 0;
  for (const Bucket& b : buckets_) total += b.numel;
  stats_.buckets = static_cast<int>(buckets_.size());
  stats_.bytes_per_reduction = total * esize;
  // Before the first collective whose sizes the layout decides (the broadcast, then every bucket).
  comm::check_same_job(layout_settings(),
                       "build the same model with the same parallel context "
                       "(set_auto_parallel_context) and environment on every rank");
  NoGradGuard ng;
  for (const Tensor& p : params_) comm::broadcast(p.detach());
}

bool DistributedGradReducer::local_finite() const {
  MIXPREC_CHECK(
      !on_device_, "DistributedGradReducer::local_finite: not tracked for gradients on ",
      params_.front().device().str(), " (a host flag would wait for the GPU)",
      Hint{"check the gradients on the device (ops::amp_foreach_non_finite_check_and_unscale_), "
           "then comm::all_reduce_max the flag"});
  return !local_bad_;
}

void DistributedGradReducer::begin() {
  for (comm::PendingReduce& p : pending_) p.wait();  // a reduction abandoned by an exception
  in_progress_ = true;
  local_bad_ = false;
  next_start_ = 0;
  buffers_.clear();
  const Device device = params_.front().device();  // where the parameters are now
  on_device_ = !device.is_cpu();
  for (const Bucket& b : buckets_)
    buffers_.push_back(Tensor::empty({b.numel}, {.dtype = dtype_, .device = device}));
  for (Bucket& b : buckets_) b.ready = 0;
  pending_.clear();
  pending_.resize(buckets_.size());
  packed_.assign(params_.size(), 0);
}

void DistributedGradReducer::pack(size_t i, const Tensor& grad) {
  MIXPREC_CHECK(i < params_.size(), "DistributedGradReducer: gradient index ", i, " out of range (",
                params_.size(), " parameters)");
  MIXPREC_CHECK(!packed_[i], "DistributedGradReducer: gradient ", i,
                " was reported twice in one reduction");
  const auto [b, offset] = slot_[i];
  const float mul = mean_ ? static_cast<float>(1.0 / degree_) : 1.0f;
  MIXPREC_CHECK(
      !grad.defined() || (grad.numel() == params_[i].numel() && is_floating(grad.dtype())),
      "DistributedGradReducer: gradient ", i, " has shape ", shape_str(grad.shape()), " ",
      dtype_name(grad.dtype()), ", expected a floating ", shape_str(params_[i].shape()));
  char* dst = on_device_ ? nullptr
                         : static_cast<char*>(buffers_[b].data_ptr()) +
                               offset * static_cast<int64_t>(dtype_size(dtype_));
  if (on_device_) {
    pack_on_device(buffers_[b].slice(0, offset, offset + params_[i].numel()), grad, mul);
  } else if (!grad.defined()) {
    std::memset(dst, 0, static_cast<size_t>(params_[i].numel()) * dtype_size(dtype_));
  } else {
    const Tensor g = grad.contiguous();
    local_bad_ |= !pack_values(g.data_ptr(), g.dtype(), dst, dtype_, g.numel(), mul);
  }
  packed_[i] = 1;
  ++buckets_[b].ready;
}

void DistributedGradReducer::start_ready_buckets() {
  while (next_start_ < buckets_.size() &&
         buckets_[next_start_].ready == static_cast<int>(buckets_[next_start_].params.size())) {
    pending_[next_start_] = comm::start_all_reduce_sum(buffers_[next_start_]);
    ++next_start_;
  }
}

void DistributedGradReducer::poll() {
  for (size_t b = 0; b < next_start_; ++b)
    if (pending_[b].pending()) pending_[b].test();
}

void DistributedGradReducer::ready(size_t index, const Tensor& grad) {
  MIXPREC_CHECK(in_progress_, "DistributedGradReducer::ready: call begin() first");
  const auto t0 = Clock::now();
  pack(index, grad);
  stats_.pack_seconds += seconds_since(t0);
  if (!overlap_) return;
  const size_t before = next_start_;
  start_ready_buckets();
  stats_.buckets_started_early += static_cast<int64_t>(next_start_ - before);
  poll();
}

std::vector<Tensor> DistributedGradReducer::finish(const std::vector<Tensor>& grads) {
  MIXPREC_CHECK(in_progress_, "DistributedGradReducer::finish: call begin() first");
  MIXPREC_CHECK(grads.size() == params_.size(), "DistributedGradReducer: ", grads.size(),
                " gradients for ", params_.size(), " parameters");
  const auto t0 = Clock::now();
  for (size_t i = 0; i < params_.size(); ++i)
    if (!packed_[i]) pack(i, grads[i]);
  stats_.pack_seconds += seconds_since(t0);
  for (size_t b = 0; b < next_start_; ++b)
    if (!pending_[b].pending() || pending_[b].test()) {
      ++stats_.buckets_done_early;
      stats_.bytes_done_early += buckets_[b].numel * static_cast<int64_t>(dtype_size(dtype_));
    }
  start_ready_buckets();
  const auto t1 = Clock::now();
  for (comm::PendingReduce& p : pending_) p.wait();
  stats_.wait_seconds += seconds_since(t1);
  ++stats_.reductions;
  in_progress_ = false;
  std::vector<Tensor> out(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto [b, offset] = slot_[i];
    out[i] = buffers_[b].slice(0, offset, offset + params_[i].numel()).view(params_[i].shape());
  }
  return out;
}

std::vector<Tensor> DistributedGradReducer::operator()(const std::vector<Tensor>& grads) {
  MIXPREC_CHECK(grads.size() == params_.size(), "DistributedGradReducer: ", grads.size(),
                " gradients for ", params_.size(), " parameters");
  begin();
  for (size_t k = grads.size(); k-- > 0;)
    if (grads[k].defined()) ready(k, grads[k]);
  return finish(grads);
}

void broadcast_cell(Cell& cell, int root) {
  NoGradGuard ng;
  for (auto& [name, t] : cell.state_and_names()) comm::broadcast(t.detach(), root);
}

void all_reduce_buffers(Cell& cell) {
  const int n = communication::get_group_size();
  if (n == 1) return;
  std::vector<Tensor> floating;
  int64_t total = 0;
  for (auto& [name, t] : cell.buffers_and_names())
    if (is_floating(t.dtype())) {
      floating.push_back(t.detach());
      total += t.numel();
    }
  if (total == 0) return;
  if (!floating.front().device().is_cpu()) {  // on a GPU: one collective per buffer, on its stream
    NoGradGuard ng;
    AutocastScope as_is(AutocastState{});
    for (Tensor& t : floating) {
      Tensor sum = Tensor::empty(t.shape(), {.dtype = DType::f32, .device = t.device()});
      sum.copy_(t);
      comm::all_reduce_sum(sum);
      t.copy_(ops::mul(sum, static_cast<double>(static_cast<float>(1.0 / n))));
    }
    return;
  }
  Tensor packed = Tensor::empty({total}, {.dtype = DType::f32});
  float* p = packed.data<float>();
  int64_t at = 0;
  for (const Tensor& t : floating) {
    const Tensor c = t.contiguous();
    convert_row(c.data_ptr(), c.dtype(), p + at, DType::f32, c.numel());
    at += c.numel();
  }
  comm::all_reduce_sum(packed);
  const float inv = static_cast<float>(1.0 / n);
  for (int64_t i = 0; i < total; ++i) p[i] *= inv;
  NoGradGuard ng;
  at = 0;
  for (Tensor& t : floating) {
    t.copy_(packed.slice(0, at, at + t.numel()).view(t.shape()));
    at += t.numel();
  }
}

}  // namespace mixprec::nn
