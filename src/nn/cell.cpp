// nn::Cell: registration, traversal, modes, and the call path that applies the cell's scopes
// (cell path for provenance; AMP configuration or to_float) around construct().
#include "mixprec/nn/cell.h"

#include <atomic>
#include <set>

#include "mixprec/cuda.h"
#include "mixprec/error.h"
#include "mixprec/nn/config_generation.h"
#include "ops/cast_cache.h"
#include "mixprec/ops/ops.h"

namespace mixprec::nn {

Tensor Cell::construct(const Tensor&) {
  MIXPREC_CHECK(false, type_name(), ": construct(x) is not implemented for one input",
                Hint{"override Tensor construct(const Tensor&) in your cell, or call it with two inputs"});
  return {};
}

Tensor Cell::construct(const Tensor&, const Tensor&) {
  MIXPREC_CHECK(false, type_name(), ": construct(x, y) is not implemented for two inputs",
                Hint{"override Tensor construct(const Tensor&, const Tensor&), or call it with one input"});
  return {};
}

template <class Fn>
Tensor Cell::call(Fn&& fn) {
  CellPathScope path(name_);
  // Explicit casts made in this call hold until it returns (ops/autocast.h). A cell with its own
  // precision does not see those of its callers, and neither does any cell inside an O2/O3
  // network or a to_float cell: MindSpore flags all of those cells (to_float is recursive) and a
  // flagged cell casts its inputs at its boundary.
  const AutocastState& outer = autocast_state();
  const bool flagged = outer.forced.has_value() || outer.cast_every_cell;
  CellCallScope call_scope(amp_.has_value() || float_dtype_.has_value() || flagged);
  std::optional<AutocastScope> amp_scope, float_scope;
  if (amp_) amp_scope.emplace(amp_->state);
  if (float_dtype_) {
    AutocastState s = autocast_state();
    s.forced = *float_dtype_;
    float_scope.emplace(s);
  }
  Tensor out = fn();
  if (amp_ && amp_->cache) amp_->cache->clear_step();  // per-step casts live for one call
  if (amp_ && amp_->cast_output_to_fp32 && out.defined() && is_floating(out.dtype()) &&
      out.dtype() != DType::f32 && out.dtype() != DType::f64)
    out = ops::amp_cast(out, DType::f32);
  return out;
}

Tensor Cell::operator()(const Tensor& x) {
  return call([&] { return construct(x); });
}

Tensor Cell::operator()(const Tensor& x, const Tensor& y) {
  return call([&] { return construct(x, y); });
}

static void check_name(const std::string& owner, const std::string& name) {
  MIXPREC_CHECK(!name.empty() && name.find('.') == std::string::npos, owner,
                ": invalid name '", name, "' (expected a non-empty name without '.')");
}

Tensor Cell::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_name(type_name(), name);
  for (const auto& [n, t] : params_)
    MIXPREC_CHECK(n != name, type_name(), ": parameter '", name, "' registered twice");
  MIXPREC_CHECK(value.defined() && is_floating(value.dtype()), type_name(), ": parameter '", name,
                "' must be a floating tensor");
  value.set_requires_grad(requires_grad);
  params_.emplace_back(name, std::move(value));
  return params_.back().second;
}

Tensor Cell::register_buffer(const std::string& name, Tensor value) {
  check_name(type_name(), name);
  buffers_.emplace_back(name, std::move(value));
  return buffers_.back().second;
}

Cell& Cell::register_cell(const std::string& name, Cell& cell) {
  check_name(type_name(), name);
  for (const auto& [n, c] : children_)
    MIXPREC_CHECK(n != name, type_name(), ": sub-cell '", name, "' registered twice");
  MIXPREC_CHECK(&cell != this, type_name(), ": a cell cannot contain itself");
  cell.name_ = name;
  children_.emplace_back(name, &cell);
  return cell;
}

Cell& Cell::register_cell(const std::string& name, std::shared_ptr<Cell> cell) {
  MIXPREC_CHECK(cell != nullptr, type_name(), ": sub-cell '", name, "' is null");
  owned_.push_back(cell);
  return register_cell(name, *cell);
}

void Cell::collect(const std::string& prefix, std::vector<NamedTensor>& out, bool params,
                   bool buffers, bool trainable_only) const {
  if (params)
    for (const auto& [n, t] : params_)
      if (!trainable_only || t.requires_grad()) out.emplace_back(prefix + n, t);
  if (buffers)
    for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", out, params, buffers, trainable_only);
}

std::vector<Tensor> Cell::trainable_params() const {
  std::vector<NamedTensor> named;
  collect("", named, true, false, true);
  std::vector<Tensor> out;
  std::set<const TensorImpl*> seen;  // a shared parameter appears once
  for (auto& [n, t] : named)
    if (seen.insert(t.impl()).second) out.push_back(t);
  return out;
}

std::vector<NamedTensor> Cell::parameters_and_names() const {
  std::vector<NamedTensor> out;
  collect("", out, true, false, false);
  return out;
}

std::vector<NamedTensor> Cell::buffers_and_names() const {
  std::vector<NamedTensor> out;
  collect("", out, false, true, false);
  return out;
}

std::vector<NamedTensor> Cell::state_and_names() const {
  std::vector<NamedTensor> out;
  collect("", out, true, true, false);
  return out;
}

std::vector<std::pair<std::string, Cell*>> Cell::cells_and_names() {
  std::vector<std::pair<std::string, Cell*>> out;
  std::vector<std::pair<std::string, Cell*>> stack{{"", this}};
  while (!stack.empty()) {
    auto [prefix, c] = stack.back();
    stack.pop_back();
    out.emplace_back(prefix, c);
    for (auto it = c->children_.rbegin(); it != c->children_.rend(); ++it)
      stack.emplace_back(prefix.empty() ? it->first : prefix + "." + it->first, it->second);
  }
  return out;
}

namespace {
std::atomic<uint64_t> g_config_generation{0};
}

uint64_t config_generation() { return g_config_generation.load(); }
void bump_config_generation() { g_config_generation.fetch_add(1); }

namespace {
// Points t's own TensorImpl at a packed copy on `device`: every handle on t sees the move.
void move_in_place(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return;
  const Tensor moved = t.detach().to(device);
  TensorImpl* impl = t.impl();
  impl->storage = moved.storage();
  impl->strides = moved.strides();
  impl->offset = moved.offset();
  Tensor handle = t;
  if (const Tensor g = t.grad(); g.defined()) handle.set_grad(g.to(device));
}
}  // namespace

Cell& Cell::to(Device device) {
  if (device.is_cuda()) cuda::check_device(device);  // the build, the driver, the GPU
  std::set<const TensorImpl*> seen;  // a shared tensor moves once
  bool moved = false;
  for (const auto& [n, t] : state_and_names())
    if (seen.insert(t.impl()).second && t.device() != device) {
      move_in_place(t, device);
      moved = true;
    }
  if (!moved) return *this;
  for (auto& [n, c] : cells_and_names())
    if (c->amp_ && c->amp_->cache) c->amp_->cache->clear();
  bump_config_generation();  // captured steps (GRAPH_MODE) refer to the old storages
  return *this;
}

Cell& Cell::set_train(bool mode) {
  if (training_ != mode) bump_config_generation();
  training_ = mode;
  for (auto& [n, c] : children_) c->set_train(mode);
  return *this;
}

Cell& Cell::to_float(DType dtype) {
  MIXPREC_CHECK(is_floating(dtype), type_name(), ".to_float: expected a floating dtype, got ",
                dtype_name(dtype));
  float_dtype_ = dtype;
  bump_config_generation();
  return *this;
}

std::string Cell::repr(int indent) const {
  std::string s = type_name() + "(" + extra_repr();
  if (children_.empty()) return s + ")";
  s += "\n";
  for (const auto& [n, c] : children_)
    s += std::string(static_cast<size_t>(indent + 2), ' ') + "(" + n + "): " + c->repr(indent + 2) + "\n";
  return s + std::string(static_cast<size_t>(indent), ' ') + ")";
}

}  // namespace mixprec::nn
