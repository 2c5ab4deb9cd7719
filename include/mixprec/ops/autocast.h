// The thread-local precision scope that op dispatch consults (AMP's mechanism: the per-op cast
// rules and the policy lookup). The amp layer decides the policy: it turns levels into rules
// (amp/level.h), sets lists and to_float, and wires the cast cache to optimizers.
// A scope is pushed by RAII (AutocastScope) and restores the previous state when it ends; there
// is no global AMP state. Also here: the per-op trace (which op ran in which dtype, in which
// cell) that the precision table and the AMP tests read, and the cell-path stack cells push.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "mixprec/ops/registry.h"
#include "mixprec/tensor.h"

namespace mixprec {

// Low-precision copies of fp32 tensors (weights), keyed by storage id and checked against the
// storage version, so an in-place change or an optimizer step invalidates the entry.
// Entries marked persistent are the O2/O3 working copies the optimizer refreshes in its update
// pass; the others live for one step (clear_step()).
class CastCache {
 public:
  // The cached cast of `src` to `dtype`, or undefined if absent or stale.
  Tensor lookup(const Tensor& src, DType dtype) const;
  void store(const Tensor& src, const Tensor& low, bool persistent = false);
  void clear_step();  // drops the non-persistent entries
  void clear();
  size_t size() const { return entries_.size(); }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  struct Key {
    uint64_t storage_id;
    int64_t offset;
    DType dtype;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(k.storage_id * 31 + static_cast<uint64_t>(k.offset) * 7 +
                                   static_cast<uint64_t>(k.dtype));
    }
  };
  struct Entry {
    uint64_t version;
    Shape shape;
    Tensor low;
    bool persistent;
  };
  std::unordered_map<Key, Entry, KeyHash> entries_;
  mutable int64_t hits_ = 0;
  mutable int64_t misses_ = 0;
};

// What ran: one record per op executed while a recorder is installed.
struct OpRecord {
  OpId op;
  std::string cell_path;
  std::vector<DType> input_dtypes;  // floating inputs, after autocast
  std::vector<DType> weight_dtypes; // the subset that are parameters (leaves requiring grad)
  DType compute_dtype;              // the dtype the arithmetic ran in
  DType output_dtype;
  int64_t flops = 0;                // forward floating-point operations of GEMM-like ops
  bool input_requires_grad = false; // the first input needs a gradient (a backward-data pass)
};

// What autocast does to the floating inputs (and the output) of an op, by the op's policy.
enum class CastRule : uint8_t {
  keep,         // no cast: the op runs in its input dtype
  low,          // inputs to the low dtype
  low_out_f32,  // inputs to the low dtype, the output back to f32 (O1's white list)
  f32,          // inputs to f32
  f32_out_low,  // inputs to f32, the output back to the low dtype (O2's black list)
  widest,       // inputs to the widest floating input dtype (promote)
};

// The default state (every rule keep, nothing forced) is autocast off.
struct AutocastState {
  // The rule for an op of each policy, indexed by AmpPolicy (see amp::level_state).
  std::array<CastRule, kNumAmpPolicies> rules{};
  // Norms (OpKind::norm) follow this rule instead of their policy's when set (O2, O3).
  std::optional<CastRule> norm_rule{};
  // Every cell called inside casts its inputs at its boundary (O2/O3: MindSpore flags every
  // sub-cell), so explicit casts made outside a cell are not honoured inside it.
  bool cast_every_cell = false;
  DType low = DType::bf16;
  // Set inside a cell with to_float(dtype): every floating input is cast to it (wins over lists).
  std::optional<DType> forced{};
  // Norms (BatchNorm, LayerNorm) that norm_rule would cast keep fp32 parameters, statistics and
  // arithmetic (activations may stay low) when set; to_float (forced) and an explicit cast win
  // over it.
  bool keep_norm_fp32 = false;
  // custom_mixed_precision: per-op policy overrides of the registry defaults.
  std::array<std::optional<AmpPolicy>, kNumOps> policy_override{};
  CastCache* cache = nullptr;  // weight cast cache, if any
};

// What autocast decided for one op call.
struct CastDecision {
  std::optional<DType> input{};   // cast floating inputs to this
  std::optional<DType> output{};  // then cast the output to this
  // Norms in fp32 with activations left in their (low) dtype: parameters, statistics and all
  // arithmetic are fp32; input and output tensors keep the activation dtype.
  bool norm_fp32_mixed_io = false;
};

const AutocastState& autocast_state();
bool autocast_active();
AmpPolicy effective_policy(OpId op);
// `explicit_dtype`: the promoted dtype of the inputs whose dtype the user chose (see below);
// when set, the level casts the other floating inputs to it and nothing else.
CastDecision autocast_decision(OpId op, const std::vector<DType>& float_input_dtypes,
                               std::optional<DType> explicit_dtype = std::nullopt);

// ------------------------------------------------------------------ the explicit-cast rule
// A level decides where casts go; it never overrides a cast the user wrote. `x.astype(d)` and
// `ops::cast(x, d)` mark their result as having an explicit dtype; every op with such an input
// runs in that dtype (other floating inputs, weights included, are cast to it) and marks its
// output too, so after `x.astype(f32)` the ops that follow run in f32 until something casts back.
// The mark is scoped like MindSpore's (GRAPH_MODE) cell-boundary casts: it holds in the cell call
// that made it, not in the caller once the tensor is returned (the caller's level applies again),
// and not inside a cell that casts its inputs at its boundary: one with its own precision (an AMP
// configuration or to_float), or any cell of an O2/O3 network or of a to_float cell, which
// MindSpore flags recursively. Only at O1/auto (per-op casts, no cell flags) does it reach into
// sub-cells.

// One cell call (nn::Cell pushes it around construct); `precision_boundary` for a cell that casts
// its inputs: one with an AMP configuration or to_float(), and every cell called inside an O2/O3
// network or a to_float cell. Marks made inside a call are honoured only while it is running.
class CellCallScope {
 public:
  explicit CellCallScope(bool precision_boundary);
  ~CellCallScope();
  CellCallScope(const CellCallScope&) = delete;
  CellCallScope& operator=(const CellCallScope&) = delete;
};
// The mark of `t` when its dtype was chosen explicitly in the current cell call or one of its
// callers up to the nearest precision boundary (so the mark is honoured here), else 0.
uint64_t explicit_dtype_mark(const Tensor& t);
inline bool has_explicit_dtype(const Tensor& t) { return explicit_dtype_mark(t) != 0; }
// Of two marks honoured here (or 0), the outermost: the one that lives longest. An op's output
// takes the outermost mark of its inputs, so a value derived from a caller's cast stays the
// caller's choice after a sub-cell returns it (this happens only at O1/auto, where the caller's
// mark reaches into sub-cells), while a cast made inside a sub-cell ends when it returns.
uint64_t outer_explicit_dtype_mark(uint64_t a, uint64_t b);
// Marks `t` (its TensorImpl, shared by copies of the handle) with `mark`, by default a new choice
// made in the current call; a mark that is already honoured here is kept.
void mark_explicit_dtype(const Tensor& t, uint64_t mark = 0);

// Pushes a state for its lifetime. Nested scopes see the state of the innermost one.
class AutocastScope {
 public:
  explicit AutocastScope(const AutocastState& state);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState prev_;
};

// Records every op executed on this thread into `out` while alive.
class OpRecorder {
 public:
  explicit OpRecorder(std::vector<OpRecord>* out);
  ~OpRecorder();
  OpRecorder(const OpRecorder&) = delete;
  OpRecorder& operator=(const OpRecorder&) = delete;

 private:
  std::vector<OpRecord>* prev_;
};
void record_op(OpRecord record);  // no-op without a recorder
bool op_recording();

// The path of the cell running now ("features.0"), maintained by nn::Cell.
class CellPathScope {
 public:
  explicit CellPathScope(const std::string& name);
  ~CellPathScope();
  CellPathScope(const CellPathScope&) = delete;
  CellPathScope& operator=(const CellPathScope&) = delete;

 private:
  size_t prev_size_;
};
const std::string& current_cell_path();

}  // namespace mixprec
