// The parallel context (set_auto_parallel_context) and what needs no transport: recognising a
// launcher from the environment, choosing a tensor's transport (MPI or NCCL, transport.h), and
// the checks built on all_gather: the rank-consistency check (state) and the same-job check
// (settings, whose text travels only when the digests differ). The MPI calls themselves are in
// mpi.cpp (or single.cpp in a build without MPI), the NCCL ones in nccl.cpp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string_view>

#include "comm/transport.h"
#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"

namespace mixprec {
namespace {
AutoParallelContext g_parallel;
}

void set_auto_parallel_context(const AutoParallelContext& c) {
  MIXPREC_CHECK(c.grad_allreduce_dtype == DType::f32 || c.grad_allreduce_dtype == DType::bf16,
                "set_auto_parallel_context: grad_allreduce_dtype must be f32 or bf16, got ",
                dtype_name(c.grad_allreduce_dtype));
  MIXPREC_CHECK(std::isfinite(c.bucket_cap_mb) && c.bucket_cap_mb > 0 && std::isfinite(c.first_bucket_mb) &&
                    c.first_bucket_mb > 0,
                "set_auto_parallel_context: bucket_cap_mb and first_bucket_mb must be finite and > 0, got ",
                c.bucket_cap_mb, " and ", c.first_bucket_mb);
  MIXPREC_CHECK(c.parallel_mode == ParallelMode::STAND_ALONE || communication::is_initialized(),
                "set_auto_parallel_context: DATA_PARALLEL needs the process group, but communication::init() "
                "was not called",
                Hint{"call communication::init() first, in every process mpirun started"});
  g_parallel = c;
}

const AutoParallelContext& get_auto_parallel_context() { return g_parallel; }
void reset_auto_parallel_context() { g_parallel = AutoParallelContext{}; }
bool is_data_parallel() { return g_parallel.parallel_mode == ParallelMode::DATA_PARALLEL; }

bool communication::launched_by_launcher() {
  // Open MPI, then the PMI/PMIx variables that MPICH's hydra, Slurm and others set.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

namespace comm {

detail::Transport detail::transport_for(Device device, bool initialized, bool nccl_built, const char* what) {
  if (!initialized) return Transport::none;
  if (device.is_cpu()) return Transport::mpi;
  MIXPREC_CHECK(nccl_built, what, ": tensors on ", device.str(),
                " need NCCL for their collectives (data parallel on GPUs), and this build of mixprec has none",
                Hint{"rebuild with -DMIXPREC_CUDA=ON and MPI, with NCCL next to the CUDA toolkit (nccl.h, "
                     "libnccl.so; -DMIXPREC_NCCL=ON), or keep the tensors on the CPU"});
  return Transport::nccl;
}

detail::Transport detail::transport_for(const Tensor& t, const char* what) {
  return transport_for(t.device(), communication::is_initialized(), communication::built_with_nccl(), what);
}

namespace {
// FNV-1a over 8-byte words (then the tail): fast, and any change of a bit changes the hash.
uint64_t hash_bytes(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
}  // namespace

RankCheckEntry tensor_entry(std::string name, const Tensor& t) {
  const Tensor c = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu()).contiguous();
  return {std::move(name), hash_bytes(c.data_ptr(), c.nbytes()), false, 0.0};
}

RankCheckEntry number_entry(std::string name, double value) {
  return {std::move(name), std::bit_cast<uint64_t>(value), true, value};
}

void check_same_on_all_ranks(const std::vector<RankCheckEntry>& entries, const std::string& when) {
  const int n = communication::get_group_size();
  std::vector<uint64_t> mine(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) mine[i] = entries[i].hash;
  const std::vector<uint64_t> all = all_gather(mine);
  const size_t e = entries.size();
  size_t differing = 0, first = e;
  for (size_t i = 0; i < e; ++i)
    for (int r = 1; r < n; ++r)
      if (all[r * e + i] != all[i]) {
        differing += 1;
        if (first == e) first = i;
        break;
      }
  if (differing == 0) return;
  const RankCheckEntry& f = entries[first];
  std::ostringstream ranks, values;
  for (int r = 1; r < n; ++r) {
    if (all[r * e + first] == all[first]) continue;
    ranks << (ranks.tellp() > 0 ? ", " : "") << r;
    if (f.is_number) values << "; rank " << r << " holds " << std::bit_cast<double>(all[r * e + first]);
  }
  std::ostringstream msg;
  msg << "rank consistency check at " << when << ": '" << f.name << "' differs between ranks: rank"
      << (ranks.str().find(',') != std::string::npos ? "s " : " ") << ranks.str() << " against rank 0";
  if (f.is_number) msg << " (rank 0 holds " << std::bit_cast<double>(all[first]) << values.str() << ")";
  msg << "; " << differing << " of " << e << " checked values differ";
  throw RankMismatchError(msg.str(),
                          "data-parallel ranks must take identical decisions; a difference means a rank "
                          "reduced, skipped or updated on its own (a bug, or ranks built or configured differently)",
                          SourceLocation::current(), false);
}

// ---------------------------------------------------------------- same job on every rank

namespace {

// "<size>:<name><size>:<value>" per setting: any bytes survive, and the digest covers them all.
std::string serialize(const std::vector<JobSetting>& settings) {
  std::string out;
  for (const auto& [name, value] : settings)
    out += std::to_string(name.size()) + ':' + name + std::to_string(value.size()) + ':' + value;
  return out;
}

std::vector<JobSetting> deserialize(std::string_view text) {
  std::vector<JobSetting> out;
  const auto field = [&] {
    const size_t colon = text.find(':');
    MIXPREC_ASSERT(colon != std::string_view::npos, "a serialized job setting has a length");
    const size_t n = std::stoull(std::string(text.substr(0, colon)));
    std::string f(text.substr(colon + 1, n));
    text.remove_prefix(std::min(text.size(), colon + 1 + n));
    return f;
  };
  while (!text.empty()) {
    std::string name = field();
    out.push_back({std::move(name), field()});
  }
  return out;
}

const JobSetting* find_setting(const std::vector<JobSetting>& settings, const std::string& name) {
  for (const JobSetting& s : settings)
    if (s.name == name) return &s;
  return nullptr;
}

std::string shown(const std::string& value) { return value.empty() ? "''" : value; }

}  // namespace

std::vector<JobSetting> numerics_environment() {
  std::vector<JobSetting> out;
  for (const char* name :
       {"MIXPREC_ISA", "MIXPREC_KERNEL_CHOICE", "MIXPREC_GRAPH_FUSE", "MIXPREC_DISABLE_KERNELS",
        "MIXPREC_DETERMINISTIC"}) {
    const char* v = std::getenv(name);
    out.push_back({name, v && *v ? v : "unset"});
  }
  return out;
}

std::optional<std::string> describe_job_difference(int a, const std::vector<JobSetting>& a_settings,
                                                   int b,
                                                   const std::vector<JobSetting>& b_settings) {
  std::string first;
  std::vector<std::string> others;
  const auto differs = [&](const JobSetting* x, const JobSetting* y, const std::string& name) {
    if (!first.empty()) return others.push_back(name);
    // "rank 1's --lr is 0.02, rank 0's is 0.01"; a side without the setting "has no" / "has none".
    const std::string rb = "rank " + std::to_string(b), ra = "rank " + std::to_string(a);
    first = (y ? rb + "'s " + name + " is " + shown(y->value) : rb + " has no " + name) + ", " +
            (x ? ra + "'s is " + shown(x->value) : ra + " has none");
  };
  for (const JobSetting& x : a_settings)
    if (const JobSetting* y = find_setting(b_settings, x.name); !y || y->value != x.value)
      differs(&x, y, x.name);
  for (const JobSetting& y : b_settings)
    if (!find_setting(a_settings, y.name)) differs(nullptr, &y, y.name);
  if (first.empty()) return std::nullopt;
  std::string text = first + ": every rank must run the same job";
  if (!others.empty()) {
    constexpr size_t kListed = 8;
    text += " (also different:";
    for (size_t i = 0; i < std::min(others.size(), kListed); ++i)
      text += (i ? ", " : " ") + others[i];
    if (others.size() > kListed)
      text += " and " + std::to_string(others.size() - kListed) + " more";
    text += ")";
  }
  return text;
}

void check_same_job(const std::vector<JobSetting>& settings, const std::string& hint) {
  std::vector<JobSetting> all = settings;
  for (JobSetting& s : numerics_environment()) all.push_back(std::move(s));
  const std::string mine = serialize(all);
  const uint64_t digest = hash_bytes(mine.data(), mine.size());
  const std::vector<uint64_t> digests = all_gather({&digest, 1});
  std::vector<int> differ;
  for (size_t r = 1; r < digests.size(); ++r)
    if (digests[r] != digests[0]) differ.push_back(static_cast<int>(r));
  if (differ.empty()) return;
  // Every rank knows `differ`, so every rank makes the same broadcasts and builds the same message.
  std::string zero = mine;
  broadcast(zero, 0);
  const std::vector<JobSetting> base = deserialize(zero);
  for (int r : differ) {
    std::string theirs = mine;
    broadcast(theirs, r);
    const std::optional<std::string> text =
        describe_job_difference(0, base, r, deserialize(theirs));
    if (!text) continue;  // the same settings in another order
    std::string ranks;
    for (int d : differ) ranks += (ranks.empty() ? "" : ", ") + std::to_string(d);
    throw RankMismatchError(
        *text + (differ.size() > 1 ? "; ranks " + ranks + " differ from rank 0" : std::string()),
        hint, SourceLocation::current(), false);
  }
}

}  // namespace comm
}  // namespace mixprec
