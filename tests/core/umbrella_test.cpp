// The public header surface: mixprec/mixprec.h alone gives a program what it trains with,
// the train guard and the training-state checkpoints included, and leaves the library's internals
// (the autograd graph's nodes and saved tensors, the weight cast cache) incomplete types. This
// file includes nothing else of mixprec, so it sees exactly what a user's program sees.
#include <gtest/gtest.h>

#include <type_traits>

#include "mixprec/mixprec.h"

namespace mixprec {
namespace {

template <class T, class = void> struct is_complete : std::false_type {};
template <class T> struct is_complete<T, std::void_t<decltype(sizeof(T))>> : std::true_type {};

TEST(UmbrellaHeader, ExportsTheGuardAndTrainingStateCheckpoints) {
  EXPECT_TRUE(is_complete<train::OverflowGuard>::value);
  EXPECT_TRUE(is_complete<train::GuardOptions>::value);
  EXPECT_TRUE(is_complete<train::ResumeInfo>::value);
  EXPECT_NE(&train::save_training_state, nullptr);
  EXPECT_NE(&train::load_training_state, nullptr);
  EXPECT_TRUE(is_complete<NoGradGuard>::value);    // grad mode is public (mixprec/grad_mode.h)
  EXPECT_EQ(parse_amp_level("o2"), AmpLevel::O2);  // the AMP vocabulary (mixprec/amp/level.h)
}

TEST(UmbrellaHeader, LeavesTheGraphAndCastCacheInternalsOut) {
  EXPECT_FALSE(is_complete<Node>::value);
  EXPECT_FALSE(is_complete<AutogradMeta>::value);
  EXPECT_FALSE(is_complete<CastCache>::value);
}

}  // namespace
}  // namespace mixprec
