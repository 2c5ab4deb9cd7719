// Umbrella header: everything a program that trains with mixprec programs against (tensors,
// ops, cells, AMP, optimizers, data, Model, callbacks, guards, checkpoints). The library's
// internals stay out: the autograd graph's nodes and saved tensors (src/core/graph.h), the
// weight cast cache (src/ops/cast_cache.h), kernel dispatch (src/ops/dispatch.h).
#pragma once

#include "mixprec/allocator.h"
#include "mixprec/context.h"
#include "mixprec/convert.h"
#include "mixprec/cpu_features.h"
#include "mixprec/device.h"
#include "mixprec/dtype.h"
#include "mixprec/error.h"
#include "mixprec/grad_mode.h"
#include "mixprec/half.h"
#include "mixprec/rng.h"
#include "mixprec/shape.h"
#include "mixprec/tensor.h"
#include "mixprec/version.h"

#include "mixprec/amp/amp.h"
#include "mixprec/amp/level.h"
#include "mixprec/amp/loss_scale.h"
#include "mixprec/autograd/autograd.h"
#include "mixprec/data/dataset.h"
#include "mixprec/data/idx.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/nn/cell.h"
#include "mixprec/nn/init.h"
#include "mixprec/nn/layers.h"
#include "mixprec/nn/loss.h"
#include "mixprec/nn/zoo.h"
#include "mixprec/ops/ops.h"
#include "mixprec/optim/optimizer.h"
#include "mixprec/train/callback.h"
#include "mixprec/train/checkpoint.h"
#include "mixprec/train/guard.h"
#include "mixprec/train/model.h"
