// Autograd graph structures: grad mode, saved-tensor version checks, history setting, and the
// iterative Node destructor that keeps a 10^5-node chain from overflowing the stack.
#include "core/autograd_graph.h"

namespace mixprec {

namespace {
thread_local bool t_grad_enabled = true;
}

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  tensor_ = t.detach();
  version_ = t.storage()->version();
}

Tensor SavedTensor::unpack(std::string_view op) const {
  if (tensor_.defined()) {
    MIXPREC_CHECK(tensor_.storage()->version() == version_, op,
                  ": a tensor saved for the backward pass was modified in place (version ",
                  tensor_.storage()->version(), ", saved at ", version_, ")",
                  Hint{"do not write into tensors (copy_, fill_, optimizer steps) between the "
                       "forward pass and backward(); clone() them first if you must"});
  }
  return tensor_;
}

Node::~Node() {
  // Unlink successors that only we hold, breadth first, so that their destructors run with
  // empty edge lists: the chain is torn down in a loop instead of by recursion.
  std::vector<std::shared_ptr<Node>> stack;
  auto take = [&](std::vector<Edge>& edges) {
    for (Edge& e : edges)
      if (e.fn && e.fn.use_count() == 1) stack.push_back(std::move(e.fn));
    edges.clear();
  };
  take(next);
  backward = nullptr;
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    take(n->next);
    n->backward = nullptr;  // saved tensors may hold nothing recursive, but free them now
  }
}

namespace autograd {

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge edge_of(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta* m = t.impl()->autograd.get();
  if (m->grad_fn) return Edge{m->grad_fn, m->output_nr, nullptr};
  return Edge{nullptr, 0, t.impl()->autograd, t.dtype()};
}

void set_history(std::vector<Tensor>& outputs, const std::shared_ptr<Node>& node) {
  node->output_dtypes.clear();
  node->output_shapes.clear();
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& o = outputs[i];
    node->output_dtypes.push_back(o.dtype());
    node->output_shapes.push_back(o.shape());
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = node;
    meta->output_nr = static_cast<uint32_t>(i);
    o.impl()->autograd = std::move(meta);
  }
}

void set_history(Tensor& output, const std::shared_ptr<Node>& node) {
  std::vector<Tensor> outs{output};
  set_history(outs, node);
}

}  // namespace autograd
}  // namespace mixprec

// ------------------------------------------------------------------ Tensor's autograd accessors
namespace mixprec {

bool Tensor::requires_grad() const {
  return defined() && impl_->autograd && impl_->autograd->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool on) {
  check_defined("set_requires_grad");
  if (impl_->autograd && impl_->autograd->grad_fn) {
    MIXPREC_CHECK(on, "set_requires_grad(false): only leaves can stop requiring grad",
                  Hint{"use detach() to cut a non-leaf out of the graph"});
    return *this;
  }
  MIXPREC_CHECK(!on || is_floating(dtype()), "set_requires_grad: only floating tensors ",
                "can require gradients, got ", dtype_name(dtype()));
  if (!impl_->autograd) impl_->autograd = std::make_shared<AutogradMeta>();
  impl_->autograd->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return !(defined() && impl_->autograd && impl_->autograd->grad_fn); }

Tensor Tensor::grad() const {
  check_defined("grad");
  return impl_->autograd ? impl_->autograd->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  check_defined("set_grad");
  if (g.defined())
    MIXPREC_CHECK(g.shape() == shape(), "set_grad: expected a gradient of shape ",
                  shape_str(shape()), ", got ", shape_str(g.shape()));
  if (!impl_->autograd) impl_->autograd = std::make_shared<AutogradMeta>();
  impl_->autograd->grad = g;
}

std::shared_ptr<Node> Tensor::grad_fn() const {
  return defined() && impl_->autograd ? impl_->autograd->grad_fn : nullptr;
}

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

}  // namespace mixprec
