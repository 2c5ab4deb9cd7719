// The precision table: run the network once with the op recorder on, then group what ran by
// cell: the dtypes the arithmetic used, the dtypes the parameters were used in, and the dtype of
// the cell's output. It reports what executed, not what the flags say. It only observes: the
// pass runs in the network's current mode (training mode takes the path training takes, e.g.
// BatchNorm with batch statistics), and the buffers it updates and the RNG draws it makes are
// put back, so a run with the table is bit-identical to one without.
#include <map>
#include <set>

#include "mixprec/amp/amp.h"
#include "mixprec/grad_mode.h"
#include "mixprec/rng.h"

namespace mixprec::amp {

static std::string join_dtypes(const std::set<DType>& s) {
  if (s.empty()) return "-";
  std::string out;
  for (DType d : s) {
    if (!out.empty()) out.push_back('+');
    out.append(dtype_name(d));
  }
  return out;
}

static std::string join_ops(const std::vector<std::string>& ops) {
  std::string out;
  for (const auto& o : ops) {
    if (!out.empty()) out.push_back(',');
    out.append(o);
  }
  return out;
}

// Puts back, when it goes out of scope (also on an exception), the network's buffers (BatchNorm's
// running statistics) and the default RNG's state as they were when it was made.
class KeepState {
 public:
  explicit KeepState(nn::Cell& network)
      : gen_(default_generator()), seed_(gen_.seed()), offset_(gen_.offset()) {
    NoGradGuard ng;
    for (auto& [name, b] : network.buffers_and_names()) saved_.emplace_back(b, b.detach().clone());
  }
  ~KeepState() {
    NoGradGuard ng;
    gen_.set_state(seed_, offset_);
    for (auto& [live, copy] : saved_) live.detach().copy_(copy);
  }
  KeepState(const KeepState&) = delete;
  KeepState& operator=(const KeepState&) = delete;

 private:
  Generator& gen_;
  uint64_t seed_, offset_;
  std::vector<std::pair<Tensor, Tensor>> saved_;  // (live, copy)
};

std::vector<PrecisionRow> precision_table(nn::Cell& network, const Tensor& sample) {
  std::vector<OpRecord> records;
  DType network_output = DType::f32;
  {
    KeepState keep(network);
    NoGradGuard ng;
    OpRecorder rec(&records);
    network_output = network(sample).dtype();
  }
  std::map<std::string, std::string> types;
  std::vector<std::string> order;
  for (auto& [path, cell] : network.cells_and_names()) {
    types[path] = cell->type_name();
    order.push_back(path);
  }
  struct Acc {
    std::vector<std::string> ops;
    std::set<DType> compute, weights;
    DType output = DType::f32;
    bool any = false;
  };
  std::map<std::string, Acc> by_cell;
  for (const OpRecord& r : records) {
    Acc& a = by_cell[r.cell_path];
    if (r.op != OpId::cast) {
      a.ops.emplace_back(op_name(r.op));
      a.compute.insert(r.compute_dtype);
      for (DType d : r.weight_dtypes) a.weights.insert(d);
    }
    a.output = r.output_dtype;
    a.any = true;
  }
  std::vector<PrecisionRow> rows;
  for (const std::string& path : order) {
    auto it = by_cell.find(path);
    if (it == by_cell.end() || !it->second.any) continue;
    const Acc& a = it->second;
    // A cell's output is its last op's; the network's is what it returns (its own last op may be
    // an input cast, as gpt-tiny's bytes to i32 tokens).
    PrecisionRow row{path.empty() ? "(network)" : path, types[path], a.ops, join_dtypes(a.compute),
                     join_dtypes(a.weights), std::string(dtype_name(path.empty() ? network_output : a.output))};
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string format_precision_table(const std::vector<PrecisionRow>& rows) {
  size_t w0 = 4, w1 = 4, w2 = 3;
  for (const auto& r : rows) {
    w0 = std::max(w0, r.cell.size());
    w1 = std::max(w1, r.type.size());
    w2 = std::max(w2, std::min<size_t>(join_ops(r.ops).size(), 40));
  }
  auto pad = [](std::string s, size_t w) {
    if (s.size() > w) {
      s.resize(w - 3);
      s.append("...");
    }
    s.append(w - s.size() + 2, ' ');
    return s;
  };
  std::string out = pad("cell", w0) + pad("type", w1) + pad("ops", w2) + pad("compute", 9) +
                    pad("weights", 9) + "output\n";
  for (const auto& r : rows) {
    const std::string ops = join_ops(r.ops);
    out += pad(r.cell, w0) + pad(r.type, w1) + pad(ops, w2) + pad(r.compute, 9) + pad(r.weights, 9) +
           r.output + "\n";
  }
  return out;
}

}  // namespace mixprec::amp
