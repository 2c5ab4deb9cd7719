// The autograd engine's public API: backward into .grad (Tensor::backward), grad(outputs,
// inputs) returning gradients without touching .grad, and the seed's functional
// value_and_grad(fn, params, {.has_aux}). The engine walks the graph iteratively (Kahn's
// algorithm over dependency counts), so depth is bounded by memory, not by the stack; it runs
// with grad mode off and autocast off; a tensor used twice gets the sum of its gradients.
#pragma once

#include <functional>
#include <tuple>
#include <type_traits>
#include <vector>

#include "mixprec/graph.h"
#include "mixprec/tensor.h"

namespace mixprec {

struct BackwardOptions {
  bool retain_graph = false;
  // Gradients for these leaves are returned instead of being accumulated into .grad.
  const std::vector<Tensor>* capture = nullptr;
};

// Runs backward from `outputs` with seed gradients `grad_outputs` (undefined: ones, for scalar
// outputs only). Returns the captured gradients (one per options.capture entry; undefined where
// no gradient reached it), else an empty vector.
std::vector<Tensor> run_backward(const std::vector<Tensor>& outputs,
                                 const std::vector<Tensor>& grad_outputs,
                                 const BackwardOptions& options = {});

// d(output)/d(inputs) for a scalar output. inputs must be leaves that require grad.
std::vector<Tensor> grad(const Tensor& output, const std::vector<Tensor>& inputs,
                         bool retain_graph = false);

struct ValueAndGradOptions {
  // fn returns (loss, aux...): only the first output is differentiated; all are returned.
  bool has_aux = false;
};

struct ValueAndGrad {
  std::vector<Tensor> values;  // fn's outputs (the loss first)
  std::vector<Tensor> grads;   // one per parameter, in order; zeros where none reached it
};

namespace detail {
std::vector<Tensor> as_tensor_list(Tensor t);
std::vector<Tensor> as_tensor_list(std::vector<Tensor> v);
template <class... Ts>
std::vector<Tensor> as_tensor_list(std::tuple<Ts...> t) {
  return std::apply([](auto&&... x) { return std::vector<Tensor>{Tensor(x)...}; }, std::move(t));
}
ValueAndGrad differentiate(std::vector<Tensor> values, const std::vector<Tensor>& params,
                           const ValueAndGradOptions& options);
}  // namespace detail

// The seed's ms.value_and_grad(fn, None, params, has_aux=True): returns a callable that runs
// fn(args...) and returns {values, grads w.r.t. params}. fn may return a Tensor, a
// std::vector<Tensor> or a std::tuple of Tensors. The gradients are not added to .grad.
template <class Fn>
auto value_and_grad(Fn fn, std::vector<Tensor> params, ValueAndGradOptions options = {}) {
  return [fn = std::move(fn), params = std::move(params), options](auto&&... args) {
    EnableGradGuard enable(true);
    std::vector<Tensor> values =
        detail::as_tensor_list(fn(std::forward<decltype(args)>(args)...));
    return detail::differentiate(std::move(values), params, options);
  };
}

}  // namespace mixprec
