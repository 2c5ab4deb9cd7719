// Readable printing: a header line (shape, dtype, device) and the values nested like numpy,
// eliding the middle of long dimensions ("...") with edge_items values kept at each end.
#include <cmath>
#include <cstdio>
#include <ostream>

#include "mixprec/tensor.h"

namespace mixprec {
namespace {

std::string format_value(double v, bool floating) {
  char buf[48];
  if (!floating) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  else if (std::isnan(v)) std::snprintf(buf, sizeof buf, "nan");
  else if (std::isinf(v)) std::snprintf(buf, sizeof buf, v > 0 ? "inf" : "-inf");
  else std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void print_rec(std::string& out, const Tensor& t, const char* base, int64_t dim, int64_t off,
               int edge, int indent) {
  const int64_t n = t.shape()[static_cast<size_t>(dim)];
  const int64_t stride = t.strides()[static_cast<size_t>(dim)];
  const bool last = dim == t.dim() - 1;
  out += '[';
  for (int64_t i = 0; i < n; ++i) {
    if (n > 2 * edge && i == edge) {
      out += last ? "..., " : "...,\n" + std::string(static_cast<size_t>(indent + 1), ' ');
      i = n - edge - 1;
      continue;
    }
    if (last) {
      const double v = visit_dtype(t.dtype(), [&]<class T>() {
        return to_double(reinterpret_cast<const T*>(base)[off + i * stride]);
      });
      out += format_value(v, is_floating(t.dtype()));
      if (i + 1 < n) out += ", ";
    } else {
      print_rec(out, t, base, dim + 1, off + i * stride, edge, indent + 1);
      if (i + 1 < n) out += ",\n" + std::string(static_cast<size_t>(indent + 1), ' ');
    }
  }
  out += ']';
}

}  // namespace

std::string Tensor::str(int edge_items) const {
  if (!defined()) return "Tensor(undefined)";
  std::string out = "Tensor(shape=" + shape_str(shape()) + ", dtype=" +
                    std::string(dtype_name(dtype())) + ", device=" + device().str() + ")\n";
  if (!device().is_cpu()) return out + "<not on cpu>";
  const char* base = static_cast<const char*>(storage()->data());
  if (dim() == 0) {
    return out + format_value(item(), is_floating(dtype()));
  }
  print_rec(out, *this, base, 0, offset(), edge_items, 0);
  return out;
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace mixprec
