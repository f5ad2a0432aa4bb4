// The invariants the GPU executor checks between stage_beam_layers and
// layer_images (host functions of beam_executor.h, so that they are tested
// where CI runs: without a GPU).
#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <vector>

#include "beam_executor.h"
#include "expect_error.h"

namespace pe = protondose::engine;
using protondose::InternalError;
using protondose::testing::message_of;

namespace {

std::vector<pe::HostLayerTables> group_of(std::vector<int> beam_layers) {
  std::vector<pe::HostLayerTables> group(beam_layers.size());
  for (std::size_t i = 0; i < group.size(); ++i) group[i].beam_layer = beam_layers[i];
  return group;
}

}  // namespace

TEST(StagedLayers, AGroupOfConsecutiveStagedLayersStartsAtItsFirst) {
  EXPECT_EQ(pe::staged_group_first_layer(group_of({0, 1, 2, 3}), 4), 0u);  // a whole beam
  EXPECT_EQ(pe::staged_group_first_layer(group_of({2, 3}), 5), 2u);
  EXPECT_EQ(pe::staged_group_first_layer(group_of({4}), 5), 4u);
  EXPECT_EQ(pe::staged_group_first_layer({}, 0), 0u);
}

TEST(StagedLayers, AGroupOutOfOrderUnstagedOrPastTheStagingIsAnInternalError) {
  std::string m = message_of<InternalError>([] { pe::staged_group_first_layer(group_of({1, 3}), 5); });
  EXPECT_NE(m.find("table 1 names beam layer 3; expected 2 of the 5 staged layers (0 to 4)"), std::string::npos) << m;
  m = message_of<InternalError>([] { pe::staged_group_first_layer(group_of({-1, 0}), 5); });
  EXPECT_NE(m.find("table 0 names beam layer -1"), std::string::npos) << m;
  m = message_of<InternalError>([] { pe::staged_group_first_layer(group_of({3, 4, 5}), 5); });
  EXPECT_NE(m.find("table 2 names beam layer 5; expected 5 of the 5 staged layers"), std::string::npos) << m;
  // A whole beam staged out of order: its first table is not layer 0.
  m = message_of<InternalError>([] { pe::staged_group_first_layer(group_of({1, 0}), 2); });
  EXPECT_NE(m.find("table 1 names beam layer 0; expected 2 of the 2 staged layers"), std::string::npos) << m;
}

// The GPU's layer kernel and halo binning agree on the halo's column groups
// (LayerStackArgs::halo_column_bin, HaloBinning::column_bin).
TEST(HaloColumnSums, TheColumnBinIsOneTwoFourOrEight) {
  for (int b : {1, 2, 4, 8}) EXPECT_NO_THROW(pe::check_halo_column_bin(b));
  for (int b : {0, 3, 16, -2}) {
    const std::string m = message_of<InternalError>([&] { pe::check_halo_column_bin(b); });
    EXPECT_NE(m.find("halo column bin " + std::to_string(b) + "; expected 1, 2, 4 or 8"), std::string::npos) << m;
  }
}

TEST(HaloColumnSums, TheBinningReadsTheLayerImagesColumnSumsWithAFactorThatTilesThem) {
  pe::kernels::HaloBinning h{16, 3, 3, 130, 120, 15, 14, 8};
  EXPECT_NO_THROW(pe::check_halo_binning(h, 8));
  std::string m = message_of<InternalError>([&] { pe::check_halo_binning(h, 4); });
  EXPECT_NE(m.find("halo binning: column bin 8 with factor 16; the layer images summed over 4 columns"),
            std::string::npos)
      << m;
  h.factor = 12;  // not a multiple of 8
  m = message_of<InternalError>([&] { pe::check_halo_binning(h, 8); });
  EXPECT_NE(m.find("column bin 8 with factor 12; the layer images summed over 8 columns, and the factor must be a "
                   "multiple of it"),
            std::string::npos)
      << m;
}

// The stack slices of each BEV depth, in the order the beam dose adds them:
// layer by layer, each layer's slice d while it has one.
TEST(DepthGroups, ListEachDepthsSlicesLayerByLayer) {
  std::vector<pe::HostLayerTables> layers(3);
  layers[0].scalars.stack_offset = 0;
  layers[0].scalars.slices = 4;
  layers[1].scalars.stack_offset = 4;
  layers[1].scalars.slices = 2;
  layers[2].scalars.stack_offset = 6;
  layers[2].scalars.slices = 3;
  const pe::DepthGroups g = pe::depth_groups(layers, 5);
  EXPECT_EQ(g.member_begin, (std::vector<int>{0, 3, 6, 8, 9, 9}));
  EXPECT_EQ(g.member_slices, (std::vector<int>{0, 4, 6, 1, 5, 7, 2, 8, 3}));
  const pe::DepthGroups none = pe::depth_groups({}, 2);
  EXPECT_EQ(none.member_begin, (std::vector<int>{0, 0, 0}));
  EXPECT_TRUE(none.member_slices.empty());
  EXPECT_EQ(pe::stack_depth_slices(layers, 9), (std::vector<int>{0, 1, 2, 3, 0, 1, 0, 1, 2}));
}

// The groups index stack slices as int (the superposer's stack shape): a
// slice past that range is a driver's mistake, named with its number.
TEST(DepthGroups, AStackSlicePastTheIntRangeIsAnInternalError) {
  std::vector<pe::HostLayerTables> layers(1);
  layers[0].scalars.stack_offset = static_cast<std::size_t>(INT_MAX);
  layers[0].scalars.slices = 2;
  const std::string m = message_of<InternalError>([&] { pe::depth_groups(layers, 2); });
  EXPECT_NE(m.find("depth groups: stack slice " + std::to_string(static_cast<std::size_t>(INT_MAX) + 1) +
                   " past the int range"),
            std::string::npos)
      << m;
}

// What trace_summary returns, checked against start_trace's cut-offs before
// the crop takes slices from the full grid (dose_engine.cpp).
TEST(TraceSummaryCheck, ACountPerLayerWithinTheFullGridPassesAndAnythingElseIsAnInternalError) {
  pe::TraceSummary s;
  s.entry_slice = 4;
  s.first_material_slice = 3;
  s.slices_before_cutoff = {0, 7, 97};  // 97 = 100 − 3: up to the full grid's end
  EXPECT_NO_THROW(pe::check_trace_summary(s, 3, 100));

  std::string m = message_of<InternalError>([&] { pe::check_trace_summary(s, 2, 100); });
  EXPECT_NE(m.find("trace summary: 3 cut-off counts for 2 layers"), std::string::npos) << m;
  pe::TraceSummary past = s;
  past.slices_before_cutoff[2] = 98;
  m = message_of<InternalError>([&] { pe::check_trace_summary(past, 3, 100); });
  EXPECT_NE(m.find("trace summary: layer 2 needs 98 slices; 0 to 97 lie past slice 3"), std::string::npos) << m;
  pe::TraceSummary negative = s;
  negative.slices_before_cutoff[0] = -1;
  m = message_of<InternalError>([&] { pe::check_trace_summary(negative, 3, 100); });
  EXPECT_NE(m.find("trace summary: layer 0 needs -1 slices"), std::string::npos) << m;
  for (int first : {-1, 100}) {
    pe::TraceSummary outside = s;
    outside.first_material_slice = first;
    m = message_of<InternalError>([&] { pe::check_trace_summary(outside, 3, 100); });
    EXPECT_NE(m.find("trace summary: first material slice " + std::to_string(first) +
                     " outside the full grid's 100 slices"),
              std::string::npos)
        << m;
  }
}

// superpose_stack and start_halo read the depth groups layer_images staged:
// a stack other than that one is a driver's mistake.
TEST(StagedStack, ASuperpositionOfAnotherStackThanTheStagedOneIsAnInternalError) {
  EXPECT_NO_THROW(pe::check_stack_staged("superpose_stack", 3211, 212, 3211, 212));
  std::string m = message_of<InternalError>([] { pe::check_stack_staged("superpose_stack", 3211, 212, 3000, 212); });
  EXPECT_NE(m.find("superpose_stack: not the stack of the last layer_images (3211 stack slices over 212 depth "
                   "slices; staged: 3000 over 212)"),
            std::string::npos)
      << m;
  m = message_of<InternalError>([] { pe::check_stack_staged("start_halo", 10, 5, 10, -1); });
  EXPECT_NE(m.find("start_halo: not the stack of the last layer_images (10 stack slices over 5 depth slices; "
                   "staged: 10 over -1)"),
            std::string::npos)
      << m;
}
