#pragma once
// Status and StatusOr<T>: expected failures as values.
//
// A Status is either OK or a code plus a human message that says what failed, where
// (file:line, peer, table) and, where possible, how to fix it. Cheap to copy when OK.
// Thread-safety: values; no shared state.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "common/check.h"

namespace fleetps {

// Codes are part of the wire protocol (schemas/common.fbs StatusCode): append only.
enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kCorruption = 3,
  kIOError = 4,
  kTimedOut = 5,
  kBusy = 6,
  kUnavailable = 7,
  kInternal = 8,
  kAborted = 9,
  kPermissionDenied = 10,
};
// How many codes there are (the last one's value plus one). common/net/frame.cc checks at
// compile time that the codes and their count are the schema's.
inline constexpr size_t kStatusCodeCount = 11;

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
  static Status IOError(std::string msg) { return {StatusCode::kIOError, std::move(msg)}; }
  static Status TimedOut(std::string msg) { return {StatusCode::kTimedOut, std::move(msg)}; }
  static Status Busy(std::string msg) { return {StatusCode::kBusy, std::move(msg)}; }
  static Status Unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }
  static Status Aborted(std::string msg) { return {StatusCode::kAborted, std::move(msg)}; }
  static Status PermissionDenied(std::string msg) { return {StatusCode::kPermissionDenied, std::move(msg)}; }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  const std::string& message() const;
  // "InvalidArgument: <message>" or "OK".
  std::string ToString() const;

  // Returns a copy with `context + ": "` prepended to the message (no-op when OK).
  Status WithContext(std::string_view context) const;

  bool IsInvalidArgument() const { return code() == StatusCode::kInvalidArgument; }
  bool IsNotFound() const { return code() == StatusCode::kNotFound; }
  bool IsCorruption() const { return code() == StatusCode::kCorruption; }
  bool IsIOError() const { return code() == StatusCode::kIOError; }
  bool IsTimedOut() const { return code() == StatusCode::kTimedOut; }
  bool IsBusy() const { return code() == StatusCode::kBusy; }
  bool IsUnavailable() const { return code() == StatusCode::kUnavailable; }
  bool IsPermissionDenied() const { return code() == StatusCode::kPermissionDenied; }

  // Explicitly discards a status where ignoring it is correct; say why at the call.
  void IgnoreError() const {}

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;  // null == OK
};

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    FLEETPS_CHECK(!std::get<Status>(v_).ok()) << "StatusOr built from an OK Status without a value";
  }
  StatusOr(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::OK() : std::get<Status>(v_); }

  const T& value() const& {
    FLEETPS_CHECK(ok()) << "value() on error: " << std::get<Status>(v_).ToString();
    return std::get<T>(v_);
  }
  T& value() & {
    FLEETPS_CHECK(ok()) << "value() on error: " << std::get<Status>(v_).ToString();
    return std::get<T>(v_);
  }
  T&& value() && {
    FLEETPS_CHECK(ok()) << "value() on error: " << std::get<Status>(v_).ToString();
    return std::get<T>(std::move(v_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace fleetps

#define FLEETPS_STATUS_CONCAT_INNER(a, b) a##b
#define FLEETPS_STATUS_CONCAT(a, b) FLEETPS_STATUS_CONCAT_INNER(a, b)

// Returns the status from the current function when it is not OK.
#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::fleetps::Status _fleetps_st = (expr);    \
    if (!_fleetps_st.ok()) return _fleetps_st; \
  } while (0)

// ASSIGN_OR_RETURN(auto x, Foo()); declares x from a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(FLEETPS_STATUS_CONCAT(_fleetps_sor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
