// SoftmaxCrossEntropyWithLogits: the [N, C] case is ops::softmax_cross_entropy; a language
// model's [B, L, C] logits with [B, L] class-index labels are flattened to rows first (a view for
// contiguous logits) and, with reduction none, the per-token losses come back as [B, L].
#include "mixprec/nn/loss.h"

#include "mixprec/error.h"

namespace mixprec::nn {

Tensor SoftmaxCrossEntropyWithLogits::construct(const Tensor& logits, const Tensor& labels) {
  const ops::SoftmaxCrossEntropyOptions o{.sparse = options_.sparse, .reduction = options_.reduction};
  if (!options_.sparse || logits.dim() <= 2) return ops::softmax_cross_entropy(logits, labels, o);
  const Shape rows(logits.shape().begin(), logits.shape().end() - 1);
  MIXPREC_CHECK(labels.shape() == rows, "SoftmaxCrossEntropyWithLogits: expected class-index labels of shape ",
                shape_str(rows), " for logits ", shape_str(logits.shape()), ", got ", shape_str(labels.shape()));
  const int64_t n = shape_numel(rows);
  const Tensor loss = ops::softmax_cross_entropy(ops::reshape(logits, {n, logits.size(-1)}),
                                                 ops::reshape(labels, {n}), o);
  return options_.reduction == Reduction::none ? ops::reshape(loss, rows) : loss;
}

}  // namespace mixprec::nn
