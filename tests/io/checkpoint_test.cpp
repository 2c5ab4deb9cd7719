// Checkpoints: round trips in every dtype, fp32 files from O2 networks, O0 -> O2 -> file
// identity, load_param_into_net's lists, warnings, prefix handling and refusals, and hostile
// files (each case gives an Error naming the file and the field). Crash safety: file_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "mixprec/mixprec.h"
#include "op_test_util.h"
#include "test_util.h"

namespace mixprec {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("mixprec_io_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

TEST(Safetensors, RoundTripEveryDtype) {
  const fs::path p = temp_dir() / "all.safetensors";
  std::vector<std::pair<std::string, Tensor>> ts;
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16})
    ts.emplace_back(std::string("t_") + std::string(dtype_name(d)), testing::random({3, 5}, 1, d));
  ts.emplace_back("ints", Tensor::from_vector<int64_t>({1, -2, 3}, {3}));
  ts.emplace_back("i32", Tensor::from_vector<int32_t>({7}, {1}));
  ts.emplace_back("bytes", Tensor::from_vector<uint8_t>({0, 255}, {2}));
  ts.emplace_back("scalar", full({}, 2.5));
  ts.emplace_back("empty", zeros({0, 4}));
  io::write_safetensors(p, ts, {{"step", "42"}});
  const io::SafetensorsFile f = io::read_safetensors(p);
  ASSERT_EQ(f.tensors.size(), ts.size());
  EXPECT_EQ(f.metadata.at("step"), "42");
  for (size_t i = 0; i < ts.size(); ++i) {
    EXPECT_EQ(f.tensors[i].first, ts[i].first);
    EXPECT_EQ(f.tensors[i].second.dtype(), ts[i].second.dtype());
    EXPECT_EQ(f.tensors[i].second.shape(), ts[i].second.shape());
    EXPECT_EQ(std::memcmp(f.tensors[i].second.data_ptr(), ts[i].second.data_ptr(), ts[i].second.nbytes()), 0)
        << ts[i].first;
  }
  std::ifstream in(p, std::ios::binary);
  uint64_t hlen = 0;
  in.read(reinterpret_cast<char*>(&hlen), 8);
  EXPECT_EQ((8 + hlen) % 8, 0u) << "data aligned to 8 bytes";
}

TEST(Checkpoint, O2NetworkSavesFp32AndO0O2RoundTripIsIdentical) {
  const fs::path dir = temp_dir();
  manual_seed(0);
  auto net0 = nn::make_model("convnet-bn");
  io::save_checkpoint(*net0, dir / "o0.safetensors");
  manual_seed(1);  // different init
  auto net2 = nn::make_model("convnet-bn");
  amp::auto_mixed_precision(*net2, "O2", DType::bf16);
  const auto params = io::load_checkpoint(dir / "o0.safetensors");
  for (const auto& [n, t] : params) EXPECT_EQ(t.dtype(), DType::f32) << n;
  const io::LoadReport rep = io::load_param_into_net(*net2, params, {.strict = true});
  EXPECT_TRUE(rep.param_not_load.empty() && rep.ckpt_not_load.empty());
  EXPECT_EQ(rep.loaded, static_cast<int64_t>(params.size()));
  io::save_checkpoint(*net2, dir / "o2.safetensors");
  const auto again = io::load_checkpoint(dir / "o2.safetensors");
  ASSERT_EQ(again.size(), params.size());
  for (const auto& [n, t] : params) {
    EXPECT_EQ(again.at(n).dtype(), DType::f32);
    EXPECT_EQ(again.at(n).to_vector<float>(), t.to_vector<float>()) << n;
  }
}

// Runs fn with stderr captured; returns what it printed.
template <class Fn>
std::string stderr_of(Fn&& fn) {
  ::testing::internal::CaptureStderr();
  fn();
  return ::testing::internal::GetCapturedStderr();
}

TEST(LoadParamIntoNet, ReturnsBothListsLikeMindSporeAndWarnsByDefault) {
  nn::Dense d(3, 2);
  const std::map<std::string, Tensor> param_dict{{"weight", ones({2, 3})}, {"extra", zeros({1})}};
  std::vector<std::string> not_in_file, not_in_net;
  const std::string err = stderr_of([&] {
    auto [param_not_load, ckpt_not_load] = io::load_param_into_net(d, param_dict);  // the seed's line
    not_in_file = param_not_load;
    not_in_net = ckpt_not_load;
  });
  EXPECT_EQ(not_in_file, std::vector<std::string>{"bias"});
  EXPECT_EQ(not_in_net, std::vector<std::string>{"extra"});
  EXPECT_EQ(d.weight.to_vector<float>(), std::vector<float>(6, 1.0f)) << "what matched was loaded";
  EXPECT_NE(err.find("loaded 1 of 2"), std::string::npos) << err;
  EXPECT_NE(err.find("(param_not_load): bias"), std::string::npos) << err;
  EXPECT_NE(err.find("(ckpt_not_load): extra"), std::string::npos) << err;
  EXPECT_EQ(stderr_of([&] { (void)io::load_param_into_net(d, param_dict, {.warn = false}); }), "");
  const std::string strict = testing::error_text([&] { io::load_param_into_net(d, param_dict, {.strict = true}); });
  EXPECT_NE(strict.find("missing from the parameters given: bias"), std::string::npos) << strict;
}

TEST(LoadParamIntoNet, WrongShapeIsAnErrorAndLoadsNothing) {
  nn::Dense d(3, 2);
  const auto w0 = d.weight.to_vector<float>(), b0 = d.bias.to_vector<float>();
  const std::map<std::string, Tensor> wrong{{"weight", ones({3, 3})}, {"bias", ones({2})}};
  const std::string err = testing::error_text([&] { io::load_param_into_net(d, wrong); });
  EXPECT_NE(err.find("shape mismatch"), std::string::npos) << err;
  EXPECT_NE(err.find("weight: given [3, 3], network [2, 3]"), std::string::npos) << err;
  EXPECT_EQ(d.weight.to_vector<float>(), w0);
  EXPECT_EQ(d.bias.to_vector<float>(), b0) << "bias matched, but nothing loads when anything is refused";
}

TEST(LoadParamIntoNet, IntegerTensorIntoFloatParameterIsRefusedNamingBothDtypes) {
  nn::Dense d(3, 2);
  const auto w0 = d.weight.to_vector<float>();
  const std::map<std::string, Tensor> ints{{"weight", Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3})},
                                           {"bias", zeros({2})}};
  for (bool strict : {false, true}) {
    const std::string err = testing::error_text([&] { io::load_param_into_net(d, ints, {.strict = strict}); });
    EXPECT_NE(err.find("weight: given i32, network expects f32"), std::string::npos) << err;
    EXPECT_EQ(d.weight.to_vector<float>(), w0);
  }
}

TEST(LoadParamIntoNet, StrictRefusesDowncastsUnlessAllowed) {
  nn::Dense d(3, 2);
  // An f64 file into fp32 parameters is a downcast.
  std::map<std::string, Tensor> wide{{"weight", ones({2, 3}, {.dtype = DType::f64})}, {"bias", zeros({2}, {.dtype = DType::f64})}};
  EXPECT_THROW(io::load_param_into_net(d, wide, {.strict = true}), Error);
  EXPECT_NO_THROW(io::load_param_into_net(d, wide, {.strict = true, .allow_downcast = true}));
  EXPECT_EQ(d.weight.to_vector<float>(), std::vector<float>(6, 1.0f));
}

// MindSpore's non-strict load removes a prefix the checkpoint's names carry (its
// _load_dismatch_prefix_params) and warns; strict refuses, with a hint naming the prefix.
TEST(LoadParamIntoNet, CheckpointNamePrefixIsRemovedWithAWarningAndStrictNamesIt) {
  manual_seed(0);
  auto src = nn::make_model("lenet");
  std::map<std::string, Tensor> prefixed;
  for (auto& [n, t] : src->state_and_names()) prefixed.emplace("network." + n, t.detach().clone());
  manual_seed(1);
  auto net = nn::make_model("lenet");
  const std::string strict = testing::error_text([&] { io::load_param_into_net(*net, prefixed, {.strict = true}); });
  EXPECT_NE(strict.find("prefix 'network.'"), std::string::npos) << strict;
  io::LoadReport rep;
  const std::string err = stderr_of([&] { rep = io::load_param_into_net(*net, prefixed); });
  EXPECT_EQ(rep.loaded, static_cast<int64_t>(prefixed.size()));
  EXPECT_TRUE(rep.param_not_load.empty() && rep.ckpt_not_load.empty());
  EXPECT_EQ(rep.prefixes_removed, std::vector<std::string>{"network."});
  EXPECT_NE(err.find("removed the prefix 'network.'"), std::string::npos) << err;
  for (auto& [n, t] : net->state_and_names()) EXPECT_EQ(t.to_vector<float>(), prefixed.at("network." + n).to_vector<float>()) << n;
}

struct Wrapper : nn::Cell {
  nn::Dense backbone{3, 2};
  Wrapper() { register_cell("backbone", backbone); }
  Tensor construct(const Tensor& x) override { return backbone(x); }
};

TEST(LoadParamIntoNet, NothingLoadedIntoAWrapperHintsAtItsSubCell) {
  Wrapper w;
  const std::map<std::string, Tensor> plain{{"weight", ones({2, 3})}, {"bias", ones({2})}};
  io::LoadReport rep;
  const std::string err = stderr_of([&] { rep = io::load_param_into_net(w, plain); });
  EXPECT_EQ(rep.loaded, 0);
  EXPECT_EQ(rep.param_not_load, (std::vector<std::string>{"backbone.weight", "backbone.bias"}));
  EXPECT_NE(err.find("loaded 0 of 2"), std::string::npos) << err;
  EXPECT_NE(err.find("start with 'backbone.'"), std::string::npos) << err;
}

TEST(LoadParamIntoNet, Fp32CheckpointLoadsStrictlyIntoO3Network) {
  manual_seed(0);
  auto src = nn::make_model("lenet");
  std::map<std::string, Tensor> params;
  for (auto& [n, t] : src->state_and_names()) params.emplace(n, t.detach().clone());
  auto net = nn::make_model("lenet");
  amp::auto_mixed_precision(*net, "O3", DType::f16);
  EXPECT_EQ(io::load_param_into_net(*net, params, {.strict = true}).loaded, static_cast<int64_t>(params.size()));
  for (auto& [n, t] : net->state_and_names())
    EXPECT_EQ(t.astype(DType::f32).to_vector<float>(), params.at(n).astype(t.dtype()).astype(DType::f32).to_vector<float>()) << n;
}

// ---------------------------------------------------------------- hostile files

std::vector<uint8_t> file_with_header(const std::string& header, size_t data_bytes, uint64_t declared = 0) {
  const uint64_t n = declared ? declared : header.size();
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  for (size_t i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

// The parser refuses `bytes` with `needle` in the message, and so does the header-only metadata
// reader (read_safetensors_metadata) on the same bytes in a file: the same checks, the same words.
void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  try {
    io::parse_safetensors(bytes.data(), bytes.size(), "evil.safetensors");
    FAIL() << "accepted a hostile file; expected an error mentioning " << needle;
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("evil.safetensors"), std::string::npos) << w;
    EXPECT_NE(w.find(needle), std::string::npos) << w;
  }
  const fs::path p = temp_dir() / "evil.safetensors";
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  const std::string w = testing::error_text([&] { io::read_safetensors_metadata(p); });
  EXPECT_NE(w.find(p.string() + ": "), std::string::npos) << w;
  EXPECT_NE(w.find(needle), std::string::npos) << "read_safetensors_metadata: " << w;
}

TEST(Safetensors, HostileHeaders) {
  expect_error({1, 2, 3}, "header length");
  expect_error(file_with_header("{}", 0, 1000), "header length");
  expect_error(file_with_header("{\"w\": {", 0, 1000), "truncated");
  expect_error(file_with_header("[1, 2]", 0), "JSON object");
  expect_error(file_with_header("{not json", 0), "not valid JSON");
  expect_error(file_with_header(R"({"w": {"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}})", 1), "unknown dtype");
  expect_error(file_with_header(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}})", 8), "outside");
  expect_error(file_with_header(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8), "needs 12");
  expect_error(file_with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12), "overlaps");
  expect_error(file_with_header(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})", 8),
               "impossibly large");
  expect_error(file_with_header(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4), "non-negative");
  expect_error(file_with_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4), "begins after it ends");
  // Found by the fuzz work: a 0 dim made the element count 0 while the other dims overflowed strides.
  expect_error(file_with_header(R"({"w": {"dtype": "F32", "shape": [0, 1099511627776, 1099511627776, 1099511627776], "data_offsets": [0, 0]}})", 0),
               "impossibly large");
  expect_error(file_with_header(R"({"w": {"dtype": "F32", "shape": [1]}})", 4), "data_offsets");
  expect_error(file_with_header(R"({"w": 5})", 0), "expected an object");
  expect_error(file_with_header(R"({"__metadata__": {"k": 1}})", 0), "__metadata__");
}

// JSON parsers keep the last of two equal keys; the reader refuses them, at any level.
TEST(Safetensors, DuplicateKeysAreRefused) {
  expect_error(file_with_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                    "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8),
               "header: key 'w' appears twice");
  expect_error(file_with_header(R"({"w": {"dtype": "F32", "dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})", 4),
               "tensor 'w': key 'dtype' appears twice");
  expect_error(file_with_header(R"({"__metadata__": {"global_step": "5", "global_step": "-5"}})", 0),
               "__metadata__: key 'global_step' appears twice");
}

// A foreign file is "not a safetensors file", with what was found, not a header-length number.
TEST(Safetensors, ForeignFilesAreNotSafetensorsNamingWhatWasFound) {
  const std::vector<std::pair<std::vector<uint8_t>, std::string>> cases = {
      {{'h', 'e', 'l', 'l', 'o', ',', ' ', 'w', 'o', 'r', 'l', 'd', '\n'}, "found text \"hello, world \""},
      {{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'}, "found a PNG image"},
      {{0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 28, 0, 0, 0, 28}, "found an IDX file"},
      {{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3}, "found gzip data"},
      {{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8}, "found bytes de ad be ef 01 02 03 04"},
      {{'a', 'b', 'c'}, "3 bytes, shorter than the 8-byte header length: found text \"abc\""}};
  for (const auto& [bytes, found] : cases) {
    expect_error(bytes, "not a safetensors file");
    expect_error(bytes, found);
  }
  // Through the file API too, naming the file.
  const fs::path p = temp_dir() / "notes.txt";
  std::ofstream(p) << "epoch 1: loss 0.5\n";
  const std::string err = testing::error_text([&] { io::load_checkpoint(p); });
  EXPECT_NE(err.find(p.string() + ": not a safetensors file: found text \"epoch 1: loss 0.5 \""), std::string::npos) << err;
}

// The metadata comes from the header alone: a file declaring a 1 GiB tensor (sparse on disk) gives
// its metadata without a tensor being allocated, and an ordinary file gives what a full read gives.
TEST(Safetensors, MetadataIsReadFromTheHeaderAlone) {
  const fs::path small = temp_dir() / "meta.safetensors";
  io::write_safetensors(small, {{"w", ones({3, 4})}, {"b", zeros({4})}}, {{"global_step", "7"}, {"format", "x"}});
  EXPECT_EQ(io::read_safetensors_metadata(small), io::read_safetensors(small).metadata);
  const std::string header = R"({"__metadata__": {"k": "v"}, "big": {"dtype": "F32", "shape": [268435456], "data_offsets": [0, 1073741824]}})";
  const std::vector<uint8_t> head = file_with_header(header, 0);
  const fs::path big = temp_dir() / "big.safetensors";
  std::ofstream(big, std::ios::binary).write(reinterpret_cast<const char*>(head.data()), static_cast<std::streamsize>(head.size()));
  fs::resize_file(big, head.size() + (uint64_t{1} << 30));
  reset_peak_memory();
  const int64_t live = memory_stats().live_bytes;
  EXPECT_EQ(io::read_safetensors_metadata(big), (io::Metadata{{"k", "v"}}));
  EXPECT_LT(memory_stats().peak_bytes - live, int64_t{1} << 20) << "a tensor was allocated";
  // The size the header is checked against is the file's: one byte short is refused.
  fs::resize_file(big, head.size() + (uint64_t{1} << 30) - 1);
  const std::string err = testing::error_text([&] { io::read_safetensors_metadata(big); });
  EXPECT_NE(err.find("is outside the 1073741823 data bytes"), std::string::npos) << err;
  fs::remove(big);
}

TEST(Safetensors, NanInWeightsIsAWarningNotAnError) {
  const fs::path p = temp_dir() / "nan.safetensors";
  io::write_safetensors(p, {{"w", Tensor::from_vector<float>({1.0f, NAN, INFINITY}, {3})}});
  const auto f = io::read_safetensors(p);
  ASSERT_EQ(f.warnings.size(), 1u);
  EXPECT_NE(f.warnings[0].find("2 NaN/inf"), std::string::npos);
}

}  // namespace
}  // namespace mixprec
