// DeviceSuperposer::queue_analysis: the analysis and its bucket counts queued
// ahead of superpose_device. The superposition that goes on from them must be
// the one superpose_device computes alone, for every method (those without
// the split ignore it); a superposition of other arrays in between must not
// take the queued analysis; a malformed request is an InputError at once.
// Skips, with a message, when no CUDA device is present.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "protondose/core/error.h"
#include "protondose/gpu/device_superposition.h"
#include "protondose/gpu/superposition.h"
#include "stack_fixtures.h"

namespace protondose {
namespace {

using testing::make_slice_uniform;
using testing::MethodVariant;
using testing::Stack;

/// Uniform, scattered and empty slices, summed in two groups (the engine's
/// request): every path of the dispatcher.
Stack mixed_stack(unsigned seed) {
  Stack st = testing::random_stack("queued analysis", seed, 8, 90, 70, 12, true);
  make_slice_uniform(st, 0, 1.5f, 1.5f);
  make_slice_uniform(st, 3, 3.5f, 2.0f);
  make_slice_uniform(st, 6, 0.4f, 0.4f);
  for (int y = 0; y < st.shape.rows; ++y)
    for (int x = 0; x < st.shape.cols; ++x) st.image[st.index(5, y, x)] = 0.0f;  // all zero
  return st;
}

/// A stack's arrays, its output and two group planes in device memory.
struct DeviceStack {
  std::size_t n = 0, plane = 0;
  float* floats = nullptr;
  int* groups = nullptr;  ///< begin {0, 3, 8}, members 7 6 0 | 1 2 3 4 5
  SuperpositionInput in;

  explicit DeviceStack(const Stack& st) : n(st.shape.pixel_count()), plane(n / st.shape.slices) {
    floats = DeviceSuperposer::allocate_device_floats(4 * n + 2 * plane);
    DeviceSuperposer::copy_to_device(floats, st.image.data(), n);
    DeviceSuperposer::copy_to_device(floats + n, st.sigma_x.data(), n);
    DeviceSuperposer::copy_to_device(floats + 2 * n, st.sigma_y.data(), n);
    const std::vector<float> zeros(2 * plane, 0.0f);
    DeviceSuperposer::copy_to_device(floats + 4 * n, zeros.data(), 2 * plane);
    const int ints[] = {0, 3, 8, 7, 6, 0, 1, 2, 3, 4, 5};
    std::vector<float> as_floats(sizeof ints / sizeof(int));
    std::memcpy(as_floats.data(), ints, sizeof ints);
    groups = reinterpret_cast<int*>(DeviceSuperposer::allocate_device_floats(as_floats.size()));
    DeviceSuperposer::copy_to_device(reinterpret_cast<float*>(groups), as_floats.data(), as_floats.size());
    in = {st.shape, {floats, n}, {floats + n, n}, {floats + 2 * n, n}};
    in.groups = {2, groups, groups + 3, floats + 4 * n};
  }
  ~DeviceStack() {
    DeviceSuperposer::free_device(floats);
    DeviceSuperposer::free_device(groups);
  }
  float* out() const { return floats + 3 * n; }
  /// The two group planes, then cleared for the next run.
  std::vector<float> take_groups() const {
    std::vector<float> g(2 * plane);
    DeviceSuperposer::copy_to_host(g.data(), floats + 4 * n, 2 * plane);
    const std::vector<float> zeros(2 * plane, 0.0f);
    DeviceSuperposer::copy_to_device(floats + 4 * n, zeros.data(), 2 * plane);
    return g;
  }
};

SuperpositionOptions options_of(const MethodVariant& v) {
  SuperpositionOptions o;
  o.deterministic = v.deterministic;
  o.tile_dispatch = v.dispatch;
  return o;
}

/// Bitwise for the deterministic variants and the gather; the float scatters'
/// atomics add in another order from run to run (then 10⁻⁶ of the maximum).
void expect_same(const MethodVariant& v, const std::vector<float>& got, const std::vector<float>& expected,
                 const std::string& what) {
  const testing::Difference d = testing::compare(got, expected);
  ASSERT_GT(d.reference_max, 1.0) << what << ": vacuous, the groups hold nothing";
  if (v.deterministic || v.method == SuperpositionMethod::kGpuGatherExact)
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0)
        << what << ": max relative difference " << d.relative();
  else
    EXPECT_LE(d.relative(), 1e-6) << what;
}

class QueuedAnalysis : public ::testing::TestWithParam<MethodVariant> {
 protected:
  void SetUp() override { PROTONDOSE_SKIP_WITHOUT_GPU(); }
};

TEST_P(QueuedAnalysis, GoesOnToTheSuperpositionOfTheSameArrays) {
  const MethodVariant& v = GetParam();
  const DeviceStack d(mixed_stack(21u));
  DeviceSuperposer device(v.method, options_of(v));
  device.superpose_device(d.in, d.out());
  const std::vector<float> alone = d.take_groups();
  device.queue_analysis(d.in, d.out(), nullptr);
  device.superpose_device(d.in, d.out());
  expect_same(v, d.take_groups(), alone, "queued, then superposed");
  // And again: the queued analysis is used once, the next call analyses anew.
  device.superpose_device(d.in, d.out());
  expect_same(v, d.take_groups(), alone, "superposed after the queued one");
}

// A superposition of other arrays between queue_analysis and the superposition
// it was queued for takes its own analysis, and the queued one is dropped: the
// second stack has other uniform slices and radii, so the first's bucket
// counts would put its slices on the wrong paths.
TEST_P(QueuedAnalysis, IsNotTakenByASuperpositionOfOtherArrays) {
  const MethodVariant& v = GetParam();
  Stack other_stack = mixed_stack(22u);
  make_slice_uniform(other_stack, 1, 2.5f, 2.5f);
  make_slice_uniform(other_stack, 0, 0.0f, 0.0f);
  const DeviceStack first(mixed_stack(21u)), other(other_stack);
  DeviceSuperposer device(v.method, options_of(v));
  device.superpose_device(first.in, first.out());
  const std::vector<float> first_alone = first.take_groups();
  device.superpose_device(other.in, other.out());
  const std::vector<float> other_alone = other.take_groups();

  device.queue_analysis(first.in, first.out(), nullptr);
  device.superpose_device(other.in, other.out());
  expect_same(v, other.take_groups(), other_alone, "the other arrays after a queued analysis");
  device.superpose_device(first.in, first.out());
  expect_same(v, first.take_groups(), first_alone, "the queued arrays, after the other ones");
  // The same output but another stack is another request too.
  device.queue_analysis(first.in, other.out(), nullptr);
  device.superpose_device(other.in, other.out());
  expect_same(v, other.take_groups(), other_alone, "the same output, other arrays");
}

INSTANTIATE_TEST_SUITE_P(EveryMethod, QueuedAnalysis, ::testing::ValuesIn(testing::every_method_variant(true)),
                         [](const auto& info) { return testing::method_variant_name(info); });

TEST(QueuedAnalysisInput, AMalformedRequestIsAnInputErrorAtOnce) {
  PROTONDOSE_SKIP_WITHOUT_GPU();
  const DeviceStack d(mixed_stack(21u));
  DeviceSuperposer device(SuperpositionMethod::kGpuScatterTensorCore, {});
  SuperpositionInput bad = d.in;
  bad.groups.count = -1;
  try {
    device.queue_analysis(bad, d.out(), nullptr);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("slice groups"), std::string::npos) << e.what();
  }
  // The superposer is still usable.
  device.superpose_device(d.in, d.out());
  EXPECT_GT(testing::compare(d.take_groups(), std::vector<float>(2 * d.plane, 0.0f)).max_abs, 1.0);
}

}  // namespace
}  // namespace protondose
