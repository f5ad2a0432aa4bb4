#include "protondose/core/error.h"

namespace protondose {

int exit_code(ErrorCategory category) noexcept {
  switch (category) {
    case ErrorCategory::kInput: return 3;
    case ErrorCategory::kData: return 4;
    case ErrorCategory::kConfig: return 2;
    case ErrorCategory::kNumerical: return 5;
    case ErrorCategory::kCuda: return 6;
    case ErrorCategory::kUnavailable: return 7;
    case ErrorCategory::kIo: return 8;
    case ErrorCategory::kInternal: return 70;
  }
  return 70;
}

const char* category_name(ErrorCategory category) noexcept {
  switch (category) {
    case ErrorCategory::kInput: return "input";
    case ErrorCategory::kData: return "data";
    case ErrorCategory::kConfig: return "config";
    case ErrorCategory::kNumerical: return "numerical";
    case ErrorCategory::kCuda: return "cuda";
    case ErrorCategory::kUnavailable: return "unavailable";
    case ErrorCategory::kIo: return "io";
    case ErrorCategory::kInternal: return "internal";
  }
  return "internal";
}

}  // namespace protondose
