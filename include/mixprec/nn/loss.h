// Loss cells (MindSpore names): SoftmaxCrossEntropyWithLogits, MSELoss, NLLLoss, and
// WithLossCell, which joins a backbone and a loss into one cell taking (data, label).
// Losses compute in fp32 (ops/ops.h); AMP's cast of the network output to fp32 before the loss
// is done by the amp layer's wrapper, not here.
#pragma once

#include "mixprec/nn/cell.h"
#include "mixprec/ops/ops.h"

namespace mixprec::nn {

using ops::Reduction;

struct SoftmaxCrossEntropyOptions {
  bool sparse = false;                  // labels are class indices
  Reduction reduction = Reduction::none;  // MindSpore's default
};

class SoftmaxCrossEntropyWithLogits : public Cell {
 public:
  explicit SoftmaxCrossEntropyWithLogits(SoftmaxCrossEntropyOptions options = {}) : options_(options) {}
  // logits [N, C] with labels [N] (sparse) or [N, C]; with sparse labels also a sequence's
  // logits [B, L, C] with labels [B, L] (a language model's next-token loss): the rows are
  // flattened, and reduction none returns [B, L].
  Tensor construct(const Tensor& logits, const Tensor& labels) override;
  std::string type_name() const override { return "SoftmaxCrossEntropyWithLogits"; }

 private:
  SoftmaxCrossEntropyOptions options_;
};

class MSELoss : public Cell {
 public:
  explicit MSELoss(Reduction reduction = Reduction::mean) : reduction_(reduction) {}
  Tensor construct(const Tensor& prediction, const Tensor& target) override {
    return ops::mse_loss(prediction, target, reduction_);
  }
  std::string type_name() const override { return "MSELoss"; }

 private:
  Reduction reduction_;
};

class NLLLoss : public Cell {
 public:
  explicit NLLLoss(Reduction reduction = Reduction::mean) : reduction_(reduction) {}
  Tensor construct(const Tensor& log_probs, const Tensor& labels) override {
    return ops::nll_loss(log_probs, labels, reduction_);
  }
  std::string type_name() const override { return "NLLLoss"; }

 private:
  Reduction reduction_;
};

// loss_fn(backbone(data), label). Does not own either cell, and does not register them as
// children: the backbone stays the root of its own cell paths ("features.0", not
// "backbone.features.0"), so provenance and the precision table name cells the same way
// whether the network runs alone or wrapped.
class WithLossCell : public Cell {
 public:
  WithLossCell(Cell& backbone, Cell& loss_fn) : backbone_(backbone), loss_fn_(loss_fn) {}
  Tensor construct(const Tensor& data, const Tensor& label) override {
    return loss_fn_(backbone_(data), label);
  }
  std::string type_name() const override { return "WithLossCell"; }
  Cell& backbone() { return backbone_; }

 private:
  Cell& backbone_;
  Cell& loss_fn_;
};

}  // namespace mixprec::nn
