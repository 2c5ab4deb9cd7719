// Tensor views, strides, copies and element access, checked against hand-computed values.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>

#include "mixprec/cuda_readback.h"
#include "core/strided_copy.h"
#include "mixprec/mixprec.h"
#include "test_util.h"

namespace mixprec {
namespace {

Tensor iota(const Shape& s, DType d = DType::f32) {
  return arange(static_cast<double>(shape_numel(s)), {.dtype = d}).reshape(s);
}

TEST(DType, TraitsPromotionAndAccumulation) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_name(DType::f16), "f16");
  EXPECT_TRUE(is_floating(DType::bf16));
  EXPECT_FALSE(is_floating(DType::i64));
  EXPECT_EQ(acc_dtype(DType::f16), DType::f32);
  EXPECT_EQ(acc_dtype(DType::bf16), DType::f32);
  EXPECT_EQ(acc_dtype(DType::f64), DType::f64);
  EXPECT_EQ(promote(DType::f16, DType::bf16), DType::f32);
  EXPECT_EQ(promote(DType::bf16, DType::f32), DType::f32);
  EXPECT_EQ(promote(DType::f16, DType::f16), DType::f16);
  EXPECT_EQ(promote(DType::i64, DType::bf16), DType::bf16);
  EXPECT_EQ(promote(DType::u8, DType::i32), DType::i32);
  for (int a = 0; a < kNumDTypes; ++a)
    for (int b = 0; b < kNumDTypes; ++b)
      EXPECT_EQ(promote(DType(a), DType(b)), promote(DType(b), DType(a))) << a << "," << b;
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_FALSE(parse_dtype("f8").has_value());
}

TEST(Tensor, FromVectorAndBack) {
  const Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.strides(), (Strides{3, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.at({1, 2}), 6.0);
  EXPECT_EQ(t.at({-1, -3}), 4.0);
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_THROW(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), Error);
  EXPECT_THROW(t.at({2, 0}), Error);
  EXPECT_THROW(t.at({0}), Error);
}

TEST(Tensor, TransposeIsAViewWithSwappedStrides) {
  const Tensor t = iota({2, 3});
  const Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_EQ(tt.strides(), (Strides{1, 3}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.storage(), t.storage());
  EXPECT_EQ(tt.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  const Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), t.storage());
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Tensor, PermuteThreeDims) {
  const Tensor t = iota({2, 3, 4});
  const Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Strides{1, 12, 4}));
  EXPECT_EQ(p.at({3, 1, 2}), t.at({1, 2, 3}));
  EXPECT_EQ(p.contiguous().at({3, 1, 2}), 23.0);
  EXPECT_THROW(t.permute({0, 0, 1}), Error);
  EXPECT_THROW(t.permute({0, 1}), Error);
}

TEST(Tensor, SliceWithStepAndNegativeBounds) {
  const Tensor t = iota({10});
  const Tensor s = t.slice(0, 1, 8, 3);  // 1, 4, 7
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(s.strides(), (Strides{3}));
  EXPECT_EQ(s.offset(), 1);
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 4, 7}));
  EXPECT_EQ(t.slice(0, -3, 100).to_vector<float>(), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(t.slice(0, 5, 2).numel(), 0);
  const Tensor m = iota({4, 5}).slice(1, 1, 4).slice(0, 2, 4);
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{11, 12, 13, 16, 17, 18}));
}

TEST(Tensor, ReshapeViewsWhenPossibleAndCopiesOtherwise) {
  const Tensor t = iota({2, 3, 4});
  const Tensor v = t.reshape({6, -1});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_EQ(v.storage(), t.storage());
  const Tensor tt = t.transpose(1, 2);  // [2, 4, 3], not contiguous
  EXPECT_THROW(tt.view({8, 3}), Error);
  const Tensor r = tt.reshape({8, 3});
  EXPECT_NE(r.storage(), t.storage());
  EXPECT_EQ(r.at({1, 0}), 1.0);  // row 1 = t[0, :, 1] = 1, 5, 9
  EXPECT_EQ(r.at({1, 2}), 9.0);
  // Splitting a contiguous dim of a non-contiguous tensor is still a view.
  const Tensor w = t.transpose(0, 1).view({3, 2, 2, 2});
  EXPECT_EQ(w.storage(), t.storage());
  EXPECT_EQ(w.strides(), (Strides{4, 12, 2, 1}));
  EXPECT_EQ(w.at({2, 1, 1, 0}), 22.0);
  const Tensor sl = t.slice(2, 0, 2);  // [2, 3, 2] with strides [12, 4, 1]
  const Tensor merged = sl.view({6, 2});
  EXPECT_EQ(merged.strides(), (Strides{4, 1}));
  EXPECT_EQ(merged.at({5, 1}), 21.0);
  EXPECT_THROW(t.reshape({5, -1}), Error);
  EXPECT_THROW(t.reshape({-1, -1}), Error);
}

TEST(Tensor, AstypeRoundsAndCopiesOnlyWhenNeeded) {
  const Tensor t = Tensor::from_vector<float>({1.0f, 65520.0f, 1.0f / 3.0f, -0.0f}, {4});
  // To its own dtype: no copy, but an alias (same storage and layout) carrying the user's explicit
  // choice of dtype for AMP (ops/autocast.h), so that t itself stays unmarked.
  const Tensor same = t.astype(DType::f32);
  EXPECT_EQ(same.data_ptr(), t.data_ptr());
  EXPECT_EQ(same.storage(), t.storage());
  EXPECT_EQ(same.strides(), t.strides());
  EXPECT_TRUE(has_explicit_dtype(same));
  EXPECT_FALSE(has_explicit_dtype(t));
  const Tensor h = t.astype(DType::f16);
  EXPECT_EQ(h.dtype(), DType::f16);
  const f16* hp = h.data<f16>();
  EXPECT_EQ(hp[0].bits, 0x3c00);
  EXPECT_EQ(hp[1].bits, 0x7c00);
  EXPECT_EQ(hp[2].bits, 0x3555);
  EXPECT_EQ(hp[3].bits, 0x8000);
  const Tensor b = t.transpose(0, 0).astype(DType::bf16);
  EXPECT_EQ(b.data<bf16>()[2].bits, 0x3eab);
  EXPECT_THROW(h.data<float>(), Error);
}

TEST(Tensor, AstypeKeepsADenseLayout) {
  // A cast keeps a permuted dense layout (channels-last stays channels-last); clone() packs.
  const Tensor t = iota({33, 17}).transpose(0, 1);
  const Tensor b = t.astype(DType::bf16);
  EXPECT_EQ(b.strides(), t.strides());
  EXPECT_TRUE(t.clone().is_contiguous());
  const Tensor s = iota({4, 6}).slice(1, 0, 6, 2);  // not dense: packed
  EXPECT_TRUE(s.astype(DType::f64).is_contiguous());
  EXPECT_EQ(b.at({16, 32}), t.at({16, 32}));
  EXPECT_EQ(b.at({3, 5}), 88.0);
}

TEST(StridedCopy, CoalescesInMemoryOrderSoChannelsLastIsOneRun) {
  // A channels-last [N, C, H, W] copied into channels-last memory is one contiguous run (it was a
  // run of stride C per image in index order: 28% of an O1 convnet-bn step went to such casts).
  const detail::CopyLayout cl = detail::coalesce({256, 64, 14, 14}, {12544, 1, 896, 64},
                                                 {12544, 1, 896, 64});
  EXPECT_EQ(cl.sizes, (Shape{256 * 64 * 14 * 14}));
  EXPECT_EQ(cl.src, (Strides{1}));
  EXPECT_EQ(cl.dst, (Strides{1}));
  // A transposing copy keeps the destination's writes contiguous.
  const detail::CopyLayout tr = detail::coalesce({8, 4, 3, 3}, {36, 1, 12, 4}, {36, 9, 3, 1});
  EXPECT_EQ(tr.sizes, (Shape{8, 4, 9}));
  EXPECT_EQ(tr.src, (Strides{36, 1, 4}));
  EXPECT_EQ(tr.dst, (Strides{36, 9, 1}));
  // Values: a channels-last bf16 -> f32 cast and back, and a channels-last -> NCHW copy.
  const Tensor x = iota({2, 3, 4, 5}).permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  ASSERT_EQ(x.strides(), (Strides{60, 1, 15, 3}));
  const Tensor h = x.astype(DType::bf16), back = h.astype(DType::f32), packed = x.clone();
  EXPECT_EQ(h.strides(), x.strides());
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          const double v = static_cast<double>(((n * 3 + c) * 4 + i) * 5 + j);
          EXPECT_EQ(back.at({n, c, i, j}), v);
          EXPECT_EQ(packed.at({n, c, i, j}), v);
        }
}

TEST(Shape, IsDenseAcceptsPermutedLayoutsAndRejectsGaps) {
  EXPECT_TRUE(is_dense({2, 3, 4}, {12, 4, 1}));          // row-major
  EXPECT_TRUE(is_dense({2, 3, 4, 5}, {60, 1, 15, 3}));   // NCHW shape, channels-last strides
  EXPECT_TRUE(is_dense({3, 2}, {1, 3}));                 // a transpose
  EXPECT_TRUE(is_dense({1, 4, 1}, {99, 1, 7}));          // size-1 dims' strides do not matter
  EXPECT_FALSE(is_dense({2, 3}, {6, 1}));                // a row gap (a slice of a wider tensor)
  EXPECT_FALSE(is_dense({2, 3}, {3, 2}));                // stride 2 in the inner dim
  EXPECT_FALSE(is_dense({4}, {0}));                      // broadcast: one element read 4 times
  EXPECT_TRUE(is_dense({}, {}));
}

TEST(Tensor, CopyAndFillBumpTheStorageVersion) {
  Tensor t = zeros({3, 2});
  const uint64_t v0 = t.storage()->version();
  t.fill_(2.5);
  EXPECT_EQ(t.storage()->version(), v0 + 1);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(6, 2.5f));
  Tensor col = t.slice(1, 1, 2);
  col.copy_(Tensor::from_vector<double>({7, 8, 9}, {3, 1}));
  EXPECT_EQ(t.storage()->version(), v0 + 2);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{2.5f, 7, 2.5f, 8, 2.5f, 9}));
  EXPECT_THROW(col.copy_(zeros({3})), Error);
}

TEST(Tensor, FactoriesAndPrinting) {
  EXPECT_EQ(ones({2}, {.dtype = DType::bf16}).to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_EQ(full({2}, -3.0, {.dtype = DType::i32}).to_vector<int32_t>(), (std::vector<int32_t>{-3, -3}));
  EXPECT_EQ(arange(1.0, 2.0, 0.25).to_vector<float>(), (std::vector<float>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(zeros({}).numel(), 1);
  EXPECT_EQ(zeros({}).item(), 0.0);
  std::ostringstream os;
  os << iota({2, 3});
  EXPECT_EQ(os.str(), "Tensor(shape=[2, 3], dtype=f32, device=cpu)\n[[0, 1, 2],\n [3, 4, 5]]");
  const std::string big = iota({100}).str();
  EXPECT_NE(big.find("[0, 1, 2, ..., 97, 98, 99]"), std::string::npos) << big;
  EXPECT_NE(Tensor::from_vector<float>({INFINITY, NAN}, {2}).str().find("[inf, nan]"), std::string::npos);
  EXPECT_EQ(Tensor().str(), "Tensor(undefined)");
  EXPECT_THROW(Tensor().shape(), Error);
}

TEST(Tensor, EmptyShapesAndHugeShapes) {
  const Tensor e = zeros({0, 4});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.contiguous().numel(), 0);
  EXPECT_THROW(Tensor::empty({1 << 30, 1 << 30}), Error);
  EXPECT_THROW(Tensor::empty({-1, 2}), Error);
  EXPECT_THROW(Tensor::empty({int64_t{1} << 62, 8}), Error);
}

TEST(Tensor, FromStorageRejectsOutOfBoundsViews) {
  auto st = Storage::allocate(4 * 6, Device::cpu());
  EXPECT_NO_THROW(Tensor::from_storage(st, {2, 3}, {3, 1}, 0, DType::f32));
  EXPECT_THROW(Tensor::from_storage(st, {2, 3}, {3, 1}, 1, DType::f32), Error);
  EXPECT_THROW(Tensor::from_storage(st, {2, 4}, {4, 1}, 0, DType::f32), Error);
  EXPECT_THROW(Tensor::from_storage(st, {2}, {-1}, 0, DType::f32), Error);
}

TEST(Allocator, CountsLiveAndPeakBytes) {
  const MemoryStats before = memory_stats();
  reset_peak_memory();
  EXPECT_EQ(memory_stats().peak_bytes, before.live_bytes);
  {
    const Tensor a = Tensor::empty({1000}, {.dtype = DType::f32});
    EXPECT_EQ(memory_stats().live_bytes, before.live_bytes + 4000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data_ptr()) % kAllocAlignment, 0u);
    {
      const Tensor b = Tensor::empty({500}, {.dtype = DType::bf16});
      EXPECT_EQ(memory_stats().live_bytes, before.live_bytes + 5000);
    }
    EXPECT_EQ(memory_stats().live_bytes, before.live_bytes + 4000);
  }
  EXPECT_EQ(memory_stats().live_bytes, before.live_bytes);
  EXPECT_EQ(memory_stats().peak_bytes, before.live_bytes + 5000);
  EXPECT_GE(memory_stats().allocations, before.allocations + 2);
  reset_peak_memory();
  EXPECT_EQ(memory_stats().peak_bytes, before.live_bytes);
  if (cuda::device_count() == 0) {
    EXPECT_THROW(allocator_for(Device::cuda(0)), Error);
  }
}

// Without the backend in the build, or without a GPU, every way onto a CUDA device throws one
// clear error that says which is missing and what to do (never a crash).
TEST(CudaDevice, WithoutAGpuEveryEntryPointSaysWhatIsMissing) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is visible: tests/cuda covers this build";
  const std::string missing = cuda::is_built() ? "no CUDA device is visible" : "no CUDA backend";
  const std::string fix = cuda::is_built() ? "nvidia-smi" : "-DMIXPREC_CUDA=ON";
  for (const auto& attempt : std::vector<std::function<void()>>{
           [] { set_context({.device = Device::cuda()}); },
           [] { (void)zeros({2, 3}, {.device = Device::cuda()}); },
           [] { (void)ones({2}).to(Device::cuda()); },
           [] { cuda::synchronize(); },
           [] { cuda::Readback rb; }}) {
    try {
      attempt();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("cuda:0 is not available: "), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(missing), std::string::npos) << e.message();
      EXPECT_NE(e.hint().find(fix), std::string::npos) << e.hint();
      EXPECT_NE(e.hint().find("Device::cpu()"), std::string::npos) << e.hint();
    }
  }
  EXPECT_TRUE(get_context().device.is_cpu());  // the failed set_context changed nothing
}

TEST(Error, CheckCarriesHintAndAssertSaysBug) {
  try {
    MIXPREC_CHECK(1 + 1 == 3, "op: expected ", 3, ", got ", 2, Hint{"do the other thing"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "op: expected 3, got 2");
    EXPECT_EQ(e.hint(), "do the other thing");
    EXPECT_EQ(std::string(e.what()), "op: expected 3, got 2\n  hint: do the other thing");
    EXPECT_FALSE(e.internal());
    EXPECT_GT(e.where().line(), 0u);
  }
  try {
    MIXPREC_ASSERT(false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(e.internal());
    EXPECT_NE(std::string(e.what()).find("this is a bug in mixprec"), std::string::npos);
  }
}

}  // namespace
}  // namespace mixprec
