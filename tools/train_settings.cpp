// Validation of `mixprec train`'s options and the settings a resumed run must share with the run
// it continues (see train_settings.h).
#include "train_settings.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <utility>

#include "cli_error.h"
#include "mixprec/context.h"
#include "mixprec/error.h"
#include "mixprec/io/file.h"

namespace mixprec::cli {
namespace {

// How a stored setting is compared: as text, as an integer, as a double (bit for bit), only as
// "promote or not" (--on-overflow: warn and stop do not change the trajectory), as a path ("dir/"
// is "dir"), as the loss-scale manager it makes (an explicit spec equal to the default is the
// default), or not at all (a different thread count only prints a note).
enum class Kind { text, integer, real, promote, path, loss_scale, note };

struct SettingSpec {
  const char* key;
  const char* flag;
  Kind kind;
};

constexpr SettingSpec kSettings[] = {
    {"cli.model", "--model", Kind::text},
    {"cli.data", "--data", Kind::path},
    {"cli.seed", "--seed", Kind::integer},
    {"cli.batch_size", "--batch-size", Kind::integer},
    {"cli.train_samples", "--train-samples", Kind::integer},
    {"cli.epochs", "--epochs", Kind::integer},
    {"cli.optimizer", "--optimizer", Kind::text},
    {"cli.lr", "--lr", Kind::real},
    {"cli.momentum", "--momentum", Kind::real},
    {"cli.weight_decay", "--weight-decay", Kind::real},
    {"cli.lr_schedule", "--lr-schedule", Kind::text},
    {"cli.warmup_steps", "--warmup-steps", Kind::integer},
    {"cli.max_grad_norm", "--max-grad-norm", Kind::real},
    {"cli.accumulation_steps", "--accumulation-steps", Kind::integer},
    {"cli.amp_level", "--amp-level", Kind::text},
    {"cli.white_list", "--white-list", Kind::text},
    {"cli.black_list", "--black-list", Kind::text},
    {"cli.dtype", "--dtype", Kind::text},
    {"cli.keep_batchnorm_fp32", "--keep-batchnorm-fp32", Kind::text},
    {"cli.loss_scale", "--loss-scale", Kind::loss_scale},
    {"cli.on_overflow", "--on-overflow", Kind::promote},
    {"cli.grad_allreduce_dtype", "--grad-allreduce-dtype", Kind::text},
    {"cli.threads", "--threads", Kind::note},
};

// The shortest decimal that reads back as exactly `v`.
std::string exact(double v) {
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// A decimal integer parsed whole, as (negative, magnitude): every int64 and uint64 value (--seed
// goes up to 2^64-1) is represented exactly; nullopt if `s` is not an integer.
std::optional<std::pair<bool, uint64_t>> parse_integer(const std::string& s) {
  const bool negative = !s.empty() && s[0] == '-';
  const char* begin = s.data() + (negative ? 1 : 0);
  const char* end = s.data() + s.size();
  uint64_t magnitude = 0;
  const auto [stop, ec] = std::from_chars(begin, end, magnitude);
  if (begin == end || ec != std::errc() || stop != end) return std::nullopt;
  return std::pair{negative && magnitude != 0, magnitude};
}

// A path as written, normalised: "dir/", "dir/." and "./dir" are "dir".
std::string normal_path(const std::string& p) {
  std::string n = std::filesystem::path(p).lexically_normal().string();
  if (n.size() > 1 && n.back() == '/') n.pop_back();
  return n;
}

// What a --loss-scale spec makes: the manager's description, "none", or the spec itself when it
// does not parse; "default" is the level's default, which is the dynamic manager's defaults at O2
// (amp::build_train_network), none otherwise. The level is the same in both runs (compared first).
std::string loss_scale_identity(const std::string& spec, const std::string& level) {
  try {
    const auto m = parse_loss_scale(spec == "default" && level == "O2" ? "dynamic" : spec);
    if (!m) return "none";
    return *m ? (*m)->description() : "none";
  } catch (const Error&) {
    return spec;
  }
}

bool same(Kind kind, const std::string& a, const std::string& b, const std::string& level) {
  switch (kind) {
    case Kind::integer: {
      const auto x = parse_integer(a), y = parse_integer(b);
      return x && y ? *x == *y : a == b;  // "auto:F" (a model's warm-up fraction) compares as text
    }
    case Kind::real: {
      char *ea = nullptr, *eb = nullptr;
      const double x = std::strtod(a.c_str(), &ea), y = std::strtod(b.c_str(), &eb);
      return !a.empty() && !b.empty() && *ea == '\0' && *eb == '\0' &&
             std::bit_cast<uint64_t>(x) == std::bit_cast<uint64_t>(y);
    }
    case Kind::promote: return (a == "promote") == (b == "promote");
    case Kind::path: return normal_path(a) == normal_path(b);
    case Kind::loss_scale:
      return a == b || loss_scale_identity(a, level) == loss_scale_identity(b, level);
    case Kind::text:
    case Kind::note: return a == b;
  }
  return false;
}

void check_range(bool ok, const char* flag, const std::string& expected, double got) {
  MIXPREC_CHECK(ok, flag, ": expected ", expected, ", got ", exact(got));
}

}  // namespace

void validate(const TrainArgs& a) {
  check_range(a.epochs >= 1, "--epochs", "at least 1", static_cast<double>(a.epochs));
  check_range(a.max_steps == -1 || a.max_steps >= 1, "--max-steps", "at least 1 (or -1: no limit)",
              static_cast<double>(a.max_steps));
  check_range(a.batch_size >= 1, "--batch-size", "at least 1", static_cast<double>(a.batch_size));
  check_range(a.train_samples == -1 || a.train_samples >= 1, "--train-samples",
              "at least 1 (or -1: all)", static_cast<double>(a.train_samples));
  check_range(std::isfinite(a.opt.lr) && a.opt.lr > 0, "--lr", "a finite number > 0", a.opt.lr);
  check_range(std::isfinite(a.opt.momentum) && a.opt.momentum >= 0 && a.opt.momentum < 1,
              "--momentum", "a number in [0, 1)", a.opt.momentum);
  check_range(std::isfinite(a.opt.weight_decay) && a.opt.weight_decay >= 0, "--weight-decay",
              "a finite number >= 0", a.opt.weight_decay);
  check_range(a.opt.warmup_steps >= 0, "--warmup-steps", "at least 0",
              static_cast<double>(a.opt.warmup_steps));
  check_range(std::isfinite(a.max_grad_norm) && a.max_grad_norm >= 0, "--max-grad-norm",
              "a finite number >= 0 (0: no clipping)", a.max_grad_norm);
  check_range(a.accumulation_steps >= 1 && a.accumulation_steps <= 1 << 20, "--accumulation-steps",
              "an integer in [1, 2^20]", static_cast<double>(a.accumulation_steps));
  check_range(a.threads >= 0, "--threads", "at least 0 (0: OMP_NUM_THREADS or all cores)",
              a.threads);
  check_range(a.save_every >= 0, "--save-every", "at least 0 (0: only at the end)",
              static_cast<double>(a.save_every));
  check_range(a.grad_stats_every >= 0, "--grad-stats", "at least 0 (0: off)",
              static_cast<double>(a.grad_stats_every));
  check_range(a.max_skip_rate >= 0 && a.max_skip_rate <= 1, "--max-skip-rate", "a number in [0, 1]",
              a.max_skip_rate);
  check_range(a.print_every >= 1, "--print-every", "at least 1",
              static_cast<double>(a.print_every));
  check_range(a.check_ranks >= 0, "--check-ranks", "at least 0 (0: off)",
              static_cast<double>(a.check_ranks));
  check_range(std::isfinite(a.grad_bucket_mb) && a.grad_bucket_mb > 0, "--grad-bucket-mb",
              "a finite number > 0", a.grad_bucket_mb);
  MIXPREC_CHECK(a.grad_allreduce_dtype == "f32" || a.grad_allreduce_dtype == "bf16",
                "--grad-allreduce-dtype: expected f32 or bf16, got '", a.grad_allreduce_dtype, "'");
  MIXPREC_CHECK(a.keep_bn == "default" || a.keep_bn == "true" || a.keep_bn == "false",
                "--keep-batchnorm-fp32: expected true or false, got '", a.keep_bn, "'");
  with_prefix("--amp-level: ", [&] { (void)parse_amp_level(a.amp_level); });
  MIXPREC_CHECK(a.white_list.empty() || a.black_list.empty(),
                "--white-list and --black-list: pass one of them",
                Hint{"a white list runs the listed ops in --dtype and the rest in fp32; a black "
                     "list the reverse"});
  const char* list_flag = a.white_list.empty() ? "--black-list" : "--white-list";
  const std::string& list = a.white_list.empty() ? a.black_list : a.white_list;
  MIXPREC_CHECK(!a.custom_lists() || !a.amp_level_given, list_flag,
                " replaces --amp-level: pass one of them");
  for (const std::string& name : split_list(list))
    MIXPREC_CHECK(!name.empty(), list_flag,
                  ": expected comma-separated op or cell names, got an empty name in '", list, "'");
  with_prefix("--mode: ", [&] { (void)parse_mode(a.mode); });
  if (a.dtype != "auto") (void)parse_low_dtype(a.dtype);
  (void)parse_loss_scale(a.loss_scale);
  MIXPREC_CHECK(a.save_every == 0 || !a.checkpoint.empty(), "--save-every ", a.save_every,
                ": needs --checkpoint FILE (where to save)");
  std::error_code ec;
  MIXPREC_CHECK(a.resume.empty() || std::filesystem::is_regular_file(a.resume, ec), "--resume ",
                a.resume, ": ",
                std::filesystem::exists(a.resume, ec)
                    ? "not a regular file (" + io::non_regular_kind(a.resume) + ")"
                    : std::string("no such file"),
                Hint{"pass the --checkpoint file of the run to continue"});
  MIXPREC_CHECK(!a.overwrite || !a.checkpoint.empty(),
                "--overwrite: needs --checkpoint FILE (the file it lets "
                "this run replace)");
  if (a.checkpoint.empty() || a.overwrite || !std::filesystem::is_regular_file(a.checkpoint, ec))
    return;  // missing: written at the end; a directory, a device or a FIFO: check_writable says
             // what it is
  const bool continues_it =
      !a.resume.empty() && std::filesystem::equivalent(a.checkpoint, a.resume, ec);
  MIXPREC_CHECK(continues_it, "--checkpoint ", a.checkpoint,
                ": the file exists and this run would replace it",
                Hint{a.resume.empty() ? "pass --resume " + a.checkpoint +
                                            " to continue that run, or --overwrite to "
                                            "start a new run over it"
                                      : "pass --overwrite to replace it, or another --checkpoint"});
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> names;
  if (list.empty()) return names;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    names.push_back(
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return names;
    start = comma + 1;
  }
}

io::Metadata trajectory_settings(const TrainArgs& a, int threads) {
  return {{"cli.model", a.model},
          {"cli.data", a.data},
          {"cli.seed", std::to_string(a.seed)},
          {"cli.batch_size", std::to_string(a.batch_size)},
          {"cli.train_samples", std::to_string(a.train_samples)},
          {"cli.epochs", std::to_string(a.epochs)},
          {"cli.optimizer", a.opt.name},
          {"cli.lr", exact(a.opt.lr)},
          {"cli.momentum", exact(a.opt.momentum)},
          {"cli.weight_decay", exact(a.opt.weight_decay)},
          {"cli.lr_schedule", a.opt.schedule},
          {"cli.warmup_steps", a.warmup_fraction > 0 ? "auto:" + exact(a.warmup_fraction)
                                                     : std::to_string(a.opt.warmup_steps)},
          {"cli.max_grad_norm", exact(a.max_grad_norm)},
          {"cli.accumulation_steps", std::to_string(a.accumulation_steps)},
          {"cli.amp_level", a.amp_level},
          {"cli.white_list", a.white_list},
          {"cli.black_list", a.black_list},
          {"cli.dtype", a.dtype},
          {"cli.keep_batchnorm_fp32", a.keep_bn},
          {"cli.loss_scale", a.loss_scale},
          {"cli.on_overflow", a.on_overflow},
          {"cli.grad_allreduce_dtype", a.grad_allreduce_dtype},
          {"cli.threads", std::to_string(threads)}};
}

void check_same_settings(const io::Metadata& stored, const io::Metadata& now,
                         const std::string& resume) {
  MIXPREC_CHECK(stored.contains("cli.model"), "--resume ", resume,
                ": the checkpoint was not saved by `mixprec train` (no cli.model in its metadata)",
                Hint{"resume only from a checkpoint that `mixprec train --checkpoint` wrote"});
  // The level that decides the default loss scale (a custom list trains at O0: no default scaling).
  const bool custom = !now.at("cli.white_list").empty() || !now.at("cli.black_list").empty();
  const std::string level = custom ? "custom" : now.at("cli.amp_level");
  for (const SettingSpec& s : kSettings) {
    const std::string& value = now.at(s.key);
    const auto it = stored.find(s.key);
    if (it == stored.end()) {  // saved by an older mixprec that did not record it
      std::fprintf(
          stderr,
          "mixprec: warning: --resume %s: the checkpoint does not record %s; cannot check that "
          "this run's %s %s is the same\n",
          resume.c_str(), s.flag, s.flag, value.c_str());
      continue;
    }
    if (same(s.kind, it->second, value, level)) continue;
    if (s.kind == Kind::note) {
      std::printf(
          "note: the run was saved with %s %s, this run has %s %s: reductions may round "
          "differently, so "
          "the continuation may differ in the last bits from a run that never stopped\n",
          s.flag, it->second.c_str(), s.flag, value.c_str());
      continue;
    }
    MIXPREC_CHECK(false, "--resume ", resume, ": the run was saved with ", s.flag, " ", it->second,
                  ", this run has ", s.flag, " ", value,
                  Hint{"resume with the same settings as the run that saved the checkpoint"});
  }
  MIXPREC_ASSERT(now.size() == std::size(kSettings),
                 "every recorded setting has a comparison rule");
}

namespace {
// "N bytes" of a file, or "N bytes in K files" of a folder's regular files; "missing" otherwise.
std::string data_size(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return std::to_string(fs::file_size(path, ec)) + " bytes";
  if (!fs::is_directory(path, ec)) return "missing";
  uintmax_t bytes = 0, files = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec))
    if (e.is_regular_file(ec)) bytes += e.file_size(ec), files += 1;
  return std::to_string(bytes) + " bytes in " + std::to_string(files) + " files";
}
}  // namespace

std::vector<comm::JobSetting> job_settings(const TrainArgs& a) {
  const io::Metadata trajectory = trajectory_settings(a, 0);
  std::vector<comm::JobSetting> out;
  for (const SettingSpec& s : kSettings)
    if (s.kind != Kind::note) out.push_back({s.flag, trajectory.at(s.key)});
  for (comm::JobSetting& s : out)
    if (s.name == "--data") s.value = normal_path(a.data);  // "dir/" is "dir"
  const auto flag = [](bool on) { return std::string(on ? "given" : "not given"); };
  out.insert(out.end(), {{"the size of --data", data_size(a.data)},
                         {"--max-steps", std::to_string(a.max_steps)},
                         {"--grad-bucket-mb", exact(a.grad_bucket_mb)},
                         {"--no-grad-overlap", flag(!a.grad_overlap)},
                         {"--check-ranks", std::to_string(a.check_ranks)},
                         {"--no-eval", flag(a.no_eval)},
                         {"--no-eval-every-epoch", flag(!a.eval_every_epoch)},
                         {"--max-skip-rate", exact(a.max_skip_rate)},
                         {"--check-numerics", flag(a.check_numerics)},
                         {"--grad-stats", std::to_string(a.grad_stats_every)},
                         {"--mode", a.mode},
                         {"--device", a.device},
                         {"--resume", a.resume.empty() ? "not given" : a.resume}});
  return out;
}

}  // namespace mixprec::cli
