// `mixprec generate --checkpoint F --prompt TEXT --tokens N --temperature T --seed S`: loads a
// gpt-tiny checkpoint (from `mixprec train --model gpt-tiny --checkpoint F`) and samples N bytes
// after the prompt with a KV cache (nn::GptTiny::generate); prints the prompt and the sample as
// they come (flushed and checked every kFlushBytes, so a failed write stops it at once), and the
// time taken on stderr. A first SIGINT/SIGTERM stops sampling after the current byte: what was
// made is flushed, and the exit status is 128 + the signal (train_signals.h).
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli_error.h"
#include "commands.h"
#include "mixprec/amp/amp.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/nn/zoo.h"
#include "output_file.h"
#include "train_common.h"
#include "train_signals.h"

namespace mixprec::cli {

namespace {
constexpr size_t kFlushBytes = 64;  // bytes of sample per write to stdout
constexpr const char* kModel =
    "gpt-tiny";  // the zoo's language model (nn::GptTiny::generate samples it)

// Writes `text` to stdout and flushes it; throws naming stdout when the write fails.
void write_stdout(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  flush_stdout();
}

struct GenerateArgs {
  std::string checkpoint, prompt = "\n", amp_level = "O0", dtype = "bf16";
  int64_t tokens = 200;
  double temperature = 0.8;
  uint64_t seed = 1;
  int threads = 0;
};
}  // namespace

Command register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Sample text from a trained gpt-tiny checkpoint");
  cmd->add_option("--checkpoint", a->checkpoint, "The .safetensors file of a gpt-tiny run")
      ->required();
  cmd->add_option("--prompt", a->prompt, "The text to continue (at least one byte)")
      ->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "Bytes to generate")
      ->capture_default_str()
      ->check(integer_range(0));
  cmd->add_option("--temperature", a->temperature, "Sampling temperature (0: the most likely byte)")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the sampling (0 to 2^64-1)")
      ->capture_default_str()
      ->check(seed_validator());
  cmd->add_option("--amp-level", a->amp_level, "O0|O1|O2|O3|auto")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "bf16|f16")->capture_default_str();
  cmd->add_option("--threads", a->threads, "OpenMP threads (0: default)")
      ->capture_default_str()
      ->check(integer_range(0, kMaxThreads, std::nullopt, "0: default"));
  return {
      cmd, [a] {
        as_usage_error([&] {
          MIXPREC_CHECK(!a->prompt.empty(), "--prompt: expected at least one byte");
          MIXPREC_CHECK(a->tokens >= 0, "--tokens: expected at least 0, got ", a->tokens);
          MIXPREC_CHECK(std::isfinite(a->temperature) && a->temperature >= 0,
                        "--temperature: expected a finite number "
                        ">= 0, got ",
                        a->temperature);
          MIXPREC_CHECK(a->threads >= 0, "--threads: expected at least 0, got ", a->threads);
          with_prefix("--amp-level: ", [&] { (void)parse_amp_level(a->amp_level); });
          (void)parse_low_dtype(a->dtype);
        });
        set_threads(a->threads);
        const std::shared_ptr<nn::Cell> cell = nn::zoo_model(kModel).make();
        auto& net = dynamic_cast<nn::GptTiny&>(*cell);
        const std::string prefix = "--checkpoint " + a->checkpoint + ": ";
        const auto params = with_prefix(prefix, [&] { return io::load_checkpoint(a->checkpoint); });
        check_checkpoint_model(a->checkpoint, kModel, "generate's model");
        with_prefix(prefix, [&] { (void)io::load_param_into_net(net, params, {.strict = true}); });
        amp::auto_mixed_precision(net, a->amp_level, parse_low_dtype(a->dtype));
        Generator gen(a->seed);
        const auto t0 = std::chrono::steady_clock::now();
        write_stdout(a->prompt);
        std::string chunk;
        StopSignals signals;  // a first SIGINT/SIGTERM ends sampling after the current byte
        const int64_t made = net.generate(a->prompt, a->tokens, a->temperature, gen, [&](char b) {
          chunk.push_back(b);
          if (chunk.size() >= kFlushBytes) write_stdout(chunk), chunk.clear();
          return StopSignals::received() == 0;
        });
        chunk.push_back('\n');
        write_stdout(chunk);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (const int sig = StopSignals::received()) {
          std::fprintf(stderr,
                       "mixprec: generate stopped by %s after %lld of %lld bytes (all written)\n",
                       StopSignals::name(sig), static_cast<long long>(made),
                       static_cast<long long>(a->tokens));
          return 128 + sig;
        }
        std::fprintf(stderr, "generated %lld bytes in %.3f s (%.0f bytes/s, KV cache)\n",
                     static_cast<long long>(made), seconds,
                     static_cast<double>(made) / std::max(seconds, 1e-9));
        return 0;
      }};
}

}  // namespace mixprec::cli
