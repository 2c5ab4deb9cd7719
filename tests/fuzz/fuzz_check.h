// FUZZ_REQUIRE for the fuzz targets: a property that an accepted input must satisfy. A failure is
// a finding, so it prints what broke and aborts (libFuzzer and the replay driver both report an
// abort with the input that caused it). Not for bad input: that must be a mixprec::Error.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_REQUIRE(cond, what)                                                          \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz: property violated: %s (%s) at %s:%d\n", what, #cond,    \
                   __FILE__, __LINE__);                                                   \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
