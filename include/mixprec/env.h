// The MIXPREC_* environment switches: one table (src/core/env.cpp) names each documented switch
// and the values it accepts; env::get reads a switch through it, so that a value outside them is
// a mixprec::Error naming the variable and the accepted values, never silently ignored. What a
// value means stays with the code that reads it (allocator, graph plan, dispatch, ...).
// check_environment() reads every switch at once: a program calls it before it starts work.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mixprec::env {

// The value of the documented switch `name`; nullopt when it is unset or empty. Throws when the
// value is not one the switch accepts; asserts that `name` is in the table.
std::optional<std::string> get(std::string_view name);

// get(name) of an integer switch as a number; `fallback` when unset.
int64_t get_integer(std::string_view name, int64_t fallback);

// get() of every documented switch: throws at the first one set to a value it does not accept.
void check_environment();

}  // namespace mixprec::env
