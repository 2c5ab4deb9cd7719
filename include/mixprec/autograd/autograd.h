// The autograd engine's public API: backward into .grad (Tensor::backward), grad(outputs,
// inputs) returning gradients without touching .grad, and the seed's functional
// value_and_grad(fn, grad_position, weights, {.has_aux}) with MindSpore's grad_position. The
// engine walks the graph iteratively (Kahn's algorithm over dependency counts), so depth is
// bounded by memory, not by the stack; it runs with grad mode off and autocast off; a tensor
// used twice gets the sum of its gradients.
#pragma once

#include <concepts>
#include <functional>
#include <initializer_list>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/grad_mode.h"
#include "mixprec/tensor.h"

namespace mixprec {

struct BackwardOptions {
  bool retain_graph = false;
  // Gradients for these leaves are returned instead of being accumulated into .grad.
  const std::vector<Tensor>* capture = nullptr;
  // With capture: called once per capture entry as soon as its gradient is final (every edge into
  // that leaf has delivered), with the summed gradient, in the order gradients complete; never for
  // an entry no gradient reaches. The data-parallel reducer starts its all-reduces here.
  std::function<void(size_t index, const Tensor& grad)> on_capture_ready{};
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

// Which positional arguments of fn to differentiate, MindSpore's grad_position: std::nullopt
// (None: no argument), one index, or a list of indices ({0, 2}).
struct GradPosition {
  GradPosition(std::nullopt_t) {}                                       // NOLINT: implicit by design
  GradPosition(int position) : positions{position} {}                   // NOLINT
  GradPosition(std::initializer_list<int> list) : positions(list) {}    // NOLINT
  GradPosition(std::vector<int> list) : positions(std::move(list)) {}  // NOLINT
  std::vector<int> positions;
};

struct ValueAndGrad {
  std::vector<Tensor> values;  // fn's outputs (the loss first)
  // The gradients of the first output: one per grad_position (in that order), then one per
  // weight (in order); zeros where no gradient reached. MindSpore returns the pair
  // (input grads, weight grads) when both are asked for; here they are one list, inputs first.
  std::vector<Tensor> grads;
};

namespace detail {
std::vector<Tensor> as_tensor_list(Tensor t);
std::vector<Tensor> as_tensor_list(std::vector<Tensor> v);
template <class... Ts>
std::vector<Tensor> as_tensor_list(std::tuple<Ts...> t) {
  return std::apply([](auto&&... x) { return std::vector<Tensor>{Tensor(x)...}; }, std::move(t));
}
// Throws unless there is something to differentiate and the positions are >= 0 and distinct.
void check_grad_spec(const std::vector<int>& positions, const std::vector<Tensor>& weights);
// Argument `index` of the call: a fresh leaf that requires grad (stored in `inputs` at its slot)
// where `index` is a grad position, else `arg` itself.
Tensor input_leaf(size_t index, const std::vector<int>& positions, std::vector<Tensor>& inputs,
                  const Tensor& arg);
template <class A>
  requires(!std::same_as<std::remove_cvref_t<A>, Tensor>)
A&& input_leaf(size_t, const std::vector<int>&, std::vector<Tensor>&, A&& arg) {
  return std::forward<A>(arg);
}
ValueAndGrad differentiate(std::vector<Tensor> values, const std::vector<int>& positions,
                           const std::vector<Tensor>& inputs, size_t num_args,
                           const std::vector<Tensor>& weights, const ValueAndGradOptions& options);
}  // namespace detail

// The seed's ms.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True):
//   auto grad_fn = value_and_grad(forward_fn, std::nullopt, optimizer.parameters(), {.has_aux = true});
//   auto [values, grads] = grad_fn(data, label);
// returns a callable that runs fn(args...) and returns {values, gradients of the first value}.
// grad_position as in MindSpore: std::nullopt for no argument gradients, an index or a list of
// indices for the gradients w.r.t. those Tensor arguments (default 0, MindSpore's default);
// with weights too, the argument gradients come first. fn may return a Tensor, a
// std::vector<Tensor> or a std::tuple of Tensors. Nothing is added to any .grad.
template <class Fn>
auto value_and_grad(Fn fn, GradPosition grad_position = 0, std::vector<Tensor> weights = {},
                    ValueAndGradOptions options = {}) {
  detail::check_grad_spec(grad_position.positions, weights);
  return [fn = std::move(fn), positions = std::move(grad_position.positions), weights = std::move(weights),
          options](auto&&... args) {
    EnableGradGuard enable(true);
    std::vector<Tensor> inputs(positions.size());
    auto call = [&]<size_t... I>(std::index_sequence<I...>, auto&&... a) {
      return fn(detail::input_leaf(I, positions, inputs, std::forward<decltype(a)>(a))...);
    };
    std::vector<Tensor> values = detail::as_tensor_list(
        call(std::index_sequence_for<decltype(args)...>{}, std::forward<decltype(args)>(args)...));
    return detail::differentiate(std::move(values), positions, inputs, sizeof...(args), weights, options);
  };
}

// value_and_grad(fn, params, {.has_aux}): the gradients w.r.t. params only (grad_position None).
template <class Fn>
auto value_and_grad(Fn fn, std::vector<Tensor> params, ValueAndGradOptions options = {}) {
  return value_and_grad(std::move(fn), std::nullopt, std::move(params), options);
}

}  // namespace mixprec
