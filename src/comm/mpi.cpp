// The MPI transport (compiled instead of single.cpp when MIXPREC_WITH_MPI): group membership on
// MPI_COMM_WORLD, the blocking collectives, non-blocking bucket sums (MPI_Iallreduce; bf16
// through a commutative user-defined operation that adds in f32), and the per-machine thread
// share. Only the thread that called init() makes MPI calls (MPI_THREAD_FUNNELED); OpenMP and
// prefetch threads never do. Collectives on CUDA tensors are handed to NCCL (transport.h).
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "comm/transport.h"
#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"
#include "mixprec/half.h"

namespace mixprec {
namespace {

bool g_init_by_us = false;
MPI_Datatype g_bf16 = MPI_DATATYPE_NULL;
MPI_Op g_bf16_sum = MPI_OP_NULL;

// inout[i] = bf16(f32(in[i]) + f32(inout[i])): one f32 addition, one rounding per combine.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = f32_to_bf16_bits(bf16_bits_to_f32(a[i]) + bf16_bits_to_f32(b[i]));
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  MIXPREC_CHECK(false, what, " failed: ", std::string(text, static_cast<size_t>(len)));
}

bool active() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

int world_count(int64_t n) {
  MIXPREC_CHECK(n <= std::numeric_limits<int>::max(), "collective: ", n, " elements is more than MPI's int count");
  return static_cast<int>(n);
}

MPI_Datatype datatype_of(DType d) {
  switch (d) {
    case DType::f32: return MPI_FLOAT;
    case DType::bf16: return g_bf16;
    default: MIXPREC_CHECK(false, "all_reduce: buffers must be f32 or bf16, got ", dtype_name(d));
  }
  return MPI_DATATYPE_NULL;
}

}  // namespace

namespace communication {

void init() {
  if (is_initialized()) return;
  int fin = 0;
  MPI_Finalized(&fin);
  MIXPREC_CHECK(!fin, "communication::init: the group was already released; MPI cannot be initialised twice");
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  g_init_by_us = true;
  // Errors come back as codes (turned into exceptions) instead of aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check(MPI_Type_contiguous(2, MPI_BYTE, &g_bf16), "MPI_Type_contiguous");
  check(MPI_Type_commit(&g_bf16), "MPI_Type_commit");
  check(MPI_Op_create(&bf16_sum, /*commute=*/1, &g_bf16_sum), "MPI_Op_create");
}

void release() {
  if (!active() || !g_init_by_us) return;
  comm::detail::nccl_release();
  MPI_Op_free(&g_bf16_sum);
  MPI_Type_free(&g_bf16);
  MPI_Finalize();
}

bool is_initialized() { return active() && g_init_by_us; }

int get_rank() {
  int r = 0;
  if (is_initialized()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int get_group_size() {
  int n = 1;
  if (is_initialized()) MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

namespace {
MPI_Comm local_comm() {
  static MPI_Comm local = MPI_COMM_NULL;
  if (local == MPI_COMM_NULL)
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
  return local;
}
}  // namespace

int get_local_rank() {
  int r = 0;
  if (is_initialized()) MPI_Comm_rank(local_comm(), &r);
  return r;
}

int get_local_rank_size() {
  int n = 1;
  if (is_initialized()) MPI_Comm_size(local_comm(), &n);
  return n;
}

int default_threads_per_rank() {
  if (!is_initialized()) return 0;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) return 1;
  const int n = get_local_rank_size();
  std::vector<cpu_set_t> all(static_cast<size_t>(n));
  check(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, local_comm()),
        "MPI_Allgather");
  int sharing = 0;
  for (const cpu_set_t& s : all) sharing += CPU_EQUAL(&s, &mine) ? 1 : 0;
  return std::max(1, CPU_COUNT(&mine) / std::max(1, sharing));
}

void abort_group(int status) {
  if (active()) MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);
}

}  // namespace communication

namespace comm {
using communication::is_initialized;
using detail::Transport;

void all_reduce_sum(std::span<double> v) {
  if (!is_initialized() || v.empty()) return;
  check(MPI_Allreduce(MPI_IN_PLACE, v.data(), world_count(static_cast<int64_t>(v.size())), MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD), "MPI_Allreduce");
}

void all_reduce_max(std::span<double> v) {
  if (!is_initialized() || v.empty()) return;
  check(MPI_Allreduce(MPI_IN_PLACE, v.data(), world_count(static_cast<int64_t>(v.size())), MPI_DOUBLE, MPI_MAX,
                      MPI_COMM_WORLD), "MPI_Allreduce");
}

namespace {
// In place over a contiguous f32 tensor, by MPI (host) or NCCL (CUDA).
void all_reduce_tensor(const Tensor& t, detail::ReduceOp op, const char* what) {
  MIXPREC_CHECK(t.is_contiguous() && t.dtype() == DType::f32, what, ": expected a contiguous f32 tensor, got ",
                dtype_name(t.dtype()), t.is_contiguous() ? "" : " (not contiguous)");
  const Transport via = detail::transport_for(t, what);
  if (via == Transport::none || t.numel() == 0) return;
  if (via == Transport::nccl) {
    detail::nccl_all_reduce(t, op);
  } else {
    check(MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), world_count(t.numel()), MPI_FLOAT,
                        op == detail::ReduceOp::sum ? MPI_SUM : MPI_MAX, MPI_COMM_WORLD),
          "MPI_Allreduce");
  }
  t.storage()->bump_version();
}
}  // namespace

void all_reduce_sum(const Tensor& t) { all_reduce_tensor(t, detail::ReduceOp::sum, "all_reduce_sum"); }
void all_reduce_max(const Tensor& t) { all_reduce_tensor(t, detail::ReduceOp::max, "all_reduce_max"); }

void broadcast(const Tensor& t, int root) {
  MIXPREC_CHECK(t.is_contiguous(), "broadcast: expected a contiguous tensor");
  const Transport via = detail::transport_for(t, "broadcast");
  if (via == Transport::none || t.numel() == 0) return;
  if (via == Transport::nccl) {
    detail::nccl_broadcast(t, root);
    t.storage()->bump_version();
    return;
  }
  check(MPI_Bcast(t.data_ptr(), world_count(static_cast<int64_t>(t.nbytes())), MPI_BYTE, root, MPI_COMM_WORLD),
        "MPI_Bcast");
  t.storage()->bump_version();
}

void broadcast(std::string& s, int root) {
  if (!is_initialized()) return;
  uint64_t n = s.size();
  check(MPI_Bcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD), "MPI_Bcast");
  s.resize(static_cast<size_t>(n));
  if (n) check(MPI_Bcast(s.data(), world_count(static_cast<int64_t>(n)), MPI_CHAR, root, MPI_COMM_WORLD), "MPI_Bcast");
}

std::vector<uint64_t> all_gather(std::span<const uint64_t> mine) {
  const int n = communication::get_group_size();
  std::vector<uint64_t> all(mine.size() * static_cast<size_t>(n));
  if (!is_initialized()) {
    std::copy(mine.begin(), mine.end(), all.begin());
    return all;
  }
  check(MPI_Allgather(mine.data(), world_count(static_cast<int64_t>(mine.size())), MPI_UINT64_T, all.data(),
                      world_count(static_cast<int64_t>(mine.size())), MPI_UINT64_T, MPI_COMM_WORLD),
        "MPI_Allgather");
  return all;
}

void barrier() {
  if (is_initialized()) check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

struct PendingReduce::Impl {
  MPI_Request request = MPI_REQUEST_NULL;
  Tensor buffer;  // kept alive while MPI writes into it
};

PendingReduce::PendingReduce() = default;
PendingReduce::PendingReduce(PendingReduce&&) noexcept = default;
PendingReduce& PendingReduce::operator=(PendingReduce&&) noexcept = default;
PendingReduce::~PendingReduce() {
  if (impl_ && active()) MPI_Wait(&impl_->request, MPI_STATUS_IGNORE);
}

bool PendingReduce::test() {
  if (!impl_) return true;
  int done = 0;
  check(MPI_Test(&impl_->request, &done, MPI_STATUS_IGNORE), "MPI_Test");
  if (done) {
    impl_->buffer.storage()->bump_version();
    impl_.reset();
  }
  return done != 0;
}

void PendingReduce::wait() {
  if (!impl_) return;
  check(MPI_Wait(&impl_->request, MPI_STATUS_IGNORE), "MPI_Wait");
  impl_->buffer.storage()->bump_version();
  impl_.reset();
}

PendingReduce start_all_reduce_sum(const Tensor& buffer) {
  MIXPREC_CHECK(buffer.is_contiguous(), "start_all_reduce_sum: expected a contiguous buffer");
  PendingReduce p;
  const Transport via = detail::transport_for(buffer, "start_all_reduce_sum");
  if (via == Transport::none || buffer.numel() == 0) return p;
  if (via == Transport::nccl) {  // queued on the device's stream: done for every later kernel there
    detail::nccl_all_reduce(buffer, detail::ReduceOp::sum);
    buffer.storage()->bump_version();
    return p;
  }
  const MPI_Datatype type = datatype_of(buffer.dtype());
  const MPI_Op op = buffer.dtype() == DType::bf16 ? g_bf16_sum : MPI_SUM;
  p.impl_ = std::make_unique<PendingReduce::Impl>();
  p.impl_->buffer = buffer;
  check(MPI_Iallreduce(MPI_IN_PLACE, buffer.data_ptr(), world_count(buffer.numel()), type, op, MPI_COMM_WORLD,
                       &p.impl_->request),
        "MPI_Iallreduce");
  return p;
}

}  // namespace comm
}  // namespace mixprec
