// The CPU twin of the separable Gaussian convolution (double precision).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "backends.h"
#include "protondose/core/error.h"
#include "protondose/core/parallel.h"
#include "protondose/gpu/gaussian_kernel.h"
#include "protondose/gpu/separable_convolution.h"

namespace protondose {

const char* method_name(ConvolutionMethod method) {
  switch (method) {
    case ConvolutionMethod::kCpuSeparable: return "cpu-separable";
    case ConvolutionMethod::kGpuSeparable: return "gpu-separable";
    case ConvolutionMethod::kGpuDirectGlobal: return "gpu-direct-global";
    case ConvolutionMethod::kGpuDirectConstant: return "gpu-direct-constant";
    case ConvolutionMethod::kGpuDirectSharedTile: return "gpu-direct-shared-tile";
  }
  return "unknown";
}

void validate_uniform_sigma_input(const UniformSigmaInput& input, const SuperpositionOptions& options) {
  const StackShape& shape = input.shape;
  // Reuse the per-pixel validation for the image by viewing σ as zero maps is
  // wasteful; check the pieces directly instead.
  if (shape.slices <= 0 || shape.rows <= 0 || shape.cols <= 0) {
    std::ostringstream m;
    m << "convolution: stack shape " << shape.slices << " x " << shape.rows << " x " << shape.cols
      << " (slices x rows x cols) must be positive in every dimension";
    throw InputError(m.str());
  }
  if (!(options.cutoff_sigmas > 0.0 && options.cutoff_sigmas <= 10.0)) {
    std::ostringstream m;
    m << "convolution: cut-off " << options.cutoff_sigmas << " sigma is outside the accepted range (0, 10]";
    throw InputError(m.str());
  }
  if (input.image.data == nullptr || input.image.size != shape.pixel_count()) {
    std::ostringstream m;
    m << "convolution: image has " << input.image.size << " values but the stack needs "
      << shape.pixel_count();
    throw InputError(m.str());
  }
  const float cutoff = static_cast<float>(options.cutoff_sigmas);
  for (const auto* axis : {&input.sigma_x_px, &input.sigma_y_px}) {
    const char* name = axis == &input.sigma_x_px ? "sigma_x" : "sigma_y";
    if (axis->data == nullptr || axis->size != static_cast<std::size_t>(shape.slices)) {
      std::ostringstream m;
      m << "convolution: " << name << " has " << axis->size << " values; one per slice ("
        << shape.slices << ") is needed";
      throw InputError(m.str());
    }
    for (int s = 0; s < shape.slices; ++s) {
      const float sigma = axis->data[s];
      if (!(sigma >= 0.0f) || !std::isfinite(sigma) ||
          gaussian_radius_px(sigma, cutoff) > kMaxKernelRadiusPx) {
        std::ostringstream m;
        m << "convolution: " << name << " = " << sigma << " px of slice " << s
          << " is not finite and >= 0 with a kernel radius <= " << kMaxKernelRadiusPx << " px";
        throw InputError(m.str());
      }
    }
  }
  for (std::size_t i = 0; i < input.image.size; ++i) {
    const float v = input.image.data[i];
    if (!(v >= 0.0f) || !std::isfinite(v)) {
      const std::size_t plane = static_cast<std::size_t>(shape.rows) * shape.cols;
      std::ostringstream m;
      m << "convolution: image value " << v << " at slice " << i / plane << ", row "
        << (i % plane) / shape.cols << ", col " << i % shape.cols << " is not a finite number >= 0";
      throw InputError(m.str());
    }
  }
}

std::vector<double> convolve_separable_cpu(const UniformSigmaInput& input,
                                           const SuperpositionOptions& options) {
  validate_uniform_sigma_input(input, options);
  const StackShape& shape = input.shape;
  const float cutoff = static_cast<float>(options.cutoff_sigmas);
  const std::size_t plane = static_cast<std::size_t>(shape.rows) * shape.cols;
  std::vector<double> output(shape.pixel_count(), 0.0);
  parallel_for_chunks(static_cast<std::size_t>(shape.slices), options.cpu_threads,
                      [&](std::size_t begin, std::size_t end, int) {
    std::vector<double> rows_done(plane), kx, ky;
    for (std::size_t s = begin; s < end; ++s) {
      const float sx = input.sigma_x_px.data[s], sy = input.sigma_y_px.data[s];
      const int rx = gaussian_radius_px(sx, cutoff), ry = gaussian_radius_px(sy, cutoff);
      kx.resize(rx + 1);
      ky.resize(ry + 1);
      for (int d = 0; d <= rx; ++d) kx[d] = pixel_integrated_gaussian(d, sx);
      for (int d = 0; d <= ry; ++d) ky[d] = pixel_integrated_gaussian(d, sy);
      const float* image = input.image.data + s * plane;
      for (int y = 0; y < shape.rows; ++y)  // row pass: along x
        for (int x = 0; x < shape.cols; ++x) {
          double sum = 0.0;
          for (int xi = std::max(0, x - rx); xi <= std::min(shape.cols - 1, x + rx); ++xi)
            sum += image[y * shape.cols + xi] * kx[std::abs(x - xi)];
          rows_done[y * shape.cols + x] = sum;
        }
      double* out = output.data() + s * plane;
      for (int y = 0; y < shape.rows; ++y)  // column pass: along y
        for (int x = 0; x < shape.cols; ++x) {
          double sum = 0.0;
          for (int yi = std::max(0, y - ry); yi <= std::min(shape.rows - 1, y + ry); ++yi)
            sum += rows_done[yi * shape.cols + x] * ky[std::abs(y - yi)];
          out[y * shape.cols + x] = sum;
        }
    }
  });
  return output;
}

namespace {

class CpuSeparableConvolver final : public Convolver {
 public:
  explicit CpuSeparableConvolver(const SuperpositionOptions& options) : options_(options) {}
  ConvolutionMethod method() const override { return ConvolutionMethod::kCpuSeparable; }
  void convolve(const UniformSigmaInput& input, float* output) override {
    const std::vector<double> result = convolve_separable_cpu(input, options_);
    std::transform(result.begin(), result.end(), output, [](double v) { return static_cast<float>(v); });
  }

 private:
  SuperpositionOptions options_;
};

}  // namespace

std::unique_ptr<Convolver> make_convolver(ConvolutionMethod method, const SuperpositionOptions& options) {
  if (method == ConvolutionMethod::kCpuSeparable) return std::make_unique<CpuSeparableConvolver>(options);
  return make_gpu_convolver(method, options);
}

}  // namespace protondose
