#pragma once
/// \file atomic_file.h
/// Atomic output: write to a temporary file in the destination's folder, flush
/// it to disk, then rename over the destination. A reader never sees a partial
/// file, and a failure (disk full, killed process) leaves the old file or none.

#include <functional>
#include <string>

namespace protondose {

/// Temporary path beside `final_path` (same folder, so rename is atomic), unique
/// to this process and call.
std::string temporary_path_for(const std::string& final_path);

/// Calls write(tmp_path) to produce the file at a temporary path, fsyncs it and
/// renames it to final_path. On any failure the temporary file is removed and
/// IoError (naming final_path and the OS error) is thrown; exceptions from
/// `write` propagate after the clean-up.
void write_file_atomically(const std::string& final_path,
                           const std::function<void(const std::string& tmp_path)>& write);

/// Convenience: atomically writes `contents` to final_path.
void write_text_atomically(const std::string& final_path, const std::string& contents);

}  // namespace protondose
