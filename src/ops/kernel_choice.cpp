// Measured kernel choice: the mode, the process's table of choices and the cache file behind it
// (ops/kernel_choice.h). The file is JSON: {"format": "mixprec kernel choices", "version": 1,
// "library": "<version>", "machines": {"<cpu model> | <features>": {"<signature>": {"kernel":
// name, "seconds": {candidate: best time}}}}}. Nothing here may fail a run: a cache that cannot
// be read or written costs a warning and a re-measurement, never an error.
#include "ops/kernel_choice.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mixprec/comm/communication.h"
#include "mixprec/cpu_features.h"
#include "mixprec/env.h"
#include "mixprec/error.h"
#include "mixprec/version.h"

namespace mixprec::ops {
namespace {

constexpr int kFormatVersion = 1;
constexpr const char* kFormatName = "mixprec kernel choices";

thread_local std::optional<KernelChoice> t_mode;

KernelChoice env_mode() {
  static const KernelChoice mode =
      env::get("MIXPREC_KERNEL_CHOICE") == "first" ? KernelChoice::first : KernelChoice::measure;
  return mode;
}

}  // namespace

KernelChoice kernel_choice() {
  if (t_mode) return *t_mode;
  // Data parallel: every rank must run the same kernels (their gradients are averaged and the
  // ranks compared bit for bit), and ranks timing on their own could choose differently.
  if (is_data_parallel()) return KernelChoice::first;
  return env_mode();
}

KernelChoiceScope::KernelChoiceScope(KernelChoice mode) : prev_(t_mode) { t_mode = mode; }
KernelChoiceScope::~KernelChoiceScope() { t_mode = prev_; }

namespace choice {
namespace {

using Table = std::map<std::string, Choice>;

struct State {
  std::mutex mu;
  bool loaded = false;
  Table file;    // this machine's section of the cache file, as read
  Table mine;    // measured or remembered by this process
  Table pinned;  // from a checkpoint
  Table used;
  int64_t measurements = 0;
  bool write_failed = false;  // warned once; the process goes on without persisting
};

State& state() {
  static auto* s = new State();  // lives until exit: dispatch may run from static destructors
  return *s;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string m = line.substr(colon + 1);
        while (!m.empty() && m.front() == ' ') m.erase(m.begin());
        return m;
      }
    }
  return "unknown cpu";
}

// What a section of the cache file is keyed by: a choice measured on another CPU, or with other
// instruction sets enabled (MIXPREC_ISA), says nothing here.
const std::string& machine_key() {
  static const std::string key = cpu_model() + " | " + describe(cpu_features());
  return key;
}

Choice parse_choice(const nlohmann::json& j) {
  Choice c;
  c.kernel = j.at("kernel").get<std::string>();
  if (j.contains("seconds"))
    for (const auto& [name, t] : j.at("seconds").items())
      c.seconds.emplace_back(name, t.get<double>());
  c.runs = std::max(1, j.value("runs", 1));  // absent (an older file) or nonsense: one run
  return c;
}

nlohmann::json to_json(const Choice& c) {
  nlohmann::json j = {{"kernel", c.kernel}, {"runs", c.runs}};
  nlohmann::json s = nlohmann::json::object();
  for (const auto& [name, t] : c.seconds) s[name] = t;
  j["seconds"] = s;
  return j;
}

enum class FileState { absent, ours, foreign, corrupt };

// Reads the cache file at `path`: this machine's section into `table`, the other machines'
// sections into `others`. `why` says what was wrong with a foreign or corrupt file.
FileState read_file(const std::string& path, Table& table, nlohmann::json& others,
                    std::string& why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return FileState::absent;
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    const nlohmann::json j = nlohmann::json::parse(buf.str());
    if (!j.is_object() || j.value("format", "") != kFormatName) {
      why = "not a mixprec kernel-choice file";
      return FileState::corrupt;
    }
    if (j.value("version", 0) != kFormatVersion || j.value("library", "") != MIXPREC_VERSION) {
      why = "written by mixprec " + j.value("library", std::string("?")) + " (format " +
            std::to_string(j.value("version", 0)) + "); this is " + MIXPREC_VERSION + " (format " +
            std::to_string(kFormatVersion) + ")";
      return FileState::foreign;
    }
    others = nlohmann::json::object();
    for (const auto& [key, section] : j.at("machines").items()) {
      if (key != machine_key()) {
        others[key] = section;
        continue;
      }
      for (const auto& [sig, c] : section.items()) table[sig] = parse_choice(c);
    }
    return FileState::ours;
  } catch (const std::exception& e) {
    table.clear();
    why = e.what();
    return FileState::corrupt;
  }
}

void warn(const std::string& msg) { std::fprintf(stderr, "mixprec: warning: %s\n", msg.c_str()); }

void load_locked(State& s) {
  if (s.loaded) return;
  s.loaded = true;
  const std::string path = cache_path();
  if (path.empty()) return;
  nlohmann::json others;
  std::string why;
  const FileState fs = read_file(path, s.file, others, why);
  if (fs == FileState::corrupt || fs == FileState::foreign)
    warn("ignoring the kernel-choice cache " + path + " (" + why +
         "); the kernels will be measured again and the file rewritten");
}

// Holds an exclusive flock on `path` while alive (-1: none could be had; then the write goes on
// unlocked: the rename still keeps readers from seeing a partial file).
struct FileLock {
  int fd = -1;
  explicit FileLock(const std::string& path) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0 && ::flock(fd, LOCK_EX) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ~FileLock() {
    if (fd >= 0) ::close(fd);  // releases the lock
  }
};

// Merges `add` into the file under the lock: an entry already in the file stands unless the new
// one merges more runs (a confirmation replaces the first measurement; of two processes writing
// the same signature at once, the first stands). Returns "" or why it failed.
std::string merge_into_file(const std::string& path, const Table& add) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec)
    return "cannot create " + std::filesystem::path(path).parent_path().string() + ": " +
           ec.message();
  FileLock lock(path + ".lock");
  Table table;
  nlohmann::json others;
  std::string why;
  if (read_file(path, table, others, why) != FileState::ours) others = nlohmann::json::object();
  for (const auto& [sig, c] : add) {
    const auto [it, inserted] = table.emplace(sig, c);
    if (!inserted && c.runs > it->second.runs) it->second = c;
  }
  nlohmann::json section = nlohmann::json::object();
  for (const auto& [sig, c] : table) section[sig] = to_json(c);
  nlohmann::json j = {{"format", kFormatName},
                      {"version", kFormatVersion},
                      {"library", MIXPREC_VERSION},
                      {"machines", others}};
  j["machines"][machine_key()] = section;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << j.dump(1) << '\n';
    out.flush();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return "cannot write " + tmp + ": " + std::strerror(errno);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    std::filesystem::remove(tmp, ec);
    return "cannot rename " + tmp + " to " + path + ": " + err;
  }
  return "";
}

}  // namespace

std::string cache_path() {
  namespace fs = std::filesystem;
  const char* dir = std::getenv("MIXPREC_CACHE_DIR");
  if (dir != nullptr && *dir != '\0') return (fs::path(dir) / "kernels.json").string();
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg == '/') return (fs::path(xdg) / "mixprec" / "kernels.json").string();
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home == '/')
    return (fs::path(home) / ".cache" / "mixprec" / "kernels.json").string();
  return "";
}

std::optional<Choice> lookup(const std::string& sig, bool with_file) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const Table* t : {&s.pinned, &s.mine}) {
    const auto it = t->find(sig);
    if (it != t->end()) return it->second;
  }
  if (!with_file) return std::nullopt;
  load_locked(s);
  const auto it = s.file.find(sig);
  if (it == s.file.end()) return std::nullopt;
  Choice c = it->second;
  c.from_file = true;
  return c;
}

int confirm_runs() {
  return env::get("MIXPREC_KERNEL_CHOICE") == "measure-once" ? 1 : kConfirmRuns;
}

bool Choice::to_confirm() const {
  return from_file && !pinned && !seconds.empty() && runs < confirm_runs();
}

Choice merge_runs(const Choice& before, const Choice& now) {
  Choice c = now;
  c.runs = before.runs + now.runs;
  for (auto& [name, t] : c.seconds)
    for (const auto& [old_name, old_t] : before.seconds)
      if (old_name == name) t = std::min(t, old_t);
  size_t win = 0;
  for (size_t i = 0; i < c.seconds.size(); ++i)
    if (c.seconds[i].second < c.seconds[win].second) win = i;
  if (!c.seconds.empty()) c.kernel = c.seconds[win].first;
  return c;
}

void store(const std::string& sig, const Choice& in) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  Choice c = in;
  c.from_file = false;
  s.mine[sig] = c;
  if (c.seconds.empty() || s.write_failed) return;  // nothing measured: nothing to persist
  const std::string path = cache_path();
  if (path.empty()) return;
  if (std::string why = merge_into_file(path, {{sig, c}}); !why.empty()) {
    s.write_failed = true;
    warn("cannot save measured kernel choices (" + why +
         "); this run keeps them in memory. Set MIXPREC_CACHE_DIR to a writable folder, or "
         "MIXPREC_KERNEL_CHOICE=first to measure nothing");
  }
}

void pin(const std::map<std::string, std::string>& kernels) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const auto& [sig, k] : kernels) s.pinned[sig] = Choice{k, {}, true};
}

std::map<std::string, Choice> used() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.used;
}

namespace {
thread_local bool t_unrecorded = false;
}  // namespace

UnrecordedScope::UnrecordedScope() : prev_(t_unrecorded) { t_unrecorded = true; }
UnrecordedScope::~UnrecordedScope() { t_unrecorded = prev_; }

void adopt(const std::string& sig, const Choice& in) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  Choice c = in;
  c.from_file = false;
  s.mine.emplace(sig, c);
}

void note_used(const std::string& sig, const Choice& c) {
  if (t_unrecorded) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.used.emplace(sig, c);
}

int64_t measurements() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.measurements;
}

void count_measurement() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.measurements;
}

void reset_for_testing() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.loaded = false;
  s.file.clear();
  s.mine.clear();
  s.pinned.clear();
  s.used.clear();
  s.measurements = 0;
  s.write_failed = false;
}

std::string signature_prefix(std::string_view op, std::string_view phase) {
  return "[" + std::to_string(omp_get_max_threads()) + " threads] " + std::string(op) + " " +
         std::string(phase) + " | ";
}

}  // namespace choice
}  // namespace mixprec::ops
