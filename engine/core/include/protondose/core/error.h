#pragma once
/// \file error.h
/// The one exception family of protondose. Libraries throw these; only main()
/// catches them, logs the message and returns exit_code(category()).

#include <stdexcept>
#include <string>

namespace protondose {

/// What went wrong, coarsely: decides the process exit code.
enum class ErrorCategory {
  kInput,         ///< a user's file or value is malformed, missing or inconsistent
  kData,          ///< a shipped or user-supplied data table (machine, HU curve) is invalid
  kConfig,        ///< command-line or manifest options contradict each other
  kNumerical,     ///< a computation produced NaN/Inf/negative dose or lost energy
  kCuda,          ///< a CUDA call or kernel launch failed
  kUnavailable,   ///< a feature or backend is not available in this build or machine
  kIo,            ///< reading or writing a file failed (permissions, disk full)
  kInternal,      ///< a broken invariant: a bug in protondose
};

/// Base of all protondose exceptions. The message must name the file, beam,
/// control point or spot involved, the offending value with its unit and the
/// accepted range.
class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, const std::string& message)
      : std::runtime_error(message), category_(category) {}
  ErrorCategory category() const noexcept { return category_; }

 private:
  ErrorCategory category_;
};

/// Malformed, missing or inconsistent input (DICOM, arrays, arguments).
class InputError : public Error {
 public:
  explicit InputError(const std::string& m) : Error(ErrorCategory::kInput, m) {}
};
/// Invalid data table (beam model, HU curve, depth-dose table).
class DataError : public Error {
 public:
  explicit DataError(const std::string& m) : Error(ErrorCategory::kData, m) {}
};
/// Contradictory or invalid options.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& m) : Error(ErrorCategory::kConfig, m) {}
};
/// A result failed its sanity checks (NaN, Inf, negative, energy balance).
class NumericalError : public Error {
 public:
  explicit NumericalError(const std::string& m) : Error(ErrorCategory::kNumerical, m) {}
};
/// A CUDA runtime call or kernel launch failed.
class CudaError : public Error {
 public:
  explicit CudaError(const std::string& m) : Error(ErrorCategory::kCuda, m) {}
};
/// A feature or backend is unavailable (built without CUDA, no GPU present,
/// unsupported DICOM feature).
class UnavailableError : public Error {
 public:
  explicit UnavailableError(const std::string& m) : Error(ErrorCategory::kUnavailable, m) {}
};
/// File-system failure (cannot open, cannot write, disk full, rename failed).
class IoError : public Error {
 public:
  explicit IoError(const std::string& m) : Error(ErrorCategory::kIo, m) {}
};
/// A broken internal invariant (a bug, never the user's fault).
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& m) : Error(ErrorCategory::kInternal, m) {}
};

/// Process exit code for a category (documented in docs/exit-codes.md).
/// 0 is success; 1 is reserved for "ran, but a requested check failed".
int exit_code(ErrorCategory category) noexcept;

/// Short stable name of a category ("input", "data", ...), used in logs and JSON.
const char* category_name(ErrorCategory category) noexcept;

}  // namespace protondose
