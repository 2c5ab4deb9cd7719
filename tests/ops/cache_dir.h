// A fresh kernel-choice cache folder for one test (ops/kernel_choice.h): in MIXPREC_CACHE_DIR
// while alive, the process's choice table forgotten on entry and exit. Shared by the tests of the
// measured kernel choice and of the layout choice.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "ops/kernel_choice.h"

namespace mixprec::testing {

class CacheDir {
 public:
  CacheDir()
      : path_(std::filesystem::temp_directory_path() /
              ("mixprec-kc-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++))) {
    std::filesystem::remove_all(path_);
    const char* old = std::getenv("MIXPREC_CACHE_DIR");
    if (old) saved_ = old;
    ::setenv("MIXPREC_CACHE_DIR", path_.c_str(), 1);
    ops::choice::reset_for_testing();
  }
  ~CacheDir() {
    ops::choice::reset_for_testing();
    if (saved_)
      ::setenv("MIXPREC_CACHE_DIR", saved_->c_str(), 1);
    else
      ::unsetenv("MIXPREC_CACHE_DIR");
    std::filesystem::remove_all(path_);
  }
  CacheDir(const CacheDir&) = delete;
  CacheDir& operator=(const CacheDir&) = delete;
  std::filesystem::path file() const { return path_ / "kernels.json"; }
  const std::filesystem::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
  std::optional<std::string> saved_;
};

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace mixprec::testing
