#include "core/status.h"

namespace volt {

const char* status_code_name(StatusCode code) {
    switch (code) {
        case StatusCode::kOk:
            return "OK";
        case StatusCode::kInvalidArgument:
            return "InvalidArgument";
        case StatusCode::kNotFound:
            return "NotFound";
        case StatusCode::kDataLoss:
            return "DataLoss";
        case StatusCode::kOutOfRange:
            return "OutOfRange";
        case StatusCode::kResourceExhausted:
            return "ResourceExhausted";
        case StatusCode::kFailedPrecondition:
            return "FailedPrecondition";
        case StatusCode::kUnavailable:
            return "Unavailable";
        case StatusCode::kUnimplemented:
            return "Unimplemented";
        case StatusCode::kInternal:
            return "Internal";
    }
    return "Unknown";
}

std::string Status::to_string() const {
    if (is_ok()) return "OK";
    return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace volt
