// Replay driver for the fuzz targets without libFuzzer (any compiler): runs every file named on
// the command line, or found (sorted) in a directory named there, through LLVMFuzzerTestOneInput,
// the very function the fuzzer drives. ctest runs it over tests/fuzz/corpus/*, so the normal and
// the sanitizer builds re-check every seed and reproducer. It generates no inputs. Exit status:
// 0 when every input returned, 1 on an escaped exception or no inputs; a crash is a crash.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file()) inputs.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "replay: %s: not a file or directory\n", argv[i]);
      return 1;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs (usage: %s FILE_OR_DIR...)\n", argv[0]);
    return 1;
  }
  for (const fs::path& p : inputs) {
    std::ifstream f(p, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                                     std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) {
      std::fprintf(stderr, "replay: %s: cannot read\n", p.c_str());
      return 1;
    }
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", p.c_str(), bytes.size());
    try {
      // A copy of exactly `size` bytes, so ASan sees any read past the end.
      std::vector<uint8_t> exact(bytes);
      LLVMFuzzerTestOneInput(exact.data(), exact.size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "replay: %s: uncaught exception: %s\n", p.c_str(), e.what());
      return 1;
    } catch (...) {
      std::fprintf(stderr, "replay: %s: uncaught non-standard exception\n", p.c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "replay: %zu inputs, no findings\n", inputs.size());
  return 0;
}
