// nn::Cell: the base of every layer and network (MindSpore's nn.Cell). A cell registers its
// parameters (leaf tensors that require grad), buffers (running statistics: saved, not trained)
// and sub-cells under names, so that parameters_and_names() yields hierarchical names like
// "features.0.weight". Calling a cell runs construct() inside its scopes: the cell path (for
// the precision table and overflow provenance) and, when set, its AMP configuration or
// to_float() dtype. Cells are not copyable: sub-cells held as members register by reference;
// SequentialCell owns its children.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/ops/autocast.h"
#include "mixprec/tensor.h"

namespace mixprec::nn {

using NamedTensor = std::pair<std::string, Tensor>;

// Set on the outermost cell by the amp layer (auto_mixed_precision / build_train_network).
struct AmpConfig {
  AutocastState state;                     // the level, low dtype, lists; state.cache points
  std::shared_ptr<CastCache> cache;        //   into this cache, owned here
  bool cast_output_to_fp32 = false;
  std::string level;  // "O2", "custom black list", ...: named by the undone-cast warning
};

// The explicit-cast rule's one silent case (docs/amp.md): a value the user cast (astype, ops::cast)
// inside a cell and passed to a sub-cell that casts its inputs at its boundary (any cell of an
// O2/O3 network, a to_float cell) is cast back there, as in MindSpore's GRAPH_MODE. Each such
// (cell, dtype) is reported once per process on stderr, naming the cell, the level and the fix;
// set_undone_cast_warnings(false) or MIXPREC_WARN_UNDONE_CAST=0 silences the print (the record
// stays, and the overflow provenance of a NaN inside that cell still mentions it).
struct UndoneCast {
  std::string path;        // the sub-cell's path ("softmax", "block.0.attn")
  std::string cell_class;  // its type_name()
  std::string level;       // "O2", "O3", "to_float(float16)", ...
  DType user_dtype;        // what the user cast to
  DType cell_dtype;        // what the boundary casts it to
  std::string message;     // the warning's text
};
void set_undone_cast_warnings(bool print);
std::vector<UndoneCast> undone_casts();  // every one reported so far, in order
void clear_undone_casts();               // for tests: the next one is reported again
// The note for a non-finite value found in `cell_path`: the undone casts into that cell or a
// cell around it, "" if none.
std::string undone_cast_note(const std::string& cell_path);

class Cell {
 public:
  Cell() = default;
  virtual ~Cell() = default;
  Cell(const Cell&) = delete;
  Cell& operator=(const Cell&) = delete;

  // Override the construct that matches the number of inputs.
  virtual Tensor construct(const Tensor& x);
  virtual Tensor construct(const Tensor& x, const Tensor& y);

  Tensor operator()(const Tensor& x);
  Tensor operator()(const Tensor& x, const Tensor& y);

  // ---- registration (returns the registered object)
  Tensor register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor value);
  Cell& register_cell(const std::string& name, Cell& cell);
  Cell& register_cell(const std::string& name, std::shared_ptr<Cell> cell);  // owned

  // ---- traversal (depth first, registration order; names are hierarchical)
  std::vector<Tensor> trainable_params() const;
  std::vector<NamedTensor> parameters_and_names() const;  // all parameters, trainable or not
  std::vector<NamedTensor> buffers_and_names() const;
  std::vector<std::pair<std::string, Cell*>> cells_and_names();  // "" is this cell
  // Parameters and buffers, for checkpoints.
  std::vector<NamedTensor> state_and_names() const;

  // ---- device
  // Moves every parameter and buffer of this cell and its sub-cells to `device` in place (PyTorch's
  // module.to(device)): each tensor keeps its identity, so the layers' members, an optimizer's
  // parameter list and requires_grad still refer to it; a gradient moves along. Tensors already
  // there are left as they are (to(Device::cpu()) on a CPU network changes nothing). Casts that
  // the AMP configurations cached are dropped. An optimizer's state follows its parameters
  // (optim::Optimizer::to, or by itself at its next step).
  Cell& to(Device device);

  // ---- modes and precision
  Cell& set_train(bool mode = true);  // recursive
  bool training() const { return training_; }
  // Forces this cell's compute dtype (MindSpore Cell.to_float); wins over the AMP level's lists.
  Cell& to_float(DType dtype);
  std::optional<DType> float_dtype() const { return float_dtype_; }
  void set_amp_config(std::optional<AmpConfig> config) { amp_ = std::move(config); }
  const std::optional<AmpConfig>& amp_config() const { return amp_; }
  AmpConfig* mutable_amp_config() { return amp_ ? &*amp_ : nullptr; }

  // "Dense", "Conv2d", ... for printing and the precision table.
  virtual std::string type_name() const { return "Cell"; }
  // A one-line description of the configuration, e.g. "in=784, out=10".
  virtual std::string extra_repr() const { return ""; }
  std::string repr(int indent = 0) const;

  const std::vector<std::pair<std::string, Cell*>>& children() const { return children_; }

 private:
  template <class Fn> Tensor call(const Tensor* x, const Tensor* y, Fn&& fn);
  void check_undone_cast(const Tensor& x) const;
  void collect(const std::string& prefix, std::vector<NamedTensor>& out, bool params, bool buffers,
               bool trainable_only) const;

  std::vector<NamedTensor> params_;
  std::vector<NamedTensor> buffers_;
  std::vector<std::pair<std::string, Cell*>> children_;
  std::vector<std::shared_ptr<Cell>> owned_;
  std::string name_;  // this cell's name in its parent
  bool training_ = true;
  std::optional<DType> float_dtype_;
  std::optional<AmpConfig> amp_;
};

}  // namespace mixprec::nn
