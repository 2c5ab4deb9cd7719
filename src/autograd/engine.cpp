// The backward engine. Dependencies are counted by an explicit-stack walk from the roots, then
// nodes run in Kahn order: a node runs once every gradient for its outputs has arrived (summed
// in the promoted dtype). Gradients are cast to each node's output dtypes unless the node takes
// any dtype (cast nodes: this is what lets an f32 weight gradient pass through a bf16 cast
// without rounding). Leaves accumulate into .grad, or into the capture list for grad() and
// value_and_grad(). Saved tensors are freed after use unless retain_graph.
#include <unordered_map>

#include "mixprec/autograd/autograd.h"
#include "core/autograd_graph.h"
#include "mixprec/ops/autocast.h"
#include "mixprec/ops/numerics.h"
#include "mixprec/ops/ops.h"

namespace mixprec {
namespace {

struct Buffer {
  std::vector<Tensor> grads;  // one per node output
  int pending = 0;            // edges still to deliver
};

Tensor accumulate(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  const DType dt = promote(a.dtype(), b.dtype());
  return ops::add(ops::amp_cast(a, dt), ops::amp_cast(b, dt));
}

// Records the first backward node that produced a non-finite gradient.
void check_backward(const Node& n, const std::vector<Tensor>& grads_out, const std::vector<Tensor>& grads_in,
                    NumericsCheckScope& check) {
  for (size_t i = 0; i < grads_in.size(); ++i) {
    const FiniteSummary f = summarize_finite(grads_in[i]);
    if (f.nonfinite == 0) continue;
    double in_max = 0.0;
    for (const Tensor& g : grads_out) in_max = std::max(in_max, summarize_finite(g).max_abs);
    const std::string which = n.next[i].leaf ? " (a parameter)" : "";
    // A cast is where a gradient enters a narrower dtype; name the cell that produced its input.
    const bool cast = static_cast<OpId>(n.op) == OpId::cast;
    const std::string cell = cast && n.next[i].fn ? n.next[i].fn->cell_path : n.cell_path;
    const std::string detail = cast ? "gradient cast to " + std::string(dtype_name(grads_in[i].dtype())) +
                                          (n.next[i].fn ? " at the output of " + std::string(n.next[i].fn->name) : "")
                                    : "gradient w.r.t. input " + std::to_string(i) + which;
    check.record(NonFiniteEvent{static_cast<OpId>(n.op), std::string(n.name), cell, "backward", detail,
                                grads_in[i].dtype(), in_max, f.nonfinite, f.has_nan});
    return;
  }
}

void check_seed(const Tensor& out, const Tensor& seed) {
  MIXPREC_CHECK(out.requires_grad(), "backward: the output does not require grad",
                Hint{"no input of the computation requires grad: mark parameters with "
                     "set_requires_grad(), and do not compute under NoGradGuard"});
  if (seed.defined())
    MIXPREC_CHECK(seed.shape() == out.shape(), "backward: gradient shape ", shape_str(seed.shape()),
                  " does not match the output shape ", shape_str(out.shape()));
  else
    MIXPREC_CHECK(out.numel() == 1, "backward: the output has shape ", shape_str(out.shape()),
                  "; gradients can be implied only for scalar outputs",
                  Hint{"pass a gradient of the output's shape, or reduce the output first"});
}

}  // namespace

std::vector<Tensor> run_backward(const std::vector<Tensor>& outputs,
                                 const std::vector<Tensor>& grad_outputs,
                                 const BackwardOptions& options) {
  MIXPREC_CHECK(outputs.size() == grad_outputs.size() || grad_outputs.empty(),
                "backward: ", outputs.size(), " outputs but ", grad_outputs.size(), " gradients");
  NoGradGuard no_grad;
  AutocastScope no_autocast(AutocastState{});
  BackwardPhaseGuard backward_phase;

  std::unordered_map<const AutogradMeta*, size_t> capture_index;
  std::vector<Tensor> captured;
  if (options.capture) {
    captured.resize(options.capture->size());
    for (size_t i = 0; i < options.capture->size(); ++i) {
      const Tensor& t = (*options.capture)[i];
      MIXPREC_CHECK(t.requires_grad() && t.is_leaf(), "grad: input ", i,
                    " is not a leaf that requires grad");
      capture_index[t.impl()->autograd.get()] = i;
    }
  }

  // Edges still to deliver into each captured leaf (counted in step 1, for on_capture_ready).
  std::vector<int> capture_pending(captured.size(), 0);
  auto deliver_leaf = [&](const Edge& e, Tensor g) {
    const std::shared_ptr<AutogradMeta>& leaf = e.leaf;
    auto it = options.capture ? capture_index.find(leaf.get()) : capture_index.end();
    if (g.defined()) {
      if (g.dtype() != e.leaf_dtype) g = ops::amp_cast(g, e.leaf_dtype);
      if (!g.is_contiguous()) g = g.contiguous();  // e.g. a stride-0 view from a sum's backward
      if (it != capture_index.end()) captured[it->second] = accumulate(captured[it->second], g);
      else if (!options.capture) leaf->grad = accumulate(leaf->grad, g);
    }
    if (it != capture_index.end() && --capture_pending[it->second] == 0 && options.on_capture_ready &&
        captured[it->second].defined())
      options.on_capture_ready(it->second, captured[it->second]);
  };
  auto count_capture_edge = [&](const Edge& e) {
    if (!options.capture || !e.leaf) return;
    if (auto it = capture_index.find(e.leaf.get()); it != capture_index.end()) ++capture_pending[it->second];
  };

  // 1. Seeds, and dependency counts by an explicit-stack walk.
  std::unordered_map<Node*, Buffer> buffers;
  std::vector<Node*> stack;
  auto visit = [&](Node* n) {
    auto [it, inserted] = buffers.try_emplace(n);
    if (inserted) {
      it->second.grads.resize(n->output_dtypes.size());
      stack.push_back(n);
    }
  };
  std::vector<std::pair<Edge, Tensor>> seeds;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    const Tensor seed_in = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    check_seed(out, seed_in);
    Tensor seed = seed_in.defined() ? seed_in : ones(out.shape(), {.dtype = out.dtype(), .device = out.device()});
    seeds.emplace_back(autograd::edge_of(out), seed);
    if (!out.grad_fn()) count_capture_edge(seeds.back().first);
    if (out.grad_fn()) visit(out.grad_fn().get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    MIXPREC_CHECK(n->backward != nullptr, "backward: the graph through '", n->name,
                  "' was already freed by an earlier backward",
                  Hint{"pass retain_graph = true to the first backward to run it twice"});
    for (const Edge& e : n->next) {
      count_capture_edge(e);
      if (!e.fn) continue;
      visit(e.fn.get());
      ++buffers[e.fn.get()].pending;
    }
  }

  // 2. Deliver the seeds; roots with no pending inputs are ready.
  std::vector<Node*> ready;
  for (auto& [edge, seed] : seeds) {
    if (edge.fn) {
      Buffer& b = buffers[edge.fn.get()];
      b.grads[edge.output_nr] = accumulate(b.grads[edge.output_nr], seed);
    } else if (edge.leaf) {
      deliver_leaf(edge, seed);
    }
  }
  for (auto& [node, b] : buffers)
    if (b.pending == 0) ready.push_back(node);

  // 3. Kahn's algorithm.
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    Buffer& b = buffers[n];
    std::vector<Tensor> grads = std::move(b.grads);
    Device device = Device::cpu();  // a missing output gradient: zeros where the others are
    for (const Tensor& g : grads)
      if (g.defined()) device = g.device();
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) {
        grads[i] = zeros(n->output_shapes[i], {.dtype = n->output_dtypes[i], .device = device});
      } else if (!n->accepts_any_grad_dtype && grads[i].dtype() != n->output_dtypes[i]) {
        grads[i] = ops::amp_cast(grads[i], n->output_dtypes[i]);
      }
    }
    std::vector<Tensor> in_grads = n->backward(grads);
    MIXPREC_ASSERT(in_grads.size() == n->next.size(), "backward of ", n->name, " returned ",
                   in_grads.size(), " gradients for ", n->next.size(), " inputs");
    if (NumericsCheckScope* check = numerics_check_any_phase(); check && !check->first())
      check_backward(*n, grads, in_grads, *check);
    if (!options.retain_graph) n->release();
    for (size_t i = 0; i < n->next.size(); ++i) {
      const Edge& e = n->next[i];
      if (e.fn) {
        Buffer& nb = buffers[e.fn.get()];
        if (in_grads[i].defined())
          nb.grads[e.output_nr] = accumulate(nb.grads[e.output_nr], in_grads[i]);
        if (--nb.pending == 0) ready.push_back(e.fn.get());
      } else if (e.leaf) {
        deliver_leaf(e, in_grads[i]);
      }
    }
  }
  return captured;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  run_backward({*this}, {gradient}, {.retain_graph = retain_graph});
}

std::vector<Tensor> grad(const Tensor& output, const std::vector<Tensor>& inputs,
                         bool retain_graph) {
  return run_backward({output}, {Tensor()}, {.retain_graph = retain_graph, .capture = &inputs});
}

namespace detail {

std::vector<Tensor> as_tensor_list(Tensor t) { return {std::move(t)}; }
std::vector<Tensor> as_tensor_list(std::vector<Tensor> v) { return v; }

void check_grad_spec(const std::vector<int>& positions, const std::vector<Tensor>& weights) {
  MIXPREC_CHECK(!positions.empty() || !weights.empty(),
                "value_and_grad: nothing to differentiate: grad_position is None and the weight list is empty",
                Hint{"pass the parameters (optimizer.parameters()) as weights, or argument indices as "
                     "grad_position"});
  for (size_t k = 0; k < positions.size(); ++k) {
    MIXPREC_CHECK(positions[k] >= 0, "value_and_grad: grad_position ", positions[k], " is negative; expected ",
                  "argument indices >= 0");
    for (size_t j = 0; j < k; ++j)
      MIXPREC_CHECK(positions[j] != positions[k], "value_and_grad: grad_position ", positions[k],
                    " is given twice");
  }
  for (size_t i = 0; i < weights.size(); ++i)
    MIXPREC_CHECK(weights[i].defined() && weights[i].is_leaf() && weights[i].requires_grad(),
                  "value_and_grad: weight ", i, " is not a leaf that requires grad",
                  Hint{"pass parameters (cell.trainable_params() or optimizer.parameters())"});
}

Tensor input_leaf(size_t index, const std::vector<int>& positions, std::vector<Tensor>& inputs,
                  const Tensor& arg) {
  for (size_t k = 0; k < positions.size(); ++k) {
    if (static_cast<size_t>(positions[k]) != index) continue;
    MIXPREC_CHECK(arg.defined(), "value_and_grad: argument ", index, " (grad_position) is undefined");
    MIXPREC_CHECK(is_floating(arg.dtype()), "value_and_grad: argument ", index, " (grad_position) is ",
                  dtype_name(arg.dtype()), "; gradients need a floating tensor");
    Tensor leaf = arg.detach();
    leaf.set_requires_grad(true);
    inputs[k] = leaf;
    return leaf;
  }
  return arg;
}

ValueAndGrad differentiate(std::vector<Tensor> values, const std::vector<int>& positions,
                           const std::vector<Tensor>& inputs, size_t num_args,
                           const std::vector<Tensor>& weights, const ValueAndGradOptions& options) {
  for (size_t k = 0; k < positions.size(); ++k)
    MIXPREC_CHECK(inputs[k].defined(), "value_and_grad: grad_position ", positions[k],
                  static_cast<size_t>(positions[k]) >= num_args
                      ? " is out of range: the function was called with " + std::to_string(num_args) + " arguments"
                      : std::string(" names an argument that is not a Tensor"));
  MIXPREC_CHECK(!values.empty(), "value_and_grad: the function returned no tensors");
  MIXPREC_CHECK(options.has_aux || values.size() == 1, "value_and_grad: the function returned ",
                values.size(), " tensors but has_aux is false",
                Hint{"set {.has_aux = true} to differentiate the first output and return the rest"});
  std::vector<Tensor> wrt = inputs;
  wrt.insert(wrt.end(), weights.begin(), weights.end());
  std::vector<Tensor> grads = run_backward({values[0]}, {Tensor()}, {.capture = &wrt});
  for (size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].defined())
      grads[i] = zeros(wrt[i].shape(), {.dtype = wrt[i].dtype(), .device = wrt[i].device()});
  return ValueAndGrad{std::move(values), std::move(grads)};
}

}  // namespace detail
}  // namespace mixprec
