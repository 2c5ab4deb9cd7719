// dispatch's error when no kernel accepts a problem (a test-only problem type whose two kernels
// both decline): it names the op, the problem and each kernel's reason even without
// MIXPREC_VERBOSE (a CUDA problem no CUDA kernel takes, e.g. attention with a 16-bit softmax,
// reports why that way). And the kernel profile's work per call (the FLOPs and bytes that
// `mixprec bench --profile` turns into each kernel's floor).
#include <gtest/gtest.h>

#include "mixprec/ops/ops.h"
#include "mixprec/ops/profile.h"
#include "op_test_util.h"
#include "ops/dispatch.h"
#include "test_util.h"

namespace mixprec {
namespace {

struct DeclinedProblem {
  Device device() const { return Device::cpu(); }
  std::string describe() const { return "a test problem"; }
};
std::string declines_a(const DeclinedProblem&) { return "reason a"; }
std::string declines_b(const DeclinedProblem&) { return "reason b"; }
void run_nothing(const DeclinedProblem&) {}

TEST(Dispatch, WhenNoKernelAcceptsTheErrorNamesEachKernelsReason) {
  ASSERT_EQ(ops::verbose_level(), 0) << "the point is the quiet path";
  ops::register_kernel<DeclinedProblem>({"a", Device::Type::cpu, declines_a, run_nothing});
  ops::register_kernel<DeclinedProblem>({"b", Device::Type::cpu, declines_b, run_nothing});
  const auto run = [] { ops::dispatch(OpId::add, "forward", DeclinedProblem{}); };
  EXPECT_TRUE(testing::throws_error_with(
      run, "add forward: no implementation accepts a test problem (a: reason a; b: reason b)"));
}

// The row of (op, phase) in the profile; fails the test when there is none or several.
ops::ProfileRow row_of(const std::string& op, const std::string& phase) {
  std::vector<ops::ProfileRow> found;
  for (const ops::ProfileRow& r : ops::profile_rows())
    if (r.op == op && r.phase == phase) found.push_back(r);
  EXPECT_EQ(found.size(), 1u) << op << " " << phase;
  return found.empty() ? ops::ProfileRow{} : found.front();
}

TEST(Dispatch, TheProfileChargesEachCallItsFlopsAndTheBytesOfItsTensors) {
  // Hand-counted: a linear [8, 5] x [3, 5]^T + bias in f32 is 2 * 8 * 3 * 5 FLOPs and reads x,
  // w, bias and writes y once; its backward's weight gradient the same products. An add with a
  // broadcast operand counts the operand's memory once ([1, 3] read, not [8, 3]); attention
  // [B, H, L, D] = [2, 1, 4, 8] forward 2 B H L^2 (D + Dv), its backward twice that.
  ops::profile_reset();
  ops::set_profiling(true);
  const Tensor x = testing::random({8, 5}, 1, DType::f32);
  const Tensor w = testing::random({3, 5}, 2, DType::f32).set_requires_grad(true);
  const Tensor b = testing::random({3}, 3, DType::f32);
  ops::linear(x, w, b).backward(testing::random({8, 3}, 4, DType::f32));
  const Tensor y =
      ops::add(testing::random({8, 3}, 5, DType::f32), testing::random({1, 3}, 6, DType::f32));
  const Tensor q = testing::random({2, 1, 4, 8}, 7, DType::f32);
  const Tensor k = testing::random({2, 1, 4, 8}, 8, DType::f32);
  const Tensor v = testing::random({2, 1, 4, 8}, 9, DType::f32).set_requires_grad(true);
  ops::scaled_dot_product_attention(q, k, v).backward(
      testing::random({2, 1, 4, 8}, 10, DType::f32));
  ops::set_profiling(false);

  const ops::ProfileRow fwd = row_of("linear", "forward");
  EXPECT_EQ(fwd.work.flops, 2.0 * 8 * 3 * 5);
  EXPECT_EQ(fwd.work.bytes, 4.0 * (8 * 5 + 3 * 5 + 3 + 8 * 3));
  EXPECT_EQ(row_of("linear", "backward_weights").work.flops, 2.0 * 8 * 3 * 5);
  const ops::ProfileRow add = row_of("add", "forward");
  EXPECT_EQ(add.work.flops, 0.0);
  EXPECT_EQ(add.work.bytes, 4.0 * (8 * 3 + 1 * 3 + 8 * 3));
  const double attention = 2.0 * 2 * 1 * 4 * 4 * (8 + 8);
  EXPECT_EQ(row_of("scaled_dot_product_attention", "forward").work.flops, attention);
  EXPECT_EQ(row_of("scaled_dot_product_attention", "backward").work.flops, 2 * attention);
  EXPECT_EQ(row_of("scaled_dot_product_attention", "forward").work.bytes,
            4.0 * (4 * 2 * 4 * 8 + 2 * 4));  // q, k, v, o and the f32 lse [2, 1, 4]
  ops::profile_reset();
}

TEST(Dispatch, TouchedBytesCountABroadcastOrTransposedTensorsMemoryOnce) {
  const Tensor t = testing::random({4, 6}, 11, DType::bf16);
  EXPECT_EQ(ops::touched_bytes(t), 2.0 * 24);
  EXPECT_EQ(ops::touched_bytes(t.transpose(0, 1)), 2.0 * 24);
  EXPECT_EQ(ops::touched_bytes(ops::broadcast_to(t.slice(0, 0, 1), {5, 6})), 2.0 * 6);
  EXPECT_EQ(ops::touched_bytes(Tensor()), 0.0);
}

}  // namespace
}  // namespace mixprec
