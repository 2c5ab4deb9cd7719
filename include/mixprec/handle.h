// Handle<T>: a shared handle to a polymorphic object, built from a derived value (copied in), a
// shared_ptr (shared) or nullptr (none), so option structs and argument lists read like the seed:
// `{LossMonitor()}`, `{{"Accuracy", Accuracy()}}`,
// `.loss_scale_manager = FixedLossScaleManager(1024.0)`. (Not the reference backend, ops/ref/.)
#pragma once

#include <concepts>
#include <memory>
#include <type_traits>

namespace mixprec {

template <class T>
class Handle {
 public:
  Handle() = default;
  Handle(std::nullptr_t) {}  // NOLINT
  template <class U>
    requires std::derived_from<std::remove_cvref_t<U>, T>
  Handle(U&& value)  // NOLINT: implicit by design
      : ptr_(std::make_shared<std::remove_cvref_t<U>>(std::forward<U>(value))) {}
  template <class U>
    requires std::derived_from<U, T>
  Handle(std::shared_ptr<U> p) : ptr_(std::move(p)) {}  // NOLINT

  T* get() const { return ptr_.get(); }
  T* operator->() const { return ptr_.get(); }
  T& operator*() const { return *ptr_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  const std::shared_ptr<T>& shared() const { return ptr_; }

 private:
  std::shared_ptr<T> ptr_;
};

}  // namespace mixprec
