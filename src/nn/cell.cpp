// nn::Cell: registration, traversal, modes, and the call path that applies the cell's scopes
// (cell path for provenance; AMP configuration or to_float) around construct().
#include "mixprec/nn/cell.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>

#include "mixprec/cuda.h"
#include "mixprec/env.h"
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

// ---------------------------------------------------------------- undone casts (cell.h)

namespace {
thread_local int t_call_depth = 0;              // cell calls running on this thread
thread_local const AmpConfig* t_amp = nullptr;  // the innermost AMP configuration running
std::mutex g_undone_mutex;
std::vector<UndoneCast> g_undone;    // guarded by g_undone_mutex
std::optional<bool> g_undone_print;  // set_undone_cast_warnings; else the env switch

struct DepthScope {
  DepthScope() { ++t_call_depth; }
  ~DepthScope() { --t_call_depth; }
};

std::string python_dtype(DType d) {
  switch (d) {
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::f64: return "float64";
    default: return std::string(dtype_name(d));
  }
}
}  // namespace

void set_undone_cast_warnings(bool print) {
  std::lock_guard lock(g_undone_mutex);
  g_undone_print = print;
}

std::vector<UndoneCast> undone_casts() {
  std::lock_guard lock(g_undone_mutex);
  return g_undone;
}

void clear_undone_casts() {
  std::lock_guard lock(g_undone_mutex);
  g_undone.clear();
}

std::string undone_cast_note(const std::string& cell_path) {
  std::lock_guard lock(g_undone_mutex);
  std::string note;
  for (const UndoneCast& u : g_undone)
    if (cell_path == u.path || cell_path.rfind(u.path + ".", 0) == 0)
      note += (note.empty() ? "" : "; ") + std::string("the explicit cast to ") +
              python_dtype(u.user_dtype) + " of the input of '" + u.path + "' (" + u.cell_class +
              ") was undone at its boundary by " + u.level + " (fix: net." + u.path +
              ".to_float(ms." + python_dtype(u.user_dtype) + "), or cast inside its construct)";
  return note;
}

// Called before this cell's call scopes are pushed: `x` is what the caller passes. Only a sub-cell
// called from a running cell is checked (a cast made before calling the network is data
// preparation), and only one flagged by the level or an enclosing to_float: a cell with its own
// to_float or AMP configuration was given its precision by the user.
void Cell::check_undone_cast(const Tensor& x) const {
  if (t_call_depth == 0 || float_dtype_ || amp_ || !x.defined() || !is_floating(x.dtype())) return;
  const AutocastState& outer = autocast_state();
  if (!outer.forced && !outer.cast_every_cell) return;
  if (!has_explicit_dtype(x)) return;  // honoured here, in the caller
  const DType cell_dtype = outer.forced ? *outer.forced : outer.low;
  if (cell_dtype == x.dtype()) return;
  const std::string level =
      outer.forced ? "to_float(" + python_dtype(*outer.forced) + ") on a cell around it"
                   : (t_amp && !t_amp->level.empty() ? t_amp->level : std::string("the AMP level"));
  const std::string& path = current_cell_path();  // this cell's: its CellPathScope is pushed
  const std::string shown = path.empty() ? std::string("<this cell>") : path;
  const std::string cls = type_name();  // before the lock: a Python cell's takes the GIL
  std::unique_lock lock(g_undone_mutex);
  for (const UndoneCast& u : g_undone)
    if (u.path == shown && u.cell_class == cls && u.user_dtype == x.dtype() &&
        u.cell_dtype == cell_dtype)
      return;
  const std::string user = python_dtype(x.dtype()), cast = python_dtype(cell_dtype);
  UndoneCast u{shown,
               cls,
               level,
               x.dtype(),
               cell_dtype,
               "the " + user + " value passed to '" + shown + "' (" + cls +
                   ") was cast explicitly (astype / ops.cast) by its caller, and " + level +
                   " casts it back to " + cast +
                   " at that cell's boundary (as MindSpore's GRAPH_MODE does), so " + cls +
                   " computes in " + cast + ". Fix: net." + shown + ".to_float(ms." + user +
                   ") (C++: to_float(DType::" + std::string(dtype_name(x.dtype())) +
                   ") on that cell), or cast inside " + cls +
                   "'s construct. (MIXPREC_WARN_UNDONE_CAST=0 silences this.)"};
  g_undone.push_back(u);
  const bool print =
      g_undone_print.value_or(env::get("MIXPREC_WARN_UNDONE_CAST").value_or("1") == "1");
  lock.unlock();
  if (print) std::fprintf(stderr, "mixprec: warning: %s\n", u.message.c_str());
}

template <class Fn> Tensor Cell::call(const Tensor* x, const Tensor* y, Fn&& fn) {
  CellPathScope path(name_);
  if (t_call_depth > 0) {  // the caller's marks and state, before this cell's scopes
    if (x) check_undone_cast(*x);
    if (y) check_undone_cast(*y);
  }
  // Explicit casts made in this call hold until it returns (ops/autocast.h). A cell with its own
  // precision does not see those of its callers, and neither does any cell inside an O2/O3
  // network or a to_float cell: MindSpore flags all of those cells (to_float is recursive) and a
  // flagged cell casts its inputs at its boundary.
  const AutocastState& outer = autocast_state();
  const bool flagged = outer.forced.has_value() || outer.cast_every_cell;
  CellCallScope call_scope(amp_.has_value() || float_dtype_.has_value() || flagged);
  DepthScope depth;
  const AmpConfig* outer_amp = t_amp;
  struct AmpRestore {
    const AmpConfig* prev;
    ~AmpRestore() { t_amp = prev; }
  } amp_restore{outer_amp};
  std::optional<AutocastScope> amp_scope, float_scope;
  if (amp_) {
    amp_scope.emplace(amp_->state);
    t_amp = &*amp_;
  }
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
  return call(&x, nullptr, [&] { return construct(x); });
}

Tensor Cell::operator()(const Tensor& x, const Tensor& y) {
  return call(&x, &y, [&] { return construct(x, y); });
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
