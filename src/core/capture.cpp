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

void capture_owns(const Tensor& t) {
  if (CaptureRecorder* r = capture_recorder(); r != nullptr && capture_depth() == 0 && t.defined())
    r->owns(t.impl());
}

void capture_writes(const Tensor& t) {
  if (CaptureRecorder* r = capture_recorder(); r != nullptr && capture_depth() == 1 && t.defined())
    r->writes(t.storage().get());
}

void capture_holds(const Tensor& t) {
  if (capture_recorder() != nullptr && capture_depth() > 0 && t.defined())
    (void)t.data_ptr();  // data_ptr() reports the access to the recorder, as from the kernel
}

}  // namespace mixprec::detail
