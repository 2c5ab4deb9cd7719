# Included by CTest after test discovery: tests whose names contain "Slow" or "Exhaustive" get the
# `slow` label in addition to `unit`, so sanitizer runs can skip them with -LE slow. Every test
# gets its environment here (gtest_discover_tests's PROPERTIES would split a list of variables):
# two OpenMP threads, and the fixed kernel order, the same kernels on every machine (the measured
# choice has its own tests, tests/ops/kernel_choice_test.cpp), with no cache written to $HOME (the
# folder is relative to the tests' working directory, the build's tests/).
# gtest_discover_tests leaves each binary's test names in the variable <target>_TESTS.
foreach(_module core ops autograd graph nn optim amp data train io)
  foreach(_t IN LISTS ${_module}_test_TESTS)
    set_tests_properties(${_t} PROPERTIES ENVIRONMENT
      "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive;MIXPREC_KERNEL_CHOICE=first;MIXPREC_CACHE_DIR=kernel-cache")
    if(_t MATCHES "Slow|Exhaustive")
      set_tests_properties(${_t} PROPERTIES LABELS "unit;slow")
    endif()
  endforeach()
endforeach()
