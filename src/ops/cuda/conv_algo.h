// The rule that picks one of cuDNN's ranked convolution algorithms (ops/cuda/conv.cpp), as a pure
// function over plain candidates, so that it is tested without a GPU or cuDNN
// (tests/ops/cuda_conv_algo_test.cpp). conv.cpp turns cuDNN's perf results
// (cudnnConvolution*AlgoPerf_t: status, memory, determinism, mathType) into candidates; this file
// knows no CUDA type. Invariant: the pick is the first candidate in cuDNN's order that every
// rule allows; with determinism asked for, never one cuDNN reports as non-deterministic.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace mixprec::ops::cuda {

// How an algorithm computes: cuDNN's FMA or default math, tensor cores on the operands' own
// type, or tensor cores that may convert the operands down (TENSOR_OP_MATH_ALLOW_CONVERSION: f32
// or bf16 data run as f16).
enum class AlgoMath { fma, tensor_op, tensor_op_converting };

// One of cuDNN's ranked algorithms: `ok` is its status == CUDNN_STATUS_SUCCESS, `deterministic`
// its determinism == CUDNN_DETERMINISTIC.
struct AlgoCandidate {
  int algo = 0;
  bool ok = false;
  size_t workspace = 0;
  AlgoMath math = AlgoMath::fma;
  bool deterministic = false;
};

struct AlgoRules {
  size_t max_workspace = 0;
  bool exact_f32 = false;      // f32 without TF32: FMA math only
  bool deterministic = false;  // only algorithms cuDNN reports as deterministic
};

// The index of the pick in the ranking (-1: none), and how many were passed over for each rule
// (each candidate counted once, for the first rule it breaks, in the order of the fields).
struct AlgoPick {
  int index = -1;
  int failed = 0, over_workspace = 0, converting = 0, tensor_op = 0, nondeterministic = 0;

  // "4 offered: 1 failed, 3 non-deterministic" (for the error when nothing is picked).
  std::string passed_over() const {
    std::string s =
        std::to_string(failed + over_workspace + converting + tensor_op + nondeterministic) +
        " offered";
    const char* sep = ": ";
    auto add = [&](int n, const char* what) {
      if (n == 0) return;
      s += sep + std::to_string(n) + " " + what;
      sep = ", ";
    };
    add(failed, "failed");
    add(over_workspace, "over the workspace limit");
    add(converting, "converting operands down");
    add(tensor_op, "on tensor cores (exact f32 asked for)");
    add(nondeterministic, "non-deterministic");
    return s;
  }
};

// The first candidate of the ranking that succeeded, fits max_workspace, never converts operands
// down, uses no tensor cores for exact f32 and, when determinism is asked for, is deterministic.
inline AlgoPick pick_algorithm(std::span<const AlgoCandidate> ranked, const AlgoRules& rules) {
  AlgoPick pick;
  for (size_t k = 0; k < ranked.size(); ++k) {
    const AlgoCandidate& c = ranked[k];
    if (!c.ok)
      ++pick.failed;
    else if (c.workspace > rules.max_workspace)
      ++pick.over_workspace;
    else if (c.math == AlgoMath::tensor_op_converting)
      ++pick.converting;
    else if (rules.exact_f32 && c.math == AlgoMath::tensor_op)
      ++pick.tensor_op;
    else if (rules.deterministic && !c.deterministic)
      ++pick.nondeterministic;
    else {
      pick.index = static_cast<int>(k);
      return pick;
    }
  }
  return pick;
}

}  // namespace mixprec::ops::cuda
