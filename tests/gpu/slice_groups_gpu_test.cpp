// Slice groups (SuperpositionInput::groups): the superposer sums the output's
// slices per group into the caller's planes — the engine's layers per depth.
// For every method and mode the groups must be bitwise what adding the
// ungrouped output's slices, in member order, to the planes gives: the
// separable column pass sums the uniform slices itself (their output is
// never written), the other paths sum the whole output afterwards. Skips,
// with a message, when no CUDA device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "protondose/core/error.h"
#include "protondose/gpu/device_superposition.h"
#include "protondose/gpu/superposition.h"
#include "stack_fixtures.h"

namespace protondose {
namespace {

using testing::make_slice_uniform;
using testing::Stack;

/// A stack of uniform slices (several radii, one anisotropic), scattered
/// ones, an all-zero one and one uniform slice with a single non-zero pixel.
Stack mixed_stack() {
  Stack st = testing::random_stack("mixed uniform, scattered and empty slices", 7u, 10, 150, 70, 12, true);
  const float sigmas[][2] = {{1.2f, 1.2f}, {3.5f, 2.0f}, {0.4f, 0.4f}, {3.9f, 3.9f}};
  for (int s : {0, 2, 5, 7}) {
    const float* sg = sigmas[s % 4];
    make_slice_uniform(st, s, sg[0], sg[1]);
  }
  for (int y = 0; y < st.shape.rows; ++y)
    for (int x = 0; x < st.shape.cols; ++x) {
      st.image[st.index(4, y, x)] = 0.0f;                                        // all zero
      st.image[st.index(9, y, x)] = (y == 75 && x == 69) ? 2.5f : 0.0f;          // one pixel at the edge
    }
  make_slice_uniform(st, 9, 2.2f, 2.2f);
  return st;
}

/// Groups over the 10 slices, members out of slice order, one empty group.
struct Groups {
  std::vector<int> begin{0, 3, 3, 5, 9, 10};
  std::vector<int> members{5, 0, 9, 4, 2, 1, 7, 3, 8, 6};
  int count() const { return static_cast<int>(begin.size()) - 1; }
};

struct DeviceArrays {
  float* floats = nullptr;
  int* ints = nullptr;
  ~DeviceArrays() {
    DeviceSuperposer::free_device(floats);
    DeviceSuperposer::free_device(ints);
  }
};

/// The ungrouped output (pass 0) and the groups (pass 1), both from the same
/// superposer, the group planes starting from `start`.
void run(SuperpositionMethod method, const SuperpositionOptions& options, const Stack& st, const Groups& g,
         const std::vector<float>& start, std::vector<float>* ungrouped, std::vector<float>* grouped) {
  const std::size_t n = st.shape.pixel_count(), plane = static_cast<std::size_t>(st.shape.rows) * st.shape.cols;
  const std::size_t group_floats = static_cast<std::size_t>(g.count()) * plane;
  DeviceArrays d;
  d.floats = DeviceSuperposer::allocate_device_floats(4 * n + group_floats);
  // The two int arrays live in a float allocation of their size (4 bytes each).
  d.ints = reinterpret_cast<int*>(DeviceSuperposer::allocate_device_floats(g.begin.size() + g.members.size()));
  DeviceSuperposer::copy_to_device(d.floats, st.image.data(), n);
  DeviceSuperposer::copy_to_device(d.floats + n, st.sigma_x.data(), n);
  DeviceSuperposer::copy_to_device(d.floats + 2 * n, st.sigma_y.data(), n);
  std::vector<float> as_floats(g.begin.size() + g.members.size());
  std::memcpy(as_floats.data(), g.begin.data(), g.begin.size() * sizeof(int));
  std::memcpy(as_floats.data() + g.begin.size(), g.members.data(), g.members.size() * sizeof(int));
  DeviceSuperposer::copy_to_device(reinterpret_cast<float*>(d.ints), as_floats.data(), as_floats.size());
  DeviceSuperposer::copy_to_device(d.floats + 4 * n, start.data(), group_floats);
  DeviceSuperposer device(method, options);
  SuperpositionInput in{st.shape, {d.floats, n}, {d.floats + n, n}, {d.floats + 2 * n, n}};
  const std::vector<float> garbage(n, 1.0e30f);
  DeviceSuperposer::copy_to_device(d.floats + 3 * n, garbage.data(), n);
  device.superpose_device(in, d.floats + 3 * n);
  ungrouped->resize(n);
  DeviceSuperposer::copy_to_host(ungrouped->data(), d.floats + 3 * n, n);
  DeviceSuperposer::copy_to_device(d.floats + 3 * n, garbage.data(), n);
  in.groups = {g.count(), d.ints, d.ints + g.begin.size(), d.floats + 4 * n};
  device.superpose_device(in, d.floats + 3 * n);
  grouped->resize(group_floats);
  DeviceSuperposer::copy_to_host(grouped->data(), d.floats + 4 * n, group_floats);
}

struct Variant {
  std::string name;
  SuperpositionMethod method;
  SuperpositionOptions options;
};

class SliceGroups : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    PROTONDOSE_SKIP_WITHOUT_GPU();
  }
};

/// Max |grouped − (start + Σ members of the ungrouped output)| over the
/// groups, relative to the largest expected value; and how many differ at all.
struct GroupDifference {
  double relative = 0;
  std::size_t differing = 0;
  double expected_max = 0;
};

GroupDifference compare_groups(const Stack& st, const Groups& g, const std::vector<float>& start,
                               const std::vector<float>& ungrouped, const std::vector<float>& grouped) {
  const std::size_t plane = static_cast<std::size_t>(st.shape.rows) * st.shape.cols;
  GroupDifference d;
  double max_abs = 0;
  for (int k = 0; k < g.count(); ++k)
    for (std::size_t i = 0; i < plane; ++i) {
      float expected = start[k * plane + i];
      for (int m = g.begin[k]; m < g.begin[k + 1]; ++m) expected += ungrouped[g.members[m] * plane + i];
      const float got = grouped[k * plane + i];
      if (std::memcmp(&expected, &got, sizeof got) != 0) ++d.differing;
      max_abs = std::max(max_abs, std::abs(static_cast<double>(got) - expected));
      d.expected_max = std::max(d.expected_max, std::abs(static_cast<double>(expected)));
    }
  d.relative = d.expected_max > 0 ? max_abs / d.expected_max : max_abs;
  return d;
}

std::vector<float> random_start(const Groups& g, const Stack& st) {
  std::vector<float> start(static_cast<std::size_t>(g.count()) * st.shape.rows * st.shape.cols);
  std::mt19937 rng(11u);
  std::uniform_real_distribution<float> value(0.0f, 3.0f);
  for (float& x : start) x = value(rng);
  return start;
}

/// Runs the variant ungrouped and grouped (from random group planes) and
/// expects the groups to be the ungrouped slices added in member order:
/// bitwise, or (where the scatter's float atomics add in another order from
/// run to run) to 10⁻⁶ of the largest value.
void expect_groups_match(const Variant& v, const Stack& st, const Groups& g, bool bitwise) {
  const std::vector<float> start = random_start(g, st);
  std::vector<float> ungrouped, grouped;
  run(v.method, v.options, st, g, start, &ungrouped, &grouped);
  const GroupDifference d = compare_groups(st, g, start, ungrouped, grouped);
  EXPECT_GT(d.expected_max, 3.0) << "vacuous: the slices added nothing";
  if (bitwise)
    EXPECT_EQ(d.differing, 0u) << v.name << ": max relative difference " << d.relative;
  else
    EXPECT_LE(d.relative, 1e-6) << v.name << ": " << d.differing << " values differ";
}

/// Whether two runs of the variant give bitwise the same output on a stack
/// whose slices all run separable or are empty: deterministic paths, and
/// host-launched buckets with the separable passes (the float atomics of the
/// scatter, which the others run such slices through, add in any order).
bool reproducible_on_uniform_slices(const Variant& v) {
  return v.options.deterministic || v.method == SuperpositionMethod::kGpuGatherExact ||
         (v.options.separable_uniform_slices && v.options.tile_dispatch == TileDispatch::kFromHost);
}

// Uniform and empty slices only: the column pass sums the groups itself
// there, and must give bitwise the ungrouped slices added in member order.
TEST_P(SliceGroups, OfUniformAndEmptySlicesAreTheUngroupedOnesAddedInOrder) {
  const Variant& v = GetParam();
  Stack st = mixed_stack();
  for (int s : {1, 3, 6, 8}) make_slice_uniform(st, s, 0.3f + 0.7f * s, 1.1f + 0.2f * s);
  const Groups g;
  expect_groups_match(v, st, g, reproducible_on_uniform_slices(v));
}

// Scattered slices among them: bitwise where the scatter is deterministic
// (its fixed-point mode, the gather); elsewhere its float atomics add in
// another order from run to run, so the two runs agree to rounding.
TEST_P(SliceGroups, WithScatteredSlicesAreTheUngroupedOnesAddedInOrder) {
  const Variant& v = GetParam();
  const Stack st = mixed_stack();
  const Groups g;
  expect_groups_match(v, st, g, v.options.deterministic || v.method == SuperpositionMethod::kGpuGatherExact);
}

// Groups without their device arrays, or a negative count: an InputError
// before anything runs, naming what is missing.
TEST(SliceGroupsInput, WithoutTheirArraysAreAnInputError) {
  PROTONDOSE_SKIP_WITHOUT_GPU();
  const Stack st = mixed_stack();
  const std::size_t n = st.shape.pixel_count();
  DeviceArrays d;
  d.floats = DeviceSuperposer::allocate_device_floats(4 * n);
  DeviceSuperposer::copy_to_device(d.floats, st.image.data(), n);
  DeviceSuperposer::copy_to_device(d.floats + n, st.sigma_x.data(), n);
  DeviceSuperposer::copy_to_device(d.floats + 2 * n, st.sigma_y.data(), n);
  DeviceSuperposer device(SuperpositionMethod::kGpuScatterTensorCore, {});
  SuperpositionInput in{st.shape, {d.floats, n}, {d.floats + n, n}, {d.floats + 2 * n, n}};
  for (const SuperpositionInput::SliceGroups bad :
       {SuperpositionInput::SliceGroups{2, nullptr, nullptr, nullptr}, SuperpositionInput::SliceGroups{-1}}) {
    in.groups = bad;
    try {
      device.superpose_device(in, d.floats + 3 * n);
      ADD_FAILURE() << "no error for " << bad.count << " groups";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("slice groups need their offsets, member slices and output"),
                std::string::npos)
          << e.what();
    }
  }
}

SuperpositionOptions with(bool deterministic, TileDispatch dispatch = TileDispatch::kFromHost,
                          bool separable = true) {
  SuperpositionOptions o;
  o.deterministic = deterministic;
  o.tile_dispatch = dispatch;
  o.separable_uniform_slices = separable;
  return o;
}

INSTANTIATE_TEST_SUITE_P(
    Methods, SliceGroups,
    ::testing::Values(Variant{"tensor cores", SuperpositionMethod::kGpuScatterTensorCore, with(false)},
                      Variant{"tensor cores, deterministic", SuperpositionMethod::kGpuScatterTensorCore, with(true)},
                      Variant{"tiled, host buckets", SuperpositionMethod::kGpuScatterTiled, with(false)},
                      Variant{"tiled, scatter only", SuperpositionMethod::kGpuScatterTiled,
                              with(false, TileDispatch::kFromHost, false)},
                      Variant{"tiled, device buckets", SuperpositionMethod::kGpuScatterTiled,
                              with(false, TileDispatch::kFromDevice)},
                      Variant{"gather", SuperpositionMethod::kGpuGatherExact, with(false)}),
    [](const ::testing::TestParamInfo<Variant>& variant) {
      std::string s;
      for (char c : variant.param.name) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return s;
    });

}  // namespace
}  // namespace protondose
