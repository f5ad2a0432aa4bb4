// Slice boxes (SuperpositionInput::slice_box): where the producer promises
// zeros outside each slice's box, every method gives what it gives without
// boxes; where it wrote nothing there (NaN), what it gives with zeros there — bitwise wherever a run is reproducible (the gather, the
// deterministic mode, the separable passes), within the float scatters'
// run-to-run rounding otherwise — with and without slice groups; and the
// pixels outside a box are not read (a broken promise shows as the output of
// a stack zeroed there, which shows the boxes are used). Skips, with a
// message, when no CUDA device is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "protondose/gpu/device_superposition.h"
#include "protondose/gpu/superposition.h"
#include "stack_fixtures.h"

namespace protondose {
namespace {

using testing::make_slice_uniform;
using testing::Stack;

/// Zeros slice s's image outside the box (clipped as the contract clips it).
void zero_outside(Stack& st, int s, const SliceBox& b) {
  for (int y = 0; y < st.shape.rows; ++y)
    for (int x = 0; x < st.shape.cols; ++x)
      if (!(x >= b.col_begin && x < b.col_end && y >= b.row_begin && y < b.row_end)) st.image[st.index(s, y, x)] = 0.0f;
}

/// A stack whose slices are zero outside their boxes, and the boxes.
struct BoxedStack {
  Stack stack;
  std::vector<SliceBox> boxes;
};

/// 9 slices of 70 rows × 90 columns (three tiles wide, the last one part),
/// each zero outside its box:
///   0 an interior box, uniform σ (separable)
///   1 an interior box, random anisotropic σ (scattered)
///   2 a box past every edge (clipped to the slice), uniform
///   3 an empty box (begin == end), all zero
///   4 an inverted box (begin > end), all zero
///   5 a box of one pixel, uniform
///   6 a box on the right and bottom edges, random σ
///   7 a box of the top rows, uniform and anisotropic, r 13 (the row pass's
///     blocks below it have no row in the box)
///   8 a box of the left columns, uniform, r 40 (beyond the tile templates)
BoxedStack boxed_stack() {
  BoxedStack b{testing::random_stack("boxed slices", 1201u, 9, 70, 90, 12, true), {}};
  b.boxes = {{20, 61, 11, 47}, {5, 40, 30, 66}, {-10, 200, -3, 90}, {30, 30, 0, 70}, {50, 40, 10, 20},
             {44, 45, 33, 34}, {64, 90, 41, 70}, {0, 90, 0, 9},     {0, 17, 0, 70}};
  Stack& st = b.stack;
  for (int s = 0; s < st.shape.slices; ++s) zero_outside(st, s, b.boxes[s]);
  make_slice_uniform(st, 0, 2.4f, 2.4f);
  make_slice_uniform(st, 2, 1.1f, 3.0f);
  make_slice_uniform(st, 5, 0.9f, 0.9f);
  make_slice_uniform(st, 7, 4.3f, 1.6f);
  make_slice_uniform(st, 8, 13.2f, 13.2f);
  return b;
}

/// Groups over the 9 slices, members out of slice order, one group empty.
struct Groups {
  std::vector<int> begin{0, 4, 4, 6, 9};
  std::vector<int> members{7, 0, 3, 8, 2, 5, 1, 6, 4};
  int count() const { return static_cast<int>(begin.size()) - 1; }
};

/// Floats and ints in device memory, freed at the end of the scope.
struct DeviceFloats {
  float* data;
  explicit DeviceFloats(std::size_t n) : data(DeviceSuperposer::allocate_device_floats(n)) {}
  ~DeviceFloats() { DeviceSuperposer::free_device(data); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
};

/// Copies 4-byte values (ints, SliceBoxes) to the device through a float allocation of their size.
template <class T>
void copy_words_to_device(float* d, const std::vector<T>& values) {
  static_assert(sizeof(T) % sizeof(float) == 0);
  std::vector<float> words(values.size() * sizeof(T) / sizeof(float));
  std::memcpy(words.data(), values.data(), values.size() * sizeof(T));
  DeviceSuperposer::copy_to_device(d, words.data(), words.size());
}

/// One superposition on the device: the output (the group planes, each
/// starting from 0.5, where groups are given), with the boxes if given.
std::vector<float> run(SuperpositionMethod method, const SuperpositionOptions& options, const Stack& st,
                       const std::vector<SliceBox>* boxes, const Groups* groups) {
  const std::size_t n = st.shape.pixel_count(), plane = static_cast<std::size_t>(st.shape.rows) * st.shape.cols;
  const std::size_t group_floats = groups ? static_cast<std::size_t>(groups->count()) * plane : 0;
  const std::size_t box_floats = boxes ? boxes->size() * sizeof(SliceBox) / sizeof(float) : 0;
  const std::size_t int_floats = groups ? groups->begin.size() + groups->members.size() : 0;
  DeviceFloats d(4 * n + group_floats + box_floats + int_floats);
  float* image = d.data;
  float* out = d.data + 3 * n;
  float* group_out = d.data + 4 * n;
  float* box_words = group_out + group_floats;
  float* int_words = box_words + box_floats;
  DeviceSuperposer::copy_to_device(image, st.image.data(), n);
  DeviceSuperposer::copy_to_device(image + n, st.sigma_x.data(), n);
  DeviceSuperposer::copy_to_device(image + 2 * n, st.sigma_y.data(), n);
  const std::vector<float> garbage(n, 1.0e30f);
  DeviceSuperposer::copy_to_device(out, garbage.data(), n);
  SuperpositionInput in{st.shape, {image, n}, {image + n, n}, {image + 2 * n, n}};
  if (boxes) {
    copy_words_to_device(box_words, *boxes);
    in.slice_box = reinterpret_cast<const SliceBox*>(box_words);
  }
  if (groups) {
    const std::vector<float> start(group_floats, 0.5f);
    DeviceSuperposer::copy_to_device(group_out, start.data(), group_floats);
    copy_words_to_device(int_words, groups->begin);
    copy_words_to_device(int_words + groups->begin.size(), groups->members);
    const int* ints = reinterpret_cast<const int*>(int_words);
    in.groups = {groups->count(), ints, ints + groups->begin.size(), group_out};
  }
  DeviceSuperposer device(method, options);
  device.superpose_device(in, out);
  std::vector<float> result(groups ? group_floats : n);
  DeviceSuperposer::copy_to_host(result.data(), groups ? group_out : out, result.size());
  return result;
}

void expect_bitwise_equal(const std::vector<float>& got, const std::vector<float>& expected, const char* what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    unsigned a, b;
    std::memcpy(&a, &got[i], sizeof a);
    std::memcpy(&b, &expected[i], sizeof b);
    ASSERT_EQ(a, b) << what << ", value " << i << ": " << got[i] << " against " << expected[i];
  }
}

using Variant = testing::MethodVariant;

class SliceBoxes : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    PROTONDOSE_SKIP_WITHOUT_GPU();
    options_.deterministic = GetParam().deterministic;
    options_.tile_dispatch = GetParam().dispatch;
  }

  /// Host-launched buckets: the uniform slices run as separable passes.
  bool separable() const {
    const SuperpositionMethod m = GetParam().method;
    return m == SuperpositionMethod::kGpuScatterTensorCore || m == SuperpositionMethod::kGpuScatterRegisterBlocked ||
           (m == SuperpositionMethod::kGpuScatterTiled && GetParam().dispatch == TileDispatch::kFromHost);
  }

  /// With and without the boxes: bitwise where `reproducible`, else within
  /// the float atomics' run-to-run rounding.
  void expect_same_with_and_without(const Stack& st, const std::vector<SliceBox>& boxes, const Groups* groups,
                                    bool reproducible) {
    SCOPED_TRACE(st.name + (groups ? ", grouped" : ""));
    const std::vector<float> without = run(GetParam().method, options_, st, nullptr, groups);
    const std::vector<float> with = run(GetParam().method, options_, st, &boxes, groups);
    if (reproducible) {
      expect_bitwise_equal(with, without, "with boxes against without");
    } else {
      const testing::Difference d = testing::compare(with, without);
      EXPECT_LE(d.relative(), 1e-6) << "max |with − without| = " << d.max_abs << " at " << d.worst_index;
    }
  }

  SuperpositionOptions options_;
};

TEST_P(SliceBoxes, MixedStackGivesTheSameOutputWithAndWithoutGroups) {
  const BoxedStack b = boxed_stack();
  const bool reproducible = options_.deterministic || GetParam().method == SuperpositionMethod::kGpuGatherExact;
  expect_same_with_and_without(b.stack, b.boxes, nullptr, reproducible);
  const Groups groups;
  expect_same_with_and_without(b.stack, b.boxes, &groups, reproducible);
}

TEST_P(SliceBoxes, UniformSlicesGiveBitwiseTheSameOutput) {
  // Every non-empty slice uniform: the separable passes alone, which add in
  // a fixed order, so float runs are reproducible too.
  BoxedStack b = boxed_stack();
  make_slice_uniform(b.stack, 1, 1.7f, 2.6f);
  make_slice_uniform(b.stack, 6, 3.3f, 3.3f);
  const bool reproducible =
      options_.deterministic || separable() || GetParam().method == SuperpositionMethod::kGpuGatherExact;
  expect_same_with_and_without(b.stack, b.boxes, nullptr, reproducible);
  const Groups groups;
  expect_same_with_and_without(b.stack, b.boxes, &groups, reproducible);
}

TEST_P(SliceBoxes, NoPixelOutsideABoxIsRead) {
  // The contract's other half: the producer need not write the pixels
  // outside a box (the engine's layer kernel does not). NaN there, image and
  // σ alike (an unread NaN changes nothing; a read one spoils the output or
  // is reported as an invalid pixel), and the output is that of the stack
  // zeroed there — with and without groups.
  const BoxedStack b = boxed_stack();
  Stack unwritten = b.stack;
  unwritten.name = "boxed slices, NaN outside the boxes";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int s = 0; s < unwritten.shape.slices; ++s) {
    const SliceBox& box = b.boxes[s];
    for (int y = 0; y < unwritten.shape.rows; ++y)
      for (int x = 0; x < unwritten.shape.cols; ++x)
        if (!(x >= box.col_begin && x < box.col_end && y >= box.row_begin && y < box.row_end)) {
          const std::size_t i = unwritten.index(s, y, x);
          unwritten.image[i] = unwritten.sigma_x[i] = unwritten.sigma_y[i] = nan;
        }
  }
  const bool reproducible = options_.deterministic || GetParam().method == SuperpositionMethod::kGpuGatherExact;
  const Groups groups;
  for (const Groups* g : {static_cast<const Groups*>(nullptr), &groups}) {
    SCOPED_TRACE(g ? "grouped" : "ungrouped");
    const std::vector<float> expected = run(GetParam().method, options_, b.stack, &b.boxes, g);
    const std::vector<float> got = run(GetParam().method, options_, unwritten, &b.boxes, g);
    if (reproducible) {
      expect_bitwise_equal(got, expected, "NaN outside the boxes against zeros there");
    } else {
      const testing::Difference d = testing::compare(got, expected);
      EXPECT_LE(d.relative(), 1e-6) << "max |NaN outside − zeros outside| = " << d.max_abs << " at " << d.worst_index;
      for (std::size_t i = 0; i < got.size(); ++i) ASSERT_FALSE(std::isnan(got[i])) << "output " << i;
    }
  }
}

// Every method, the device-launched tile scatter and the atomic scatter in
// deterministic mode: the comparison is bitwise (their float modes are
// covered by the slice summary's suite and the others).
INSTANTIATE_TEST_SUITE_P(Methods, SliceBoxes, ::testing::ValuesIn(testing::every_method_variant(true)),
                         testing::method_variant_name<::testing::TestParamInfo<Variant>>);

class SliceBoxContract : public ::testing::Test {
 protected:
  void SetUp() override {
    PROTONDOSE_SKIP_WITHOUT_GPU();
  }
};

TEST_F(SliceBoxContract, TheSeparablePassesReadNothingOutsideTheBox) {
  // Non-zero pixels outside the box of a uniform slice: the row pass reads
  // none of them, so the output is that of the stack zeroed there (and not
  // that of the stack as it is: the box was used), grouped or not.
  Stack told = testing::random_stack("uniform, zeroed outside the box", 1202u, 2, 60, 75, 9, false);
  const std::vector<SliceBox> boxes{{10, 50, 20, 41}, {0, 75, 33, 60}};
  Stack read = told;
  read.name = "uniform, non-zero outside the box";
  for (int s = 0; s < 2; ++s) {
    zero_outside(told, s, boxes[s]);
    make_slice_uniform(told, s, 1.9f, 2.7f);
    make_slice_uniform(read, s, 1.9f, 2.7f);  // σ of told's non-zero pixels, and valid σ elsewhere
  }
  const SuperpositionOptions options;
  const auto method = SuperpositionMethod::kGpuScatterTensorCore;
  const Groups* ungrouped = nullptr;
  const std::vector<float> truth = run(method, options, told, nullptr, ungrouped);
  expect_bitwise_equal(run(method, options, read, &boxes, ungrouped), truth, "ungrouped, the box over a broken promise");
  EXPECT_NE(0, std::memcmp(run(method, options, read, nullptr, ungrouped).data(), truth.data(),
                           truth.size() * sizeof(float)))
      << "the pixels outside the box must change the output when there is no box";
  Groups groups;
  groups.begin = {0, 2};
  groups.members = {1, 0};
  expect_bitwise_equal(run(method, options, read, &boxes, &groups), run(method, options, told, nullptr, &groups),
                       "grouped, the box over a broken promise");
}

TEST_F(SliceBoxContract, TheAnalysisReadsNothingOutsideTheBox) {
  // Random σ (scattered): tiles wholly outside the box hold non-zero pixels;
  // the analysis reads none of them, so they join no bucket and the output
  // (deterministic mode: reproducible) is that of the stack zeroed there.
  // The box is tile-aligned (32 × 16), so no scattered tile crosses its edge.
  Stack told = testing::random_stack("random σ, zeroed outside the box", 1203u, 1, 64, 96, 10, true);
  const std::vector<SliceBox> boxes{{32, 64, 16, 48}};
  const Stack read = told;
  zero_outside(told, 0, boxes[0]);
  SuperpositionOptions options;
  options.deterministic = true;
  for (SuperpositionMethod method : {SuperpositionMethod::kGpuScatterTensorCore, SuperpositionMethod::kGpuScatterTiled}) {
    SCOPED_TRACE(method_name(method));
    const std::vector<float> truth = run(method, options, told, nullptr, nullptr);
    expect_bitwise_equal(run(method, options, read, &boxes, nullptr), truth, "the box over a broken promise");
    EXPECT_NE(0, std::memcmp(run(method, options, read, nullptr, nullptr).data(), truth.data(),
                             truth.size() * sizeof(float)));
  }
}

}  // namespace
}  // namespace protondose
