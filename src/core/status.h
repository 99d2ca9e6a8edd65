// Status and Result<T>: the typed errors of expected failures (bad file, bad JSON, KV full, prompt too
// long). Bugs use VOLT_CHECK (check.h) instead. The server maps StatusCode to an HTTP status and an
// OpenAI error type in one table (src/server).
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace volt {

enum class StatusCode {
    kOk = 0,
    kInvalidArgument,     // the caller's input is wrong (bad JSON field, bad flag value)
    kNotFound,            // a file, tensor, model or token that is not there
    kDataLoss,            // a file that is truncated or corrupt
    kOutOfRange,          // a value past a limit (prompt longer than max-model-len)
    kResourceExhausted,   // no KV blocks, queue full
    kFailedPrecondition,  // the system is not in a state to do it (model still loading)
    kUnavailable,         // transient: try again later
    kUnimplemented,       // a documented feature that does not exist yet
    kInternal,            // a failure of ours that is still recoverable (I/O error)
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
  public:
    Status() = default;
    Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
    static Status ok() { return Status(); }

    bool is_ok() const { return code_ == StatusCode::kOk; }
    StatusCode code() const { return code_; }
    const std::string& message() const { return message_; }
    // "NotFound: tensor model.norm.weight missing in /x/model.safetensors"
    std::string to_string() const;

  private:
    StatusCode code_ = StatusCode::kOk;
    std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
  public:
    Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
    Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).is_ok()); }  // NOLINT

    bool is_ok() const { return std::holds_alternative<T>(v_); }
    explicit operator bool() const { return is_ok(); }
    const Status& status() const {
        static const Status kOkStatus;
        return is_ok() ? kOkStatus : std::get<Status>(v_);
    }
    T& value() & { return std::get<T>(v_); }
    const T& value() const& { return std::get<T>(v_); }
    T&& value() && { return std::get<T>(std::move(v_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

  private:
    std::variant<T, Status> v_;
};

}  // namespace volt

// Return early from a function returning Status or Result<U> when `expr` (a Status) is not ok.
#define VOLT_RETURN_IF_ERROR(expr)                      \
    do {                                                \
        ::volt::Status volt_status_ = (expr);           \
        if (!volt_status_.is_ok()) return volt_status_; \
    } while (0)

#define VOLT_CONCAT_INNER_(a, b) a##b
#define VOLT_CONCAT_(a, b) VOLT_CONCAT_INNER_(a, b)
// `VOLT_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its Status.
#define VOLT_ASSIGN_OR_RETURN(decl, expr) \
    VOLT_ASSIGN_OR_RETURN_IMPL_(VOLT_CONCAT_(volt_result_, __LINE__), decl, expr)
#define VOLT_ASSIGN_OR_RETURN_IMPL_(tmp, decl, expr) \
    auto tmp = (expr);                               \
    if (!tmp.is_ok()) return tmp.status();           \
    decl = std::move(tmp).value()
