// Autocast: the thread-local state, the per-op cast decision (the state's rule for the op's
// policy, after the user's explicit casts and to_float), the weight cast cache, the op trace
// recorder and the cell-path stack. Which rules a level sets is amp's (amp/level.h).
#include "mixprec/ops/autocast.h"

#include <algorithm>
#include <atomic>

#include "mixprec/error.h"

namespace mixprec {
namespace {

thread_local AutocastState t_state;
thread_local std::vector<OpRecord>* t_recorder = nullptr;
thread_local std::string t_cell_path;

// The running cell calls of this thread, innermost last. Ids are unique in the process, so a mark
// made on another thread or in a call that has returned is never on the stack.
struct CellCall {
  uint64_t id;
  bool boundary;
};
thread_local std::vector<CellCall> t_calls;
constexpr uint64_t kOutsideCells = 1;  // the id of marks made outside any cell call
std::atomic<uint64_t> g_next_call_id{kOutsideCells + 1};

}  // namespace

// ------------------------------------------------------------------ state and decisions

const AutocastState& autocast_state() { return t_state; }

bool autocast_active() {
  const AutocastState& s = t_state;
  return s.forced.has_value() || s.norm_rule.has_value() ||
         std::any_of(s.rules.begin(), s.rules.end(), [](CastRule r) { return r != CastRule::keep; });
}

AmpPolicy effective_policy(OpId op) {
  const auto& o = t_state.policy_override[static_cast<size_t>(op)];
  return o ? *o : op_info(op).policy;
}

static CastDecision apply_rule(CastRule rule, DType low, const std::vector<DType>& float_inputs) {
  switch (rule) {
    case CastRule::keep: return {};
    case CastRule::low: return {.input = low};
    case CastRule::low_out_f32: return {.input = low, .output = DType::f32};
    case CastRule::f32: return {.input = DType::f32};
    case CastRule::f32_out_low: return {.input = DType::f32, .output = low};
    case CastRule::widest: {
      DType widest = float_inputs[0];
      for (DType d : float_inputs) widest = promote(widest, d);
      return {.input = widest};
    }
  }
  return {};
}

CastDecision autocast_decision(OpId op, const std::vector<DType>& float_inputs,
                               std::optional<DType> explicit_dtype) {
  const AutocastState& s = t_state;
  const OpInfo& info = op_info(op);
  if (info.kind == OpKind::layout || float_inputs.empty()) return {};
  const bool norm = info.kind == OpKind::norm;
  const DType low = s.low;
  if (explicit_dtype) {  // the user's cast wins over the level, its lists and to_float
    // A norm fed a low tensor the user chose still keeps fp32 parameters and statistics where
    // the level asks for it; its activations stay in the user's dtype.
    if (norm && s.keep_norm_fp32 && !s.forced && is_low_precision(*explicit_dtype))
      return {.norm_fp32_mixed_io = true};
    return {.input = *explicit_dtype};
  }
  if (s.forced) return {.input = *s.forced};  // to_float wins over the lists, norms included
  if (norm && s.norm_rule) {
    if (s.keep_norm_fp32) return {.norm_fp32_mixed_io = true};
    return apply_rule(*s.norm_rule, low, float_inputs);
  }
  return apply_rule(s.rules[static_cast<size_t>(effective_policy(op))], low, float_inputs);
}

AutocastScope::AutocastScope(const AutocastState& state) : prev_(t_state) { t_state = state; }
AutocastScope::~AutocastScope() { t_state = prev_; }

// ------------------------------------------------------------------ the explicit-cast rule

CellCallScope::CellCallScope(bool precision_boundary) {
  t_calls.push_back({g_next_call_id.fetch_add(1, std::memory_order_relaxed), precision_boundary});
}
CellCallScope::~CellCallScope() { t_calls.pop_back(); }

namespace {
// The position of an honoured mark on the call stack: 0 for marks made outside any cell, i + 1 for
// the call t_calls[i]; -1 when the mark is 0 or not honoured here.
int64_t mark_depth(uint64_t mark) {
  if (mark == 0) return -1;
  for (size_t i = t_calls.size(); i-- > 0;) {
    if (t_calls[i].id == mark) return static_cast<int64_t>(i) + 1;
    if (t_calls[i].boundary) return -1;  // made outside the cell that casts its inputs
  }
  return mark == kOutsideCells ? 0 : -1;
}
}  // namespace

uint64_t explicit_dtype_mark(const Tensor& t) {
  const uint64_t mark = t.defined() ? t.impl()->explicit_dtype_scope : 0;
  return mark_depth(mark) >= 0 ? mark : 0;
}

uint64_t outer_explicit_dtype_mark(uint64_t a, uint64_t b) {
  const int64_t da = mark_depth(a), db = mark_depth(b);
  if (da < 0) return db < 0 ? 0 : b;
  return db >= 0 && db < da ? b : a;
}

void mark_explicit_dtype(const Tensor& t, uint64_t mark) {
  if (!t.defined() || has_explicit_dtype(t)) return;
  if (mark == 0) mark = t_calls.empty() ? kOutsideCells : t_calls.back().id;
  t.impl()->explicit_dtype_scope = mark;
}

// ------------------------------------------------------------------ cast cache

Tensor CastCache::lookup(const Tensor& src, DType dtype) const {
  auto it = entries_.find(Key{src.storage()->id(), src.offset(), dtype});
  if (it == entries_.end() || it->second.version != src.storage()->version() ||
      it->second.shape != src.shape()) {
    ++misses_;
    return {};
  }
  ++hits_;
  return it->second.low;
}

void CastCache::store(const Tensor& src, const Tensor& low, bool persistent) {
  MIXPREC_ASSERT(low.shape() == src.shape(), "cast cache entry shape mismatch");
  entries_[Key{src.storage()->id(), src.offset(), low.dtype()}] =
      Entry{src.storage()->version(), src.shape(), low, persistent};
}

void CastCache::clear_step() {
  std::erase_if(entries_, [](const auto& kv) { return !kv.second.persistent; });
}

void CastCache::clear() { entries_.clear(); }

// ------------------------------------------------------------------ recorder and cell path

OpRecorder::OpRecorder(std::vector<OpRecord>* out) : prev_(t_recorder) { t_recorder = out; }
OpRecorder::~OpRecorder() { t_recorder = prev_; }
bool op_recording() { return t_recorder != nullptr; }
void record_op(OpRecord record) {
  if (t_recorder) t_recorder->push_back(std::move(record));
}

CellPathScope::CellPathScope(const std::string& name) : prev_size_(t_cell_path.size()) {
  if (name.empty()) return;
  if (!t_cell_path.empty()) t_cell_path += '.';
  t_cell_path += name;
}
CellPathScope::~CellPathScope() { t_cell_path.resize(prev_size_); }
const std::string& current_cell_path() { return t_cell_path; }

}  // namespace mixprec
