// The autograd graph's data structures, internal to the library (not in mixprec.h): per-tensor
// AutogradMeta, graph Nodes with their edges and explicitly saved tensors. Ops (src/ops) record
// nodes; the engine that walks them (backward, grad, value_and_grad) is the autograd layer
// (src/autograd). The grad mode users switch is public: mixprec/grad_mode.h.
// Invariants: saved tensors are detached (no autograd meta), so a node never keeps itself alive
// through a saved output; a saved tensor remembers its storage version and refuses to unpack
// after an in-place change; tearing down a long chain of nodes never recurses.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "mixprec/grad_mode.h"
#include "mixprec/tensor.h"

namespace mixprec {

struct Node;

// Where a gradient goes: output `output_nr` of `fn`, or (fn null) the leaf tensor `leaf`.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t output_nr = 0;
  std::shared_ptr<AutogradMeta> leaf;
  DType leaf_dtype = DType::f32;  // a leaf's gradient is cast to the leaf's own dtype
  bool valid() const { return fn != nullptr || leaf != nullptr; }
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                      // accumulated gradient of a leaf (undefined until backward)
  std::shared_ptr<Node> grad_fn;    // null for leaves
  uint32_t output_nr = 0;           // which output of grad_fn this tensor is
  bool retains_grad = false;        // keep .grad on a non-leaf too
};

// A tensor saved for backward: detached, with the storage version at save time.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  // Throws if the storage was written in place since it was saved.
  Tensor unpack(std::string_view op) const;
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
};

// Backward function: receives one gradient per output of the node (cast to the output dtypes
// unless the node accepts any dtype), returns one gradient per edge (undefined = no gradient).
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

struct Node {
  std::string_view name;           // op name, for errors, provenance and MIXPREC_VERBOSE
  uint16_t op = 0;                 // OpId of the op that recorded it
  std::vector<Edge> next;          // one per differentiable input, in input order
  std::vector<DType> output_dtypes;
  std::vector<Shape> output_shapes;
  BackwardFn backward;
  bool accepts_any_grad_dtype = false;  // cast nodes take the gradient in whatever dtype it comes
  std::string cell_path;           // the cell that ran the op (for overflow provenance)

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();  // iterative teardown of the chain behind it
  // Frees saved tensors (after a backward without retain_graph).
  void release() { backward = nullptr; }
};

// Helpers for ops that record nodes.
namespace autograd {
// True if grad mode is on and any of the tensors requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);
// The edge a gradient for `t` should follow (invalid if t does not require grad).
Edge edge_of(const Tensor& t);
// Makes `outputs` the outputs of `node` (sets grad_fn, output_nr, requires_grad).
void set_history(std::vector<Tensor>& outputs, const std::shared_ptr<Node>& node);
void set_history(Tensor& output, const std::shared_ptr<Node>& node);
}  // namespace autograd

}  // namespace mixprec
