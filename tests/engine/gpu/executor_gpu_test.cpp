// The GPU executor's own checks of the order its driver calls it in
// (engine/src/beam_executor.h). Skips, with a message, without a usable GPU.
#include <gtest/gtest.h>

#include <string>

#include "beam_executor.h"
#include "expect_error.h"
#include "protondose/engine/dose_engine.h"

namespace pe = protondose::engine;
using protondose::InternalError;
using protondose::testing::message_of;

// The halo's thread is started by layer_images (with a halo) and waits for
// start_halo's job: start_halo before any such layer images is a driver's
// mistake, an InternalError rather than a promise's std::future_error.
TEST(GpuBeamExecutor, StartHaloBeforeLayerImagesWithAHaloIsAnInternalError) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const auto exec = pe::make_gpu_beam_executor(protondose::SuperpositionMethod::kGpuScatterTensorCore, {});
  pe::kernels::BevGeometry fine{}, coarse{};
  const pe::kernels::HaloBinning binning{1, 0, 4, 4, 4, 4, 1};  // column bin 1: the executor's before any layer images
  const std::string m = message_of<InternalError>(
      [&] { exec->start_halo(fine, coarse, binning, 0, {}, pe::kernels::Affine3{}); });
  EXPECT_NE(m.find("start_halo: no layer images with a halo before it"), std::string::npos) << m;
  EXPECT_EQ(exec->wait_halo(), std::nullopt);  // and nothing runs
}

// trace_summary reads back what start_trace queued (through pinned memory
// the next layer_images reuses): without a start_trace before it, an
// InternalError rather than a read of stale memory.
TEST(GpuBeamExecutor, TraceSummaryWithoutAStartTraceIsAnInternalError) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const auto exec = pe::make_gpu_beam_executor(protondose::SuperpositionMethod::kGpuScatterTensorCore, {});
  const std::string m = message_of<InternalError>([&] { exec->trace_summary(); });
  EXPECT_NE(m.find("trace_summary: no start_trace before it"), std::string::npos) << m;
}
