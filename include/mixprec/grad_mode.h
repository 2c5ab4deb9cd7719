// Grad mode: whether ops record the autograd graph on this thread (on by default), and the RAII
// guards that switch it for a scope (PyTorch's no_grad / enable_grad). The graph's structures are
// the library's own (src/core/autograd_graph.h); the engine is autograd/autograd.h.
#pragma once

namespace mixprec {

// Thread-local grad mode: when false, ops record no graph.
bool grad_enabled();
void set_grad_enabled(bool enabled);

class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

class EnableGradGuard {
 public:
  explicit EnableGradGuard(bool enabled = true) : prev_(grad_enabled()) {
    set_grad_enabled(enabled);
  }
  ~EnableGradGuard() { set_grad_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace mixprec
