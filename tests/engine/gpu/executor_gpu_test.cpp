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
  const pe::kernels::HaloBinning binning{1, 0, 0, 4, 4, 4, 4, 1};  // column bin 1: the executor's before any layer images
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

// Each trace's beam is staged after it (stage_beam_layers): layer images
// after a trace whose layers were never staged would spread another beam's
// spots (the last staged, still in device memory), so they are an
// InternalError; and the executor is destroyed cleanly after it.
TEST(GpuBeamExecutor, LayerImagesAfterATraceWithoutStagedLayersIsAnInternalError) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const auto exec = pe::make_gpu_beam_executor(protondose::SuperpositionMethod::kGpuScatterTensorCore, {});
  pe::PreparedCt ct;  // 4³ voxels of water at 1 mm
  ct.ct_grid.size = {4, 4, 4};
  ct.out_grid = ct.ct_grid;
  ct.rsp = protondose::Volume<float>(ct.ct_grid, 1.0f);
  ct.density = protondose::Volume<float>(ct.ct_grid, 1.0f);
  ct.inverse_length_table = {1.0, 1.0};
  exec->set_patient(ct);
  exec->begin_plan(ct.out_grid);
  exec->begin_beam();
  pe::kernels::BevGeometry g{};  // a parallel beam of 4 × 4 rays along k, through the CT
  g.x0_mm = g.y0_mm = 0.0;
  g.pitch_x_mm = g.pitch_y_mm = g.depth_step_mm = 1.0;
  g.inv_pitch_x_mm = g.inv_pitch_y_mm = g.inv_depth_step_mm = 1.0;
  g.cols = g.rows = g.slices = 4;
  pe::kernels::Affine3 ct_index_from_beam{{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, {0, 0, 0}};
  exec->start_trace(g, ct_index_from_beam, {10.0});
  const pe::TraceSummary traced = exec->trace_summary();
  EXPECT_EQ(traced.entry_slice, 0);
  ASSERT_EQ(traced.slices_before_cutoff.size(), 1u);
  pe::kernels::LayerStackArgs args{};
  args.grid = g;
  args.halo_column_bin = 1;
  std::vector<pe::HostLayerTables> layers(1);
  layers[0].beam_layer = 0;
  const std::string m = message_of<InternalError>([&] { exec->layer_images(args, 1, layers, false); });
  EXPECT_NE(m.find("layer_images: the beam's layers were not staged after its trace"), std::string::npos) << m;
}
