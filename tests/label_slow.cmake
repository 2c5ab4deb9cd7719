# Included by CTest after test discovery: tests whose names contain "Slow" or "Exhaustive" get the
# `slow` label in addition to `unit`, so sanitizer runs can skip them with -LE slow.
# gtest_discover_tests leaves each binary's test names in the variable <target>_TESTS.
foreach(_module core ops autograd graph nn optim amp data train io)
  foreach(_t IN LISTS ${_module}_test_TESTS)
    if(_t MATCHES "Slow|Exhaustive")
      set_tests_properties(${_t} PROPERTIES LABELS "unit;slow")
    endif()
  endforeach()
endforeach()
