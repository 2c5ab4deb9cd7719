// The thread-local capture state behind core/capture.h.
#include "core/capture.h"

namespace mixprec::detail {

CaptureRecorder*& capture_recorder() {
  thread_local CaptureRecorder* r = nullptr;
  return r;
}

int& capture_depth() {
  thread_local int depth = 0;
  return depth;
}

void capture_fail(std::string reason) {
  if (CaptureRecorder* r = capture_recorder()) r->fail(std::move(reason));
}

}  // namespace mixprec::detail
