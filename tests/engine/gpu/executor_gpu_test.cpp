// The GPU executor's own checks of the order its driver calls it in
// (engine/src/beam_executor.h), and of the spreading it queues behind the
// trace. Skips, with a message, without a usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

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

namespace {

/// A 4³ water CT at 1 mm and a parallel beam of 4 × 4 rays along its k
/// axis, with one layer of one spot over the grid's centre (tables in
/// isocentre-plane mm and WEPL mm, made up but physical enough to put energy
/// into every slice before the cut-off).
struct OneSpotBeam {
  pe::PreparedCt ct;
  pe::kernels::BevGeometry grid{};
  pe::kernels::Affine3 ct_index_from_beam{{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, {0, 0, 0}};
  std::vector<protondose::engine::SpotProtons> spots{{1.5, 1.5, 1.0e6}};
  std::vector<pe::kernels::CurveNode> curve;
  std::vector<double> energy_mev{100.0, 99.0}, scattering{1.0e-4, 1.0e-4};
  std::vector<double> air_sigma_mm = std::vector<double>(4, 1.2);

  OneSpotBeam() {
    ct.ct_grid.size = {4, 4, 4};
    ct.out_grid = ct.ct_grid;
    ct.rsp = protondose::Volume<float>(ct.ct_grid, 1.0f);
    ct.density = protondose::Volume<float>(ct.ct_grid, 1.0f);
    ct.inverse_length_table = {1.0, 1.0};
    grid.pitch_x_mm = grid.pitch_y_mm = grid.depth_step_mm = 1.0;
    grid.inv_pitch_x_mm = grid.inv_pitch_y_mm = grid.inv_depth_step_mm = 1.0;
    grid.cols = grid.rows = grid.slices = 4;
    const double depth_mm[] = {0.0, 20.0}, idd[] = {1.0, 2.0}, cidd[] = {0.0, 3.0};
    curve = pe::kernels::curve_nodes(depth_mm, idd, cidd, 2);
  }
  /// The layer's tables, its spread σ (isocentre plane) `spread_sigma_mm`.
  pe::HostLayerTables layer(double spread_sigma_mm, int slices) const {
    pe::HostLayerTables t;
    t.beam_layer = 0;
    t.spots = &spots;
    t.curve = &curve;
    t.energy_mev = &energy_mev;
    t.scattering_factor = &scattering;
    t.air_sigma_x_mm = t.air_sigma_y_mm = &air_sigma_mm;
    t.scalars.inv_wepl_step_mm = 0.1;  // WEPL table nodes 10 mm apart
    t.scalars.spread_sigma_x_iso_mm = t.scalars.spread_sigma_y_iso_mm = spread_sigma_mm;
    t.scalars.cutoff_wepl_mm = 10.0;
    t.scalars.slices = slices;
    return t;
  }
  /// A GPU executor with this CT as its patient and a plan begun on it.
  std::unique_ptr<pe::BeamExecutor> executor() const {
    auto exec = pe::make_gpu_beam_executor(protondose::SuperpositionMethod::kGpuScatterTensorCore, {});
    exec->set_patient(ct);
    exec->begin_plan(ct.out_grid);
    return exec;
  }
  /// executor() with a beam begun and its trace started.
  std::unique_ptr<pe::BeamExecutor> traced_executor() const {
    auto exec = executor();
    exec->begin_beam();
    exec->start_trace(grid, ct_index_from_beam, {10.0});
    return exec;
  }
  pe::kernels::LayerStackArgs stack_args() const {
    pe::kernels::LayerStackArgs a{};
    a.grid = grid;
    a.halo_column_bin = 1;
    a.dose_to_water = true;
    a.cutoff_sigmas = 3.0f;
    a.spot_cutoff_sigmas = 3.0;
    return a;
  }
};

}  // namespace

// spread_beam_fluence spreads the spots of the beam that stage_beam_layers
// staged after the last trace: called before that, it would spread the
// previous beam's spots, so it is an InternalError.
TEST(GpuBeamExecutor, SpreadBeamFluenceBeforeTheBeamIsStagedIsAnInternalError) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const OneSpotBeam b;
  const auto exec = b.traced_executor();
  const std::string m = message_of<InternalError>([&] { exec->spread_beam_fluence(b.grid, {1.0, 1.0}, 3.0); });
  EXPECT_NE(m.find("spread_beam_fluence: the beam's layers were not staged after its trace"), std::string::npos)
      << m;
}

// The spots spread behind the trace (spread_beam_fluence) give the layer
// images that layer_images' own spreading gives; a spreading with another σ
// than the layer's tables carry is an InternalError, not another dose.
TEST(GpuBeamExecutor, FluenceSpreadBehindTheTraceGivesTheLayerImagesOfTheTablesAndMustMatchThem) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const OneSpotBeam b;
  const auto exec = b.executor();
  const pe::StagedBeamKey key{7, 0};
  // spread: 0 none (layer_images spreads), else the σ given to spread_beam_fluence.
  const auto images = [&](double spread_sigma_mm) {
    exec->begin_beam();
    exec->start_trace(b.grid, b.ct_index_from_beam, {10.0});
    exec->stage_beam_layers({b.layer(1.0, 1)}, key);
    if (spread_sigma_mm > 0) exec->spread_beam_fluence(b.grid, {spread_sigma_mm, spread_sigma_mm}, 3.0);
    const pe::TraceSummary traced = exec->trace_summary();
    EXPECT_EQ(traced.entry_slice, 0);
    const int slices = std::max(traced.slices_before_cutoff.at(0), 1);
    std::vector<pe::HostLayerTables> layers{b.layer(1.0, slices)};
    exec->begin_bev(static_cast<std::size_t>(slices) * 16);
    return exec->layer_images(b.stack_args(), static_cast<std::size_t>(slices), layers, false).energy_mev;
  };
  const double spread_in_layer_images = images(0.0);
  const double spread_behind_trace = images(1.0);
  EXPECT_GT(spread_in_layer_images, 0.0);
  // The same pixels; their energies summed by atomics in any order.
  EXPECT_NEAR(spread_behind_trace / spread_in_layer_images, 1.0, 1e-12);
  const std::string m = message_of<InternalError>([&] { images(0.8); });
  EXPECT_NE(m.find("layer_images: its rays' lateral layout, spread σ or cut-off differ from those of "
                   "spread_beam_fluence"),
            std::string::npos)
      << m;
}

// A computation that fails between start_trace and trace_summary leaves the
// trace's read-back queued into the pinned block that the next start_trace
// writes its cut-offs into: the next trace must still find its own cut-offs'
// slices (a long first trace, so that its read-back would land late).
TEST(GpuBeamExecutor, ATraceWhoseSummaryWasNeverReadDoesNotSpoilTheNextOnesCutoffs) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  pe::PreparedCt ct;  // water, 256 × 256 × 512 voxels at 1 mm
  ct.ct_grid.size = {256, 256, 512};
  ct.out_grid = ct.ct_grid;
  ct.rsp = protondose::Volume<float>(ct.ct_grid, 1.0f);
  ct.density = protondose::Volume<float>(ct.ct_grid, 1.0f);
  ct.inverse_length_table = {1.0, 1.0};
  pe::kernels::BevGeometry g{};  // a parallel beam of 256 × 256 rays along k
  g.pitch_x_mm = g.pitch_y_mm = g.depth_step_mm = 1.0;
  g.inv_pitch_x_mm = g.inv_pitch_y_mm = g.inv_depth_step_mm = 1.0;
  g.cols = g.rows = 256;
  g.slices = 512;
  const pe::kernels::Affine3 ct_index_from_beam{{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, {0, 0, 0}};
  const std::vector<double> cutoffs{100.0, 200.0, 300.0, 400.0};
  const auto fresh = pe::make_gpu_beam_executor(protondose::SuperpositionMethod::kGpuScatterTensorCore, {});
  fresh->set_patient(ct);
  fresh->start_trace(g, ct_index_from_beam, cutoffs);
  const pe::TraceSummary expected = fresh->trace_summary();
  ASSERT_EQ(expected.slices_before_cutoff.size(), cutoffs.size());
  const auto exec = pe::make_gpu_beam_executor(protondose::SuperpositionMethod::kGpuScatterTensorCore, {});
  exec->set_patient(ct);
  exec->start_trace(g, ct_index_from_beam, {50.0});  // its summary never read: the computation failed
  exec->start_trace(g, ct_index_from_beam, cutoffs);
  const pe::TraceSummary found = exec->trace_summary();
  EXPECT_EQ(found.entry_slice, expected.entry_slice);
  EXPECT_EQ(found.first_material_slice, expected.first_material_slice);
  EXPECT_EQ(found.slices_before_cutoff, expected.slices_before_cutoff);
  EXPECT_EQ(expected.slices_before_cutoff[0], 100);  // the near face of slice k is at k mm of water
}

// spread_beam_fluence takes two spread σ per layer of the staged beam: any
// other count is the engine's mistake, an InternalError naming both counts.
TEST(GpuBeamExecutor, SpreadBeamFluenceWithoutTwoSigmasPerLayerIsAnInternalError) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const OneSpotBeam b;
  const auto exec = b.traced_executor();
  exec->stage_beam_layers({b.layer(1.0, 1)}, pe::StagedBeamKey{3, 0});
  const std::string m = message_of<InternalError>([&] { exec->spread_beam_fluence(b.grid, {1.0, 1.0, 1.0}, 3.0); });
  EXPECT_NE(m.find("spread_beam_fluence: 3 spread σ values for a beam of 1 layers (two per layer)"), std::string::npos)
      << m;
  exec->trace_summary();  // the trace's read-back, before the executor goes
}

// A layer whose tables do not fit the layer kernel's shared memory
// (kMaxLayerTableSharedBytes, 52 KB) runs the kernel's variant that reads
// them from global memory (layer_kernel<…, kSharedTables = false>): its
// energy must be that of the variant for tables that fit. The same linear
// IDD as OneSpotBeam's two-node curve, as 2,001 nodes 0.01 mm apart (64 KB):
// the same CIDD to rounding.
TEST(GpuBeamExecutor, ALayerWhoseTablesExceedSharedMemoryGivesTheEnergyOfOneThatFits) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const OneSpotBeam b;
  constexpr int kNodes = 2001;
  std::vector<double> depth_mm(kNodes), idd(kNodes), cidd(kNodes);
  for (int i = 0; i < kNodes; ++i) {
    depth_mm[i] = 0.01 * i;
    idd[i] = 1.0 + depth_mm[i] / 20.0;                                // 1 at 0 mm, 2 at 20 mm
    cidd[i] = 0.1 * (depth_mm[i] + depth_mm[i] * depth_mm[i] / 40.0);  // its integral, per g/cm² (0.1 per mm)
  }
  const std::vector<pe::kernels::CurveNode> long_curve =
      pe::kernels::curve_nodes(depth_mm.data(), idd.data(), cidd.data(), kNodes);
  ASSERT_GT(long_curve.size() * sizeof(pe::kernels::CurveNode), 52u * 1024u) << "the tables would fit";
  const auto exec = b.executor();
  const auto energy_with = [&](const std::vector<pe::kernels::CurveNode>& curve) {
    exec->begin_beam();
    exec->start_trace(b.grid, b.ct_index_from_beam, {10.0});
    pe::HostLayerTables staged = b.layer(1.0, 1);
    staged.curve = &curve;
    exec->stage_beam_layers({staged}, pe::StagedBeamKey{0, 0});  // not kept: staged anew each time
    const pe::TraceSummary traced = exec->trace_summary();
    const int slices = std::max(traced.slices_before_cutoff.at(0), 1);
    pe::HostLayerTables layer = b.layer(1.0, slices);
    layer.curve = &curve;
    std::vector<pe::HostLayerTables> layers{layer};
    exec->begin_bev(static_cast<std::size_t>(slices) * 16);
    return exec->layer_images(b.stack_args(), static_cast<std::size_t>(slices), layers, false).energy_mev;
  };
  const double in_shared_memory = energy_with(b.curve);
  const double in_global_memory = energy_with(long_curve);
  EXPECT_GT(in_shared_memory, 0.0);
  EXPECT_NEAR(in_global_memory / in_shared_memory, 1.0, 1e-9);
}
