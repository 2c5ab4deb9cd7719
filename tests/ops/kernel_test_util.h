// Helpers for tests that run kernels directly, through the registry rather than by name, so that
// a test "on every path" covers whatever kernels the build registered (a new backend included).
#pragma once

#include <string>
#include <vector>

#include "ops/dispatch.h"

namespace mixprec::testing {

// Every kernel registered for P on p's device that accepts p, in dispatch order.
template <class P>
std::vector<ops::Impl<P>> accepting_kernels(const P& p) {
  std::vector<ops::Impl<P>> out;
  for (const ops::Impl<P>& k : ops::kernels<P>())
    if (k.device == p.device().type && k.declines(p).empty()) out.push_back(k);
  return out;
}

// The kernel dispatch would run for p without ForceImpl ("" if none accepts).
template <class P>
std::string chosen_kernel(const P& p) {
  const std::vector<ops::Impl<P>> k = accepting_kernels(p);
  return k.empty() ? std::string() : std::string(k.front().name);
}

// The kernel named `name` for P (device cpu); fails the test if none is registered.
template <class P>
ops::Impl<P> kernel_named(std::string_view name) {
  for (const ops::Impl<P>& k : ops::kernels<P>())
    if (k.name == name && k.device == Device::Type::cpu) return k;
  ADD_FAILURE() << "no kernel named " << name;
  return {name, Device::Type::cpu, ops::accept_all<P>, [](const P&) {}};
}

}  // namespace mixprec::testing
