// The separable convolution's CPU twin against the kernel-superposition oracle:
// for a uniform σ the two are the same sum.
#include <gtest/gtest.h>

#include "protondose/core/error.h"
#include "protondose/gpu/separable_convolution.h"
#include "stack_fixtures.h"

namespace protondose {
namespace {

testing::Stack uniform_stack(unsigned seed, int slices, int rows, int cols,
                             const std::vector<float>& sigma_x, const std::vector<float>& sigma_y) {
  testing::Stack st = testing::random_stack("uniform", seed, slices, rows, cols, 1, false);
  const std::size_t plane = static_cast<std::size_t>(rows) * cols;
  for (int s = 0; s < slices; ++s)
    for (std::size_t i = 0; i < plane; ++i) {
      st.sigma_x[s * plane + i] = sigma_x[s];
      st.sigma_y[s * plane + i] = sigma_y[s];
    }
  return st;
}

TEST(SeparableConvolutionCpu, EqualsTheSuperpositionForUniformSigma) {
  const std::vector<float> sx{0.0f, 0.7f, 2.5f, 6.0f}, sy{1.2f, 0.0f, 4.1f, 2.0f};
  const testing::Stack st = uniform_stack(42u, 4, 37, 51, sx, sy);
  const UniformSigmaInput input{st.shape, st.input().image, {sx.data(), sx.size()}, {sy.data(), sy.size()}};
  const std::vector<double> separable = convolve_separable_cpu(input);
  const std::vector<double> superposition = superpose_cpu_reference(st.input());
  const testing::Difference d = testing::compare(separable, superposition);
  ASSERT_GT(d.reference_max, 0.0);
  EXPECT_LT(d.relative(), 1e-13) << "max diff " << d.max_abs;
}

TEST(SeparableConvolutionCpu, RejectsPerSliceSigmaOfTheWrongLengthOrValue) {
  const std::vector<float> image(2 * 4 * 4, 1.0f), one{1.0f}, two{1.0f, -1.0f};
  UniformSigmaInput input{{2, 4, 4}, {image.data(), image.size()}, {one.data(), 1}, {one.data(), 1}};
  try {
    convolve_separable_cpu(input);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sigma_x has 1 values; one per slice (2) is needed"), std::string::npos)
        << e.what();
  }
  input.sigma_x_px = {two.data(), 2};
  input.sigma_y_px = {two.data(), 2};
  try {
    convolve_separable_cpu(input);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sigma_x = -1 px of slice 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace protondose
