// The library's choice of convolution output layout (ops/layout_choice.h): a convolution whose
// channels-last output a Flatten must transpose writes row-major from its next call, with the same
// output and weight gradient (the bias gradient summed in another order); views, channels-last
// inputs and fixed formats never switch; the choice is kept for the process in either
// kernel-choice mode, never written to the cache file, recorded for checkpoints, and a pin wins.
// And the element-wise ops take operands of mixed layouts (a channels-last activation beside a
// row-major gradient) exactly.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <string>

#include "mixprec/autograd/autograd.h"
#include "mixprec/ops/ops.h"
#include "cache_dir.h"
#include "op_test_util.h"
#include "ops/kernel_choice.h"
#include "ops/layout.h"

namespace mixprec {
namespace {
using ops::KernelChoice;
using ops::KernelChoiceScope;
namespace choice = ops::choice;

using testing::read_text;

// An empty cache folder and a forgotten choice table while alive, with the choice mode set for
// this thread.
class Fresh {
 public:
  explicit Fresh(KernelChoice mode) : mode_(mode) {}
  std::filesystem::path file() const { return dir_.file(); }

 private:
  KernelChoiceScope mode_;
  testing::CacheDir dir_;
};

std::vector<uint64_t> bits(const Tensor& t) {
  std::vector<uint64_t> out;
  for (double v : ops::contiguous(t).to_vector<double>()) out.push_back(std::bit_cast<uint64_t>(v));
  return out;
}

// The layout-choice entries of the process's table (what a checkpoint records).
std::map<std::string, std::string> layout_choices() {
  std::map<std::string, std::string> out;
  for (const auto& [sig, c] : choice::used())
    if (sig.find("conv2d output layout") != std::string::npos) out[sig] = c.kernel;
  return out;
}

const ops::Conv2dOptions kValid{.pad_mode = ops::PadMode::valid};

TEST(LayoutChoice, AFlattenedConvolutionWritesRowMajorFromItsNextCall) {
  for (KernelChoice mode : {KernelChoice::first, KernelChoice::measure}) {
    SCOPED_TRACE(mode == KernelChoice::first ? "first" : "measure");
    Fresh fresh(mode);
    const Tensor x = testing::random({4, 1, 10, 10}, 1, DType::f32);
    const Tensor w = testing::random({6, 1, 3, 3}, 2, DType::f32);
    const Tensor y1 = ops::relu(ops::conv2d(x, w, {}, kValid));
    EXPECT_TRUE(ops::detail::is_channels_last(y1)) << "channels-last until a Flatten says otherwise";
    EXPECT_TRUE(layout_choices().empty());
    (void)ops::flatten(y1, 1);  // must transpose: the choice is made here
    const Tensor y2 = ops::relu(ops::conv2d(x, w, {}, kValid));
    EXPECT_TRUE(y2.is_contiguous()) << "the same convolution, called again, writes row-major";
    EXPECT_EQ(bits(y2), bits(y1));
    const auto recorded = layout_choices();
    ASSERT_EQ(recorded.size(), 1u);
    EXPECT_EQ(recorded.begin()->second, "contiguous");
    // Another convolution (other weights' shape) is not affected.
    const Tensor other = ops::conv2d(x, testing::random({5, 1, 3, 3}, 3, DType::f32), {}, kValid);
    EXPECT_TRUE(ops::detail::is_channels_last(other));
    EXPECT_FALSE(std::filesystem::exists(fresh.file()) &&
                 read_text(fresh.file()).find("output layout") != std::string::npos)
        << "a layout choice is never written to the cache file";
  }
}

TEST(LayoutChoice, TheMarkSurvivesACastToAnotherDtype) {
  // O1: a bf16 convolution, its output cast to f32 for the ops after it, then the Flatten.
  Fresh fresh(KernelChoice::first);
  const Tensor x = testing::random({2, 1, 9, 9}, 16, DType::f32).astype(DType::bf16);
  const Tensor w = testing::random({4, 1, 3, 3}, 17, DType::f32).astype(DType::bf16);
  const Tensor y = ops::conv2d(x, w, {}, kValid);
  (void)ops::flatten(ops::relu(ops::amp_cast(y, DType::f32)), 1);
  EXPECT_TRUE(ops::conv2d(x, w, {}, kValid).is_contiguous());
}

TEST(LayoutChoice, ViewsChannelsLastInputsAndFixedFormatsNeverSwitch) {
  Fresh fresh(KernelChoice::measure);
  const Tensor x = testing::random({2, 1, 12, 12}, 4, DType::f32);
  const Tensor w = testing::random({8, 1, 4, 4}, 5, DType::f32);
  // A ViT patch embedding: flatten(2) of a channels-last output is a view, no copy.
  const ops::Conv2dOptions patch{.stride = {4, 4}, .pad_mode = ops::PadMode::valid};
  (void)ops::transpose(ops::flatten(ops::conv2d(x, w, {}, patch), 2), 1, 2);
  EXPECT_TRUE(ops::detail::is_channels_last(ops::conv2d(x, w, {}, patch)));
  // Fixed formats stay as asked.
  ops::Conv2dOptions cl = kValid;
  cl.output_format = ops::MemoryFormat::channels_last;
  (void)ops::flatten(ops::conv2d(x, w, {}, cl), 1);
  EXPECT_TRUE(ops::detail::is_channels_last(ops::conv2d(x, w, {}, cl)));
  // A channels-last input with several channels: a row-major output would transpose the input.
  const Tensor xc = ops::detail::to_image(testing::random({2, 3, 9, 9}, 6, DType::f32),
                                          ops::detail::ImageLayout::nhwc);
  const Tensor wc = testing::random({4, 3, 3, 3}, 7, DType::f32);
  (void)ops::flatten(ops::conv2d(xc, wc, {}, kValid), 1);
  EXPECT_TRUE(ops::detail::is_channels_last(ops::conv2d(xc, wc, {}, kValid)));
  EXPECT_TRUE(layout_choices().empty());
}

// |a - b| <= tol for every element, with a message naming the first that is not.
::testing::AssertionResult all_near(const Tensor& a, const Tensor& b, double rel, double abs_floor) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::abs(x[i] - y[i]) <= rel * std::abs(x[i]) + abs_floor))
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
  return ::testing::AssertionSuccess();
}

TEST(LayoutChoice, BothLayoutsGiveTheSameValuesForwardAndBackward) {
  // The switched case, SimpleNet's conv1: one input channel, so both layouts read the same input.
  // In the fixed kernel order both run the same arithmetic: the output and the weight gradient
  // are bitwise equal, and the bias gradient (N*OH*OW values per channel summed in f32 in another
  // order) is within 1e-6 of the sum of magnitudes. Under the measured choice each layout runs the
  // kernel measured fastest for it, which may add in another order: held to the AMP contract
  // (two roundings of the output's dtype, the f32 sums to 1e-6 of their magnitudes).
  for (KernelChoice mode : {KernelChoice::first, KernelChoice::measure})
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (mode == KernelChoice::first ? " first" : " measure"));
      Fresh fresh(mode);
      const Tensor x = testing::random({16, 1, 28, 28}, 8, DType::f32).astype(dt);
      const Tensor g = testing::random({16, 32, 26, 26}, 9, DType::f32).astype(dt);
      std::vector<Tensor> got[2];
      for (int k = 0; k < 2; ++k) {
        Tensor w = testing::random({32, 1, 3, 3}, 10, DType::f32).astype(dt).set_requires_grad(true);
        Tensor b = testing::random({32}, 11, DType::f32).astype(dt).set_requires_grad(true);
        ops::Conv2dOptions o = kValid;
        o.output_format = k == 0 ? ops::MemoryFormat::channels_last : ops::MemoryFormat::contiguous;
        const Tensor y = ops::conv2d(x, w, b, o);
        EXPECT_EQ(ops::detail::is_channels_last(y), k == 0);
        const std::vector<Tensor> grads = mixprec::grad(ops::sum(ops::mul(y, g)), {w, b});
        got[k] = {y, grads[0], grads[1]};
      }
      // Sums of magnitudes: of the 10 terms of each output, and of each gradient's N*OH*OW terms.
      const double g_mag = ops::sum(ops::abs(g.astype(DType::f64))).to_vector<double>()[0] / 32;
      const double eps = dt == DType::f32 ? 0x1p-23 : dt == DType::bf16 ? 0x1p-7 : 0x1p-10;
      if (mode == KernelChoice::first) {
        EXPECT_EQ(bits(got[0][0]), bits(got[1][0])) << "forward";
        EXPECT_EQ(bits(got[0][1]), bits(got[1][1])) << "weight gradient";
      } else {
        EXPECT_TRUE(all_near(got[0][0], got[1][0], 2 * eps, 1e-6 * 10)) << "forward";
        EXPECT_TRUE(all_near(got[0][1], got[1][1], 2 * eps, 1e-6 * g_mag)) << "weight gradient";
      }
      EXPECT_TRUE(all_near(got[0][2], got[1][2], 2 * eps, 1e-6 * g_mag)) << "bias gradient";
    }
}

TEST(LayoutChoice, APinnedChoiceHoldsFromTheFirstCall) {
  Fresh fresh(KernelChoice::first);
  const Tensor x = testing::random({2, 1, 7, 7}, 12, DType::f32);
  const Tensor w = testing::random({3, 1, 2, 2}, 13, DType::f32);
  (void)ops::flatten(ops::conv2d(x, w, {}, kValid), 1);
  const auto recorded = layout_choices();
  ASSERT_EQ(recorded.size(), 1u);
  choice::reset_for_testing();  // a new process resuming from a checkpoint...
  EXPECT_TRUE(ops::detail::is_channels_last(ops::conv2d(x, w, {}, kValid)));
  choice::reset_for_testing();
  choice::pin(recorded);  // ...pins what the checkpoint recorded
  EXPECT_TRUE(ops::conv2d(x, w, {}, kValid).is_contiguous());
}

TEST(LayoutChoice, ElementwiseOpsTakeMixedLayoutsExactly) {
  // A channels-last activation beside a row-major gradient (what reaches relu's backward when a
  // Flatten follows): the operands are brought into one layout first; the values are exact.
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const Tensor a_rm = testing::random({4, 8, 16, 16}, 14, DType::f32).astype(dt);
    const Tensor b = testing::random({4, 8, 16, 16}, 15, DType::f32).astype(dt);
    const Tensor a = ops::detail::to_image(a_rm, ops::detail::ImageLayout::nhwc);
    ASSERT_TRUE(ops::detail::is_channels_last(a));
    EXPECT_EQ(bits(ops::mul(a, b)), bits(ops::mul(a_rm, b)));
    EXPECT_EQ(bits(ops::add(b, a)), bits(ops::add(b, a_rm)));
    // relu's backward with the activation channels-last and the gradient row-major.
    Tensor xa = a.detach().set_requires_grad(true);
    Tensor xr = a_rm.detach().set_requires_grad(true);
    const Tensor ga = mixprec::grad(ops::sum(ops::mul(ops::relu(xa), b)), {xa})[0];
    const Tensor gr = mixprec::grad(ops::sum(ops::mul(ops::relu(xr), b)), {xr})[0];
    EXPECT_EQ(bits(ga), bits(gr));
  }
}

}  // namespace
}  // namespace mixprec
