#pragma once
/// \file backend_choice.h
/// The backend a subcommand computes with: the user's --backend when given;
/// otherwise gpu when a CUDA device is usable, else cpu — an explicit, logged
/// choice made before any work, never a fallback after a failure.

#include <spdlog/spdlog.h>

#include <string>

#include "protondose/engine/dose_engine.h"

namespace protondose::cli {

inline engine::Backend choose_backend(const std::string& requested) {
  if (!requested.empty()) return engine::parse_backend(requested);
  std::string why;
  if (engine::gpu_backend_usable(&why)) {
    spdlog::info("backend: gpu (a CUDA device is usable; --backend cpu to override)");
    return engine::Backend::kGpu;
  }
  spdlog::info("backend: cpu (no usable GPU: {})", why);
  return engine::Backend::kCpu;
}

}  // namespace protondose::cli
