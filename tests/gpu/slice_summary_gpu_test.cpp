// The stack's slice summary (SuperpositionInput::slice_summary): with a
// correct summary, every method gives the output (bitwise where a run is
// reproducible), the split and the errors it gives without one; the slices a summary settles are not read (a
// summary that disagrees with the pixels wins, which shows it is used).
// Skips, with a message, when no CUDA device is present.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
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

unsigned bits_of(float v) {
  unsigned b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

/// The summary as the contract states it, computed on the host.
std::vector<unsigned long long> summarise(const Stack& st) {
  const std::size_t n = static_cast<std::size_t>(st.shape.slices);
  std::vector<unsigned long long> f(kSliceSummaryFields * n, 0ull);
  const auto valid = [](float v) { return v >= 0.0f && v <= 3.0e38f; };
  for (std::size_t s = 0; s < n; ++s) {
    unsigned long long& lo = f[kSummaryMinSigmaKey * n + s];
    unsigned long long& hi = f[kSummaryMaxSigmaKey * n + s];
    unsigned long long& largest = f[kSummaryMaxImage * n + s];
    lo = ~0ull;
    bool invalid = false;
    for (int y = 0; y < st.shape.rows; ++y)
      for (int x = 0; x < st.shape.cols; ++x) {
        const std::size_t i = st.index(static_cast<int>(s), y, x);
        const float v = st.image[i], sx = st.sigma_x[i], sy = st.sigma_y[i];
        if (!valid(v) || !valid(sx) || !valid(sy)) invalid = true;
        if (invalid || !(v > 0.0f)) continue;
        const unsigned long long key = static_cast<unsigned long long>(bits_of(sx)) << 32 | bits_of(sy);
        lo = std::min(lo, key);
        hi = std::max(hi, key);
        largest = std::max<unsigned long long>(largest, bits_of(v));
      }
    if (invalid) {
      lo = 0ull;
      hi = ~0ull;
    }
  }
  return f;
}

/// Slice s: image 0 everywhere, σ varying.
void make_slice_empty(Stack& st, int s) {
  for (int y = 0; y < st.shape.rows; ++y)
    for (int x = 0; x < st.shape.cols; ++x) {
      const std::size_t i = st.index(s, y, x);
      st.image[i] = 0.0f;
      st.sigma_x[i] = 0.3f * (x % 4);
      st.sigma_y[i] = 0.5f * (y % 3);
    }
}

struct Outcome {
  std::vector<float> output;
  DeviceSuperposer::Split split;
  std::string error;  ///< the InputError's message, if one was thrown
};

/// One superposition of the stack on the device, with `summary` (null: none).
Outcome run(SuperpositionMethod method, const SuperpositionOptions& options, const Stack& st,
            const std::vector<unsigned long long>* summary) {
  const std::size_t n = st.shape.pixel_count();
  // The summary travels as floats (two per 64-bit word) after the arrays,
  // 8-byte aligned (n rounded up to even).
  const std::size_t summary_offset = 4 * n + (n % 2 == 0 ? 0 : 1);
  const std::size_t summary_floats = summary ? 2 * summary->size() : 0;
  float* d = DeviceSuperposer::allocate_device_floats(summary_offset + summary_floats);
  Outcome out;
  try {
    DeviceSuperposer::copy_to_device(d, st.image.data(), n);
    DeviceSuperposer::copy_to_device(d + n, st.sigma_x.data(), n);
    DeviceSuperposer::copy_to_device(d + 2 * n, st.sigma_y.data(), n);
    SuperpositionInput in{st.shape, {d, n}, {d + n, n}, {d + 2 * n, n}};
    if (summary) {
      std::vector<float> words(summary_floats);
      std::memcpy(words.data(), summary->data(), summary_floats * sizeof(float));
      DeviceSuperposer::copy_to_device(d + summary_offset, words.data(), summary_floats);
      in.slice_summary = reinterpret_cast<const unsigned long long*>(d + summary_offset);
    }
    const std::vector<float> garbage(n, 1.0e30f);
    DeviceSuperposer::copy_to_device(d + 3 * n, garbage.data(), n);
    DeviceSuperposer device(method, options);
    try {
      device.superpose_device(in, d + 3 * n);
      out.split = device.last_split();
      out.output.resize(n);
      DeviceSuperposer::copy_to_host(out.output.data(), d + 3 * n, n);
    } catch (const InputError& e) {
      out.error = e.what();
    }
  } catch (...) {
    DeviceSuperposer::free_device(d);
    throw;
  }
  DeviceSuperposer::free_device(d);
  return out;
}

using Variant = testing::MethodVariant;

class SliceSummary : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    PROTONDOSE_SKIP_WITHOUT_GPU();
    options_.deterministic = GetParam().deterministic;
    options_.tile_dispatch = GetParam().dispatch;
  }

  void expect_same_with_and_without(const Stack& st) {
    SCOPED_TRACE(st.name);
    const std::vector<unsigned long long> summary = summarise(st);
    const Outcome without = run(GetParam().method, options_, st, nullptr);
    const Outcome with = run(GetParam().method, options_, st, &summary);
    EXPECT_EQ(with.error, without.error);
    EXPECT_EQ(with.split.separable_slices, without.split.separable_slices);
    EXPECT_EQ(with.split.scatter_tiles, without.split.scatter_tiles);
    ASSERT_EQ(with.output.size(), without.output.size());
    // The scatters' float atomics add in no fixed order, so two runs of the
    // same stack differ in the last bits; the gather and the deterministic
    // mode do not.
    if (options_.deterministic || GetParam().method == SuperpositionMethod::kGpuGatherExact) {
      for (std::size_t i = 0; i < with.output.size(); ++i)
        ASSERT_EQ(bits_of(with.output[i]), bits_of(without.output[i]))
            << "pixel " << i << ": " << with.output[i] << " with the summary, " << without.output[i] << " without";
    } else if (!with.output.empty()) {
      const testing::Difference d = testing::compare(with.output, without.output);
      EXPECT_LE(d.relative(), 1e-6) << "max |with − without| = " << d.max_abs << " at " << d.worst_index;
    }
  }

  SuperpositionOptions options_;
};

TEST_P(SliceSummary, MixedStackGivesBitwiseTheSameOutputAndSplit) {
  // 0, 2: uniform; 1: random σ; 3: empty; 4: uniform but for one pixel one
  // ulp wider; 5: uniform, σ 0; 6: uniform beyond the tile templates (r 45).
  Stack st = testing::random_stack("mixed", 411u, 7, 45, 70, 9, true);
  for (std::size_t i = 0; i < st.image.size(); i += 3) st.image[i] = 0.0f;
  make_slice_uniform(st, 0, 1.7f, 1.7f);
  make_slice_uniform(st, 2, 2.9f, 0.8f);
  make_slice_empty(st, 3);
  st.image[st.index(4, 20, 31)] = 0.5f;
  make_slice_uniform(st, 4, 2.2f, 2.2f);
  st.sigma_x[st.index(4, 20, 31)] = std::nextafter(2.2f, 3.0f);
  make_slice_uniform(st, 5, 0.0f, 0.0f);
  make_slice_uniform(st, 6, 15.0f, 14.2f);
  expect_same_with_and_without(st);
}

TEST_P(SliceSummary, AllEmptyAndAllUniformStacks) {
  Stack empty("all empty", 3, 20, 33);
  for (int s = 0; s < 3; ++s) make_slice_empty(empty, s);
  expect_same_with_and_without(empty);
  Stack uniform = testing::random_stack("all uniform", 412u, 4, 40, 24, 4, false);
  for (int s = 0; s < 4; ++s) make_slice_uniform(uniform, s, 0.5f + s, 1.5f + s);
  expect_same_with_and_without(uniform);
}

TEST_P(SliceSummary, InvalidPixelsAreReportedAsWithoutASummary) {
  // Slice 1 is uniform where the image is > 0, but a zero pixel has a NaN σ;
  // slice 2 is uniform with a radius beyond kMaxKernelRadiusPx.
  Stack st = testing::random_stack("invalid", 413u, 3, 16, 40, 3, false);
  make_slice_uniform(st, 1, 1.0f, 1.0f);
  st.image[st.index(1, 5, 7)] = 0.0f;
  st.sigma_x[st.index(1, 5, 7)] = std::numeric_limits<float>::quiet_NaN();
  expect_same_with_and_without(st);
  make_slice_uniform(st, 1, 1.0f, 1.0f);
  st.sigma_x[st.index(1, 5, 7)] = 1.0f;
  make_slice_uniform(st, 2, 90.0f, 1.0f);  // ceil(3 · 90) = 270 > 256
  expect_same_with_and_without(st);
}

INSTANTIATE_TEST_SUITE_P(Methods, SliceSummary, ::testing::ValuesIn(testing::every_method_variant(false)),
                         testing::method_variant_name<::testing::TestParamInfo<Variant>>);

TEST(SliceSummaryContract, ASettledSliceIsNotRead) {
  PROTONDOSE_SKIP_WITHOUT_GPU();
  // The pixels say σ 2.0; the summary says 1.0. The separable passes take the
  // summary's σ, so the output is that of a stack with σ 1.0: the slice was
  // settled by the summary, not read.
  Stack read("σ 2.0", 1, 30, 30), told("σ 1.0", 1, 30, 30);
  read.image[read.index(0, 15, 15)] = told.image[told.index(0, 15, 15)] = 1.0f;
  make_slice_uniform(read, 0, 2.0f, 2.0f);
  make_slice_uniform(told, 0, 1.0f, 1.0f);
  const std::vector<unsigned long long> summary = summarise(told);
  const SuperpositionOptions options;
  const Outcome lied_to = run(SuperpositionMethod::kGpuScatterTensorCore, options, read, &summary);
  const Outcome truth = run(SuperpositionMethod::kGpuScatterTensorCore, options, told, nullptr);
  ASSERT_EQ(lied_to.output.size(), truth.output.size());
  EXPECT_EQ(0, std::memcmp(lied_to.output.data(), truth.output.data(), truth.output.size() * sizeof(float)));
  EXPECT_EQ(lied_to.split.separable_slices, 1);
}

}  // namespace
}  // namespace protondose
