// Checkpoints: round trips in every dtype, fp32 files from O2 networks, O0 -> O2 -> file
// identity, load reports and strictness, crash safety (a child killed mid-save leaves the old
// file intact), and hostile files (each case gives an Error naming the file and the field).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "mixprec/mixprec.h"
#include "op_test_util.h"

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
  EXPECT_TRUE(rep.missing.empty() && rep.unexpected.empty() && rep.mismatched.empty());
  EXPECT_EQ(rep.loaded, static_cast<int64_t>(params.size()));
  io::save_checkpoint(*net2, dir / "o2.safetensors");
  const auto again = io::load_checkpoint(dir / "o2.safetensors");
  ASSERT_EQ(again.size(), params.size());
  for (const auto& [n, t] : params) {
    EXPECT_EQ(again.at(n).dtype(), DType::f32);
    EXPECT_EQ(again.at(n).to_vector<float>(), t.to_vector<float>()) << n;
  }
}

TEST(Checkpoint, LoadReportsMismatchesAndStrictRefusesDowncasts) {
  nn::Dense d(3, 2);
  std::map<std::string, Tensor> params{{"weight", zeros({2, 3})}, {"extra", zeros({1})}};
  const auto rep = io::load_param_into_net(d, params);
  EXPECT_EQ(rep.missing, std::vector<std::string>{"bias"});
  EXPECT_EQ(rep.unexpected, std::vector<std::string>{"extra"});
  EXPECT_THROW(io::load_param_into_net(d, params, {.strict = true}), Error);
  std::map<std::string, Tensor> wrong{{"weight", zeros({3, 3})}, {"bias", zeros({2})}};
  EXPECT_EQ(io::load_param_into_net(d, wrong).mismatched.size(), 1u);
  // An f64 file into fp32 parameters is a downcast.
  std::map<std::string, Tensor> wide{{"weight", ones({2, 3}, {.dtype = DType::f64})}, {"bias", zeros({2}, {.dtype = DType::f64})}};
  EXPECT_THROW(io::load_param_into_net(d, wide, {.strict = true}), Error);
  EXPECT_NO_THROW(io::load_param_into_net(d, wide, {.strict = true, .allow_downcast = true}));
  EXPECT_EQ(d.weight.to_vector<float>(), std::vector<float>(6, 1.0f));
}

void slow_failpoint(const fs::path&) {
  ::_exit(3);  // simulate a crash after the temporary file, before the rename
}

TEST(Checkpoint, CrashDuringSaveKeepsTheOldFile) {
  const fs::path p = temp_dir() / "crash.safetensors";
  manual_seed(0);
  nn::Dense d(8, 8);
  io::save_checkpoint(d, p);
  const auto before = io::load_checkpoint(p).at("weight").to_vector<float>();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    io::set_write_failpoint(slow_failpoint);
    NoGradGuard ng;
    d.weight.detach().fill_(9.0);
    io::save_checkpoint(d, p);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3) << "the child died at the failpoint";
  EXPECT_EQ(io::load_checkpoint(p).at("weight").to_vector<float>(), before);
}

// ---------------------------------------------------------------- hostile files

std::vector<uint8_t> file_with_header(const std::string& header, size_t data_bytes, uint64_t declared = 0) {
  const uint64_t n = declared ? declared : header.size();
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  for (size_t i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  try {
    io::parse_safetensors(bytes.data(), bytes.size(), "evil.safetensors");
    FAIL() << "accepted a hostile file; expected an error mentioning " << needle;
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("evil.safetensors"), std::string::npos) << w;
    EXPECT_NE(w.find(needle), std::string::npos) << w;
  }
}

TEST(Safetensors, HostileHeaders) {
  expect_error({1, 2, 3}, "header length");
  expect_error(file_with_header("{}", 0, 1000), "header length");
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

TEST(Safetensors, NanInWeightsIsAWarningNotAnError) {
  const fs::path p = temp_dir() / "nan.safetensors";
  io::write_safetensors(p, {{"w", Tensor::from_vector<float>({1.0f, NAN, INFINITY}, {3})}});
  const auto f = io::read_safetensors(p);
  ASSERT_EQ(f.warnings.size(), 1u);
  EXPECT_NE(f.warnings[0].find("2 NaN/inf"), std::string::npos);
}

}  // namespace
}  // namespace mixprec
