// oneDNN implementations of the matmul problem (ref/matmul.h): the matmul primitive with
// strided memory descriptors (a transposed operand is a strided view, never a copy), bias and a
// fused relu post-op, any batch broadcast, f32 dst from bf16 inputs; and f16_via_f32, which
// widens f16 operands to f32, runs the f32 primitive and rounds the output once (exact
// emulation of an f16 accelerator, not faster). Primitives are cached per thread.
#pragma once

#include <string>

#include "ops/matmul_problem.h"

namespace mixprec::ops::onednn {

std::string matmul_declines(const MatmulProblem& p);
void matmul_run(const MatmulProblem& p);

std::string matmul_f16_via_f32_declines(const MatmulProblem& p);
void matmul_f16_via_f32_run(const MatmulProblem& p);

// oneDNN's name for the implementation it picked for p ("brg:avx512_core_amx", ...), or the
// reason it cannot; for tests and benchmarks that check the fast path is taken.
std::string matmul_impl_name(const MatmulProblem& p);

}  // namespace mixprec::ops::onednn
