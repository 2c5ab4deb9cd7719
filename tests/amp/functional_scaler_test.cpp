// The functional scalers against MindSpore 2.10 (tests/mindspore, ids scaler-grows-past-f32 and
// static-adjust-returns): DynamicLossScaler grows only while the scale stays finite in f32, and
// adjust returns whether the scaler adapts (true dynamic, false static), as MindSpore's does.
#include <gtest/gtest.h>

#include <cmath>

#include "mixprec/mixprec.h"

namespace mixprec {
namespace {

TEST(FunctionalScaler, DynamicStopsGrowingAtTheLargestF32Scale) {
  const double two_127 = std::ldexp(1.0, 127);  // 2^128 is inf in f32
  amp::DynamicLossScaler s(two_127, 2.0, 1);
  EXPECT_TRUE(s.adjust(true));
  EXPECT_EQ(s.scale_value(), two_127);
  EXPECT_TRUE(s.adjust(true));
  EXPECT_EQ(s.scale_value(), two_127);
  EXPECT_TRUE(std::isfinite(static_cast<float>(s.scale_value())));
  EXPECT_TRUE(s.adjust(false));  // still backs off
  EXPECT_EQ(s.scale_value(), std::ldexp(1.0, 126));
  amp::DynamicLossScaler below(std::ldexp(1.0, 126), 2.0, 1);  // the last growth that fits
  below.adjust(true);
  EXPECT_EQ(below.scale_value(), two_127);
}

TEST(FunctionalScaler, AdjustReturnsWhetherTheScaleAdapts) {
  amp::StaticLossScaler st(1024.0);
  EXPECT_FALSE(st.adjust(true));
  EXPECT_FALSE(st.adjust(false));
  EXPECT_EQ(st.scale_value(), 1024.0);
  amp::DynamicLossScaler dy(1024.0, 2.0, 2);
  EXPECT_TRUE(dy.adjust(true));
  EXPECT_TRUE(dy.adjust(false));
  EXPECT_EQ(dy.scale_value(), 512.0);
}

}  // namespace
}  // namespace mixprec
