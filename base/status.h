// A run-time failure as a value, in the manner of LevelDB's and Reverb's Status: a code that
// says what the caller can do about it, and a message that names what failed and where.
// Whatever can fail at run time returns a Status, or a StatusOr<T> when it also makes a
// value; both are [[nodiscard]], so a failure cannot be dropped by accident. A role's body
// returns one and `stampede` maps its code to the process exit code in one place
// (base/exit_codes.h, ExitCode).
#pragma once

#include <string>
#include <utility>
#include <type_traits>
#include <variant>

namespace stampede::base {

enum class Code {
  kOk = 0,
  // Bad input: a config, a message, a plug-in, a checkpoint. Trying again cannot help.
  kInvalidArgument,
  // A peer or resource is not there (yet): a retry, or a restart, may help.
  kUnavailable,
  // The accelerator failed (out of memory, a failed launch): the same device would fail again.
  kDevice,
  // Stopped on request before the work was done.
  kCancelled,
  // Anything else that failed at run time.
  kInternal,
};

inline const char* CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: MESSAGE"; "ok" when ok.
  std::string ToString() const {
    return ok() ? std::string("ok") : std::string(CodeName(code_)) + ": " + message_;
  }
  // The same failure with where it happened in front: "actor 3: " + message. Ok stays ok.
  Status Within(const std::string& where) const {
    return ok() ? Status() : Status(code_, where + ": " + message_);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }
inline Status Unavailable(std::string message) { return Status(Code::kUnavailable, std::move(message)); }
inline Status DeviceError(std::string message) { return Status(Code::kDevice, std::move(message)); }
inline Status Cancelled(std::string message) { return Status(Code::kCancelled, std::move(message)); }
inline Status Internal(std::string message) { return Status(Code::kInternal, std::move(message)); }

inline const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kUnavailable: return "unavailable";
    case Code::kDevice: return "device error";
    case Code::kCancelled: return "cancelled";
    case Code::kInternal: return "internal";
  }
  return "unknown";
}

// A value, or the Status that says why there is none. Built from a failed Status only: an
// ok Status without a value is a programming error, turned into kInternal.
template <class T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status)  // NOLINT: implicit, as `return InvalidArgument(...)` reads
      : v_(status.ok() ? Internal("StatusOr built from an ok Status without a value") : std::move(status)) {}
  StatusOr(T value) : v_(std::move(value)) {}  // NOLINT
  // Any value that converts to T (a unique_ptr to a derived class).
  template <class U>
    requires(std::is_convertible_v<U &&, T> && !std::is_same_v<std::decay_t<U>, T> &&
             !std::is_convertible_v<U &&, Status>)
  StatusOr(U&& value) : v_(T(std::forward<U>(value))) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  // Ok when there is a value.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  // Only when ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace stampede::base

// Returns from the enclosing function (one returning Status or StatusOr) with `expr`'s
// Status when it failed, as Reverb's and Abseil's macros of these names.
#define STAMPEDE_STATUS_CONCAT_INNER(a, b) a##b
#define STAMPEDE_STATUS_CONCAT(a, b) STAMPEDE_STATUS_CONCAT_INNER(a, b)
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::stampede::base::Status _stampede_status = (expr); \
    if (!_stampede_status.ok()) return _stampede_status; \
  } while (false)
// `lhs` (a declaration, `auto x`, or an lvalue) gets the value of `rexpr` (a StatusOr),
// or the enclosing function returns its Status.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL(STAMPEDE_STATUS_CONCAT(_stampede_statusor_, __LINE__), lhs, rexpr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                          \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
